//! The requests a harvester sends (OAI-PMH 2.0 section 3.1): `GET {base}?verb=…&…`.

use url::Url;

use crate::datestamp::{Datestamp, Granularity};

/// One OAI-PMH request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `Identify` (section 4.2): granularity, deletion policy, earliest datestamp.
    Identify,
    /// `ListMetadataFormats` (section 4.4): whether the prefix to harvest is offered.
    ListMetadataFormats,
    /// `ListSets` (section 4.6): the repository's sets, whose `setSpec`s a selective
    /// harvest may name.
    ListSets,
    /// `ListRecords` (section 4.5), the first page of a selective harvest; with
    /// `identifiers`, `ListIdentifiers` (section 4.3: the same arguments, headers only).
    ListRecords {
        /// `ListIdentifiers` rather than `ListRecords`.
        identifiers: bool,
        /// `metadataPrefix`.
        prefix: String,
        /// `from`, inclusive (written in the repository's granularity).
        from: Option<Datestamp>,
        /// `until`, inclusive.
        until: Option<Datestamp>,
        /// `set` (section 3.4).
        set: Option<String>,
        /// The repository's granularity, in which `from` and `until` are written.
        granularity: Granularity,
    },
    /// The next page of a list: `verb` with the `resumptionToken` alone (section 3.5: an
    /// exclusive argument).
    Resume {
        /// The verb of the list (`ListRecords`, `ListIdentifiers`, …).
        verb: &'static str,
        /// The token, as the provider gave it.
        token: String,
    },
    /// `GetRecord` (section 4.1): one record; its URL is the URI of the resource a record
    /// becomes, dereferenceable at the provider.
    GetRecord {
        /// The item's `identifier`.
        identifier: String,
        /// `metadataPrefix`.
        prefix: String,
    },
}

impl Request {
    /// The verb's name.
    pub fn verb(&self) -> &'static str {
        match self {
            Request::Identify => "Identify",
            Request::ListMetadataFormats => "ListMetadataFormats",
            Request::ListSets => "ListSets",
            Request::ListRecords {
                identifiers: true, ..
            } => "ListIdentifiers",
            Request::ListRecords { .. } => "ListRecords",
            Request::Resume { verb, .. } => verb,
            Request::GetRecord { .. } => "GetRecord",
        }
    }

    /// The request as a URL on the repository's base URL (whose own query, if any, is
    /// replaced: the base URL of a repository has none, section 3.1.1).
    pub fn url(&self, base: &Url) -> Url {
        let mut url = base.clone();
        url.set_query(None);
        url.set_fragment(None);
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("verb", self.verb());
            match self {
                Request::Identify | Request::ListMetadataFormats | Request::ListSets => {}
                Request::ListRecords {
                    identifiers: _,
                    prefix,
                    from,
                    until,
                    set,
                    granularity,
                } => {
                    q.append_pair("metadataPrefix", prefix);
                    if let Some(f) = from {
                        q.append_pair("from", &f.format(*granularity));
                    }
                    if let Some(u) = until {
                        q.append_pair("until", &u.format(*granularity));
                    }
                    if let Some(s) = set {
                        q.append_pair("set", s);
                    }
                }
                Request::Resume { token, .. } => {
                    q.append_pair("resumptionToken", token);
                }
                Request::GetRecord { identifier, prefix } => {
                    q.append_pair("identifier", identifier);
                    q.append_pair("metadataPrefix", prefix);
                }
            }
        }
        url
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_as_urls() {
        let base = Url::parse("http://repo.example.org/oai/request?stale=1").unwrap();
        assert_eq!(
            Request::Identify.url(&base).as_str(),
            "http://repo.example.org/oai/request?verb=Identify"
        );
        let from = Datestamp::parse("2024-03-01T10:20:30Z");
        let list = Request::ListRecords {
            identifiers: false,
            prefix: "oai_dc".into(),
            from,
            until: None,
            set: Some("math:algebra".into()),
            granularity: Granularity::Day,
        };
        assert_eq!(
            list.url(&base).as_str(),
            "http://repo.example.org/oai/request?verb=ListRecords&metadataPrefix=oai_dc\
             &from=2024-03-01&set=math%3Aalgebra"
        );
        let headers = Request::ListRecords {
            identifiers: true,
            prefix: "oai_dc".into(),
            from,
            until: None,
            set: Some("math:algebra".into()),
            granularity: Granularity::Day,
        };
        assert_eq!(
            headers.url(&base).as_str(),
            "http://repo.example.org/oai/request?verb=ListIdentifiers&metadataPrefix=oai_dc\
             &from=2024-03-01&set=math%3Aalgebra"
        );
        assert_eq!(
            Request::ListSets.url(&base).as_str(),
            "http://repo.example.org/oai/request?verb=ListSets"
        );
        let next = Request::Resume {
            verb: "ListRecords",
            token: "a b&c=/d".into(),
        };
        assert_eq!(
            next.url(&base).as_str(),
            "http://repo.example.org/oai/request?verb=ListRecords&resumptionToken=a+b%26c%3D%2Fd"
        );
        let one = Request::GetRecord {
            identifier: "oai:repo.example.org:123".into(),
            prefix: "oai_dc".into(),
        };
        assert_eq!(
            one.url(&base).as_str(),
            "http://repo.example.org/oai/request?verb=GetRecord\
             &identifier=oai%3Arepo.example.org%3A123&metadataPrefix=oai_dc"
        );
    }
}
