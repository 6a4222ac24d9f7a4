//! HTTP `Link` header values (RFC 8288 section 3), parsed tolerantly: a malformed link-value
//! is skipped up to the next comma rather than failing the response, because the header is
//! only a discovery hint (spec section 6.3.3).

use url::Url;

/// One link-value of a `Link` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkValue {
    /// The target, resolved against the URL of the response.
    pub target: Url,
    /// Relation types of the first `rel` parameter, lowercased (RFC 8288 section 3.3 ignores
    /// later occurrences; relation types compare case-insensitively).
    pub rels: Vec<String>,
    /// Every other parameter, name lowercased, value unquoted, in order.
    pub params: Vec<(String, String)>,
}

impl LinkValue {
    /// True when `rel` (case-insensitive) is one of the relation types.
    pub fn has_rel(&self, rel: &str) -> bool {
        self.rels.iter().any(|r| r.eq_ignore_ascii_case(rel))
    }

    /// The first parameter called `name` (lowercase).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses one `Link` header field value (which may hold several comma-separated
/// link-values) and resolves targets against `base`. Unresolvable targets are skipped.
pub fn parse_link_header(value: &str, base: &Url) -> Vec<LinkValue> {
    let b = value.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b',') {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        if b[i] != b'<' {
            i = skip_to_comma(b, i);
            continue;
        }
        let Some(end) = value[i + 1..].find('>') else {
            break;
        };
        let target = value[i + 1..i + 1 + end].trim();
        i += end + 2;
        let mut rels: Option<Vec<String>> = None;
        let mut params = Vec::new();
        loop {
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            if i >= b.len() || b[i] == b',' {
                break;
            }
            if b[i] != b';' {
                i = skip_to_comma(b, i);
                break;
            }
            i += 1;
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            let start = i;
            while i < b.len() && !matches!(b[i], b'=' | b';' | b',') && !b[i].is_ascii_whitespace()
            {
                i += 1;
            }
            let name = value[start..i].to_ascii_lowercase();
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            let mut val = String::new();
            if i < b.len() && b[i] == b'=' {
                i += 1;
                while i < b.len() && b[i].is_ascii_whitespace() {
                    i += 1;
                }
                if i < b.len() && b[i] == b'"' {
                    i += 1;
                    while i < b.len() && b[i] != b'"' {
                        if b[i] == b'\\' && i + 1 < b.len() {
                            i += 1;
                        }
                        let ch = value[i..].chars().next().unwrap_or('\u{fffd}');
                        val.push(ch);
                        i += ch.len_utf8();
                    }
                    i += 1;
                } else {
                    let start = i;
                    while i < b.len() && !matches!(b[i], b';' | b',') {
                        i += 1;
                    }
                    val = value[start..i].trim().to_owned();
                }
            }
            if name.is_empty() {
                continue;
            }
            if name == "rel" {
                if rels.is_none() {
                    rels = Some(
                        val.split_ascii_whitespace()
                            .map(|r| r.to_ascii_lowercase())
                            .collect(),
                    );
                }
            } else {
                params.push((name, val));
            }
        }
        if let Ok(target) = base.join(target) {
            out.push(LinkValue {
                target,
                rels: rels.unwrap_or_default(),
                params,
            });
        }
    }
    out
}

fn skip_to_comma(b: &[u8], mut i: usize) -> usize {
    let mut quoted = false;
    while i < b.len() {
        match b[i] {
            b'"' => quoted = !quoted,
            b'\\' if quoted => i += 1,
            b',' if !quoted => return i + 1,
            _ => {}
        }
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rfc8288_examples() {
        let base = Url::parse("http://example.com/dataset1/page.html").unwrap();
        let v = parse_link_header(
            "<http://example.com/dataset1/capabilitylist.xml>;\r\n      rel=\"resourcesync\", \
             </hub/>; rel=hub; title=\"a, b; c\", <next>; REL=\"Next  Last\"; rel=ignored; type=text/html",
            &base,
        );
        assert_eq!(v.len(), 3, "{v:?}");
        assert_eq!(
            v[0].target.as_str(),
            "http://example.com/dataset1/capabilitylist.xml"
        );
        assert!(v[0].has_rel("resourcesync"));
        assert_eq!(v[1].target.as_str(), "http://example.com/hub/");
        assert_eq!(v[1].param("title"), Some("a, b; c"));
        assert_eq!(v[2].target.as_str(), "http://example.com/dataset1/next");
        assert_eq!(v[2].rels, vec!["next", "last"]);
        assert!(v[2].has_rel("LAST") && !v[2].has_rel("ignored"));
        assert_eq!(v[2].param("type"), Some("text/html"));
    }

    #[test]
    fn skips_garbage() {
        let base = Url::parse("http://example.com/").unwrap();
        let v = parse_link_header("garbage, \"x,y\", <a>; rel=\"x\\\"y\", <", &base);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].rels, vec!["x\"y"]);
        assert!(parse_link_header("", &base).is_empty());
    }
}
