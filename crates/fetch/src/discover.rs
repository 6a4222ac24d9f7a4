//! ResourceSync discovery (spec section 6.3): from any entry point URL to the Capability
//! Lists of a Source, one per set of resources (spec sections 8 and 9).
//!
//! Routes, tried in this order:
//!
//! 1. The entry is a Source Description or a Source Description Index (section 8): every
//!    Capability List it lists ([`Route::SourceDescription`]).
//! 2. The entry is a Capability List (section 9): itself ([`Route::CapabilityList`]).
//! 3. The entry is any other ResourceSync document (Resource List, Change List, dumps,
//!    manifests, their indexes): its `rs:ln rel="up"` leads to the Capability List (section
//!    6.2, [`Route::UpLink`]).
//! 4. The response carries `Link: <…>; rel="resourcesync"` (section 6.3.3,
//!    [`Route::LinkHeader`]).
//! 5. The response is an HTML page with `<link rel="resourcesync" href="…">` (section 6.3.3,
//!    [`Route::HtmlLink`]).
//! 6. Otherwise `{scheme}://{authority}/.well-known/resourcesync` (section 6.3.2,
//!    [`Route::WellKnown`]), then the `Sitemap:` directives of `/robots.txt` (section 6.3.4,
//!    [`Route::RobotsTxt`]), each leading to a Resource List (and its `up` link) or directly
//!    to a Capability List or Source Description.
//!
//! Capability values of earlier specifications ([`rsagg_model::Legacy`]: ResourceSync 0.9's
//! `resourcesync` Description, the `*-archive` values of ResourceSync Archives) are taken as
//! their 1.1 equivalents, each with a warning naming the specification it comes from, so a
//! 0.9/1.0-era Source is discovered and followed as a 1.1 one; relation types (`up`, `hub`)
//! compare case-insensitively.
//!
//! Every document goes through the [`Fetcher`] (guard, caps, retries), is read with the
//! streaming reader in lenient mode, and only as far as needed (the header of a Resource List
//! is enough to find its `up` link). Navigation is bounded: at most [`MAX_HOPS`] documents on
//! one path, no document twice, at most [`MAX_CAPABILITY_LISTS`] Capability Lists.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;

use rsagg_model::{Capability, DocumentKind, Mode};
use rsagg_sitemap::{DocumentReader, ReadOptions};
use tokio::io::AsyncReadExt;
use url::Url;

use crate::client::Fetcher;
use crate::config::{Access, Request};
use crate::link::LinkValue;
use crate::{Error, html};

/// Documents on one discovery path (entry → link target → Capability List …).
pub const MAX_HOPS: usize = 5;
/// Cap on a ResourceSync document read during discovery (the 50 MB limit of spec section
/// 7, as MiB to allow some slack).
pub const MAX_DOCUMENT_BYTES: u64 = 50 << 20;
/// Prefix of an HTML page scanned for `<link rel="resourcesync">` (they are in `<head>`).
pub const MAX_HTML_BYTES: u64 = 2 << 20;
/// Cap on `robots.txt`.
pub const MAX_ROBOTS_BYTES: u64 = 512 << 10;
/// Capability Lists read from one Source.
pub const MAX_CAPABILITY_LISTS: usize = 1000;
/// Bytes looked at to tell HTML from XML.
const SNIFF_BYTES: usize = 1024;

/// How the Capability Lists were found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `/.well-known/resourcesync` (spec 6.3.2).
    WellKnown,
    /// The entry point was a Source Description or its index (spec 8).
    SourceDescription,
    /// The entry point was a Capability List (spec 9).
    CapabilityList,
    /// `Sitemap:` directives in `/robots.txt` (spec 6.3.4).
    RobotsTxt,
    /// `<link rel="resourcesync">` in an HTML page (spec 6.3.3).
    HtmlLink,
    /// HTTP `Link: <…>; rel="resourcesync"` (spec 6.3.3).
    LinkHeader,
    /// The entry point was another ResourceSync document; its `rs:ln rel="up"` led to the
    /// Capability List (spec 6.2).
    UpLink,
}

/// The outcome of [`discover`].
#[derive(Clone, Debug)]
pub struct Discovery {
    /// How the Capability Lists were found.
    pub route: Route,
    /// The Source Description, when one was read or a Capability List links `up` to it.
    pub source_description: Option<Url>,
    /// One per set of resources.
    pub capability_lists: Vec<CapabilitySet>,
    /// What went wrong on the way without stopping discovery (routes that failed before the
    /// one that worked, unreadable Capability Lists, skipped entries).
    pub warnings: Vec<String>,
}

/// A Capability List and what it advertises (spec section 9; Change Notification section 5).
#[derive(Clone, Debug)]
pub struct CapabilitySet {
    /// The Capability List (its final URL, after redirects).
    pub url: Url,
    /// Capability documents, e.g. (`ResourceList`, `…/resourcelist.xml`), in document order,
    /// with capabilities as written (legacy values included).
    pub entries: Vec<(Capability, Url)>,
    /// The WebSub hub: `rs:ln rel="hub"` of the change-notification entry, else of the
    /// Capability List itself (Change Notification section 5).
    pub hub: Option<Url>,
    /// The change-notification topic: `<loc>` of the entry with capability
    /// `change-notification` (Change Notification section 5).
    pub topic: Option<Url>,
}

/// A change-notification channel (Change Notification 1.0.1 sections 2 and 5): the WebSub
/// topic of one set of resources and the hub that relays it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Channel {
    /// The topic URI (`<loc>` of the `change-notification` entry).
    pub topic: Url,
    /// The hub URI (its `rs:ln rel="hub"`).
    pub hub: Url,
}

impl CapabilitySet {
    /// The document advertised for capability `c` (a Capability List has one per
    /// capability, spec section 9): the entry with the 1.1 value, else one with a legacy value
    /// standing for it ([`Capability::means`]; a 1.0-era Source may offer its changes only as
    /// a `changelist-archive`). The 1.1 value wins because an archive beside a current list
    /// only holds older documents. The reader of the document tells an archive by its own
    /// capability.
    pub fn get(&self, c: Capability) -> Option<&Url> {
        self.entries
            .iter()
            .find(|(k, _)| *k == c)
            .or_else(|| self.entries.iter().find(|(k, _)| k.means(&c)))
            .map(|(_, u)| u)
    }

    /// The set's change-notification channel, when the Capability List advertises a topic
    /// and a hub for it (CN 1.0.1 section 5); without a hub nobody can subscribe.
    pub fn notification(&self) -> Option<Channel> {
        Some(Channel {
            topic: self.topic.clone()?,
            hub: self.hub.clone()?,
        })
    }
}

/// Finds the Capability Lists of the Source behind `entry` (any URL: a Source Description, a
/// Capability List, any capability document, an HTML page, a site root…); see the module
/// documentation for the routes. Fails with [`Error::NotDiscovered`] listing every route
/// tried, or at once when the address guard refuses the entry.
pub async fn discover(f: &Fetcher, entry: &Url, access: &Access) -> Result<Discovery, Error> {
    let mut cx = Cx {
        f,
        access,
        visited: HashSet::new(),
        read: HashMap::new(),
        warnings: Vec::new(),
    };
    // Routes 1–5: what the entry itself is or points at.
    let probed = cx.probe(entry, 0).await;
    // An OAI-PMH base URL given without `kind = "oai-pmh"` would otherwise be read as a
    // ResourceSync Source quietly (its host's well-known URI may well offer one): say so.
    if let Some(hint) = oai_hint(&cx, entry, &probed).await {
        tracing::warn!(url = %entry, "{hint}");
        cx.warnings.insert(0, hint);
    }
    match probed {
        Ok(Probe::Document { url, reader }) => {
            let route = match reader.kind() {
                DocumentKind::SourceDescription | DocumentKind::SourceDescriptionIndex => {
                    Route::SourceDescription
                }
                DocumentKind::CapabilityList | DocumentKind::CapabilityListIndex => {
                    Route::CapabilityList
                }
                _ => Route::UpLink,
            };
            match cx.sets_from(url, reader, 0).await {
                Ok(found) if !found.sets.is_empty() => return Ok(cx.done(route, found)),
                Ok(_) => cx.warn(format!("{entry}: no readable Capability List")),
                Err(e) => cx.warn(e.to_string()),
            }
        }
        Ok(Probe::Other {
            url,
            links,
            html_links,
            what,
            ..
        }) => {
            let via_header: Vec<Url> = links
                .iter()
                .filter(|l| l.has_rel("resourcesync"))
                .map(|l| l.target.clone())
                .collect();
            if let Some(found) = cx.follow_all(&via_header, 1).await {
                return Ok(cx.done(Route::LinkHeader, found));
            }
            if let Some(found) = cx.follow_all(&html_links, 1).await {
                return Ok(cx.done(Route::HtmlLink, found));
            }
            cx.warn(format!("{url}: {what} without a resourcesync link"));
        }
        Err(e @ (Error::Refused { .. } | Error::Scheme { .. })) => return Err(e),
        // The other routes are on the same host: say what happened, not that no Capability
        // List was found.
        Err(e) if e.host_unreachable() => return Err(e),
        Err(e) => cx.warn(e.to_string()),
    }

    // Route 6: well-known URI, then robots.txt.
    if let Ok(wk) = entry.join("/.well-known/resourcesync")
        && !cx.visited.contains(&wk)
    {
        match cx.probe(&wk, 0).await {
            Ok(Probe::Document { url, reader }) => match cx.sets_from(url, reader, 0).await {
                Ok(found) if !found.sets.is_empty() => {
                    return Ok(cx.done(Route::WellKnown, found));
                }
                Ok(_) => cx.warn(format!("{wk}: no readable Capability List")),
                Err(e) => cx.warn(e.to_string()),
            },
            Ok(Probe::Other { url, what, .. }) => {
                cx.warn(format!("{url}: {what}, not a Source Description"));
            }
            Err(e) => cx.warn(e.to_string()),
        }
    }
    if let Ok(robots) = entry.join("/robots.txt") {
        match f.get_bytes(&robots, access, MAX_ROBOTS_BYTES).await {
            Ok((_, body)) => {
                let sitemaps = sitemap_directives(&String::from_utf8_lossy(&body), &robots);
                if sitemaps.is_empty() {
                    cx.warn(format!("{robots}: no Sitemap directive"));
                }
                if let Some(found) = cx.follow_all(&sitemaps, 1).await {
                    return Ok(cx.done(Route::RobotsTxt, found));
                }
            }
            Err(e) => cx.warn(e.to_string()),
        }
    }
    Err(Error::NotDiscovered {
        url: entry.clone(),
        details: cx.warnings.join("; "),
    })
}

/// What an OAI-PMH 2.0 response looks like in its first bytes (lowercased): the root
/// element `OAI-PMH` in the protocol's namespace (OAI-PMH 2.0 section 3.2).
fn looks_like_oai_pmh(head_lower: &str) -> bool {
    head_lower.contains("<oai-pmh") && head_lower.contains("openarchives.org/oai/2.0")
}

/// Bytes of an `Identify` answer read to tell whether it is OAI-PMH.
const IDENTIFY_SNIFF_BYTES: u64 = 64 << 10;

/// The warning for an entry point that is an OAI-PMH base URL (OAI-PMH 2.0 section 4.2):
/// its own answer is an OAI-PMH response (a `badVerb` error, typically), or, when it is no
/// ResourceSync document and has no query, `{entry}?verb=Identify` answers one. `None`
/// otherwise; a failed `Identify` request is no evidence either way.
async fn oai_hint(cx: &Cx<'_>, entry: &Url, probed: &Result<Probe, Error>) -> Option<String> {
    let hint = |how: &str| {
        format!(
            "{entry} {how}: it is an OAI-PMH base URL, but this upstream has no `kind = \"oai-pmh\"` and is read as a ResourceSync Source (discovery, spec 6.3); add `kind = \"oai-pmh\"` to harvest its records with ListRecords"
        )
    };
    match probed {
        Ok(Probe::Other { oai: true, .. }) => return Some(hint("answers OAI-PMH")),
        Ok(Probe::Document { .. }) => return None,
        _ => {}
    }
    if entry.query().is_some() {
        return None;
    }
    let mut identify = entry.clone();
    identify.set_query(Some("verb=Identify"));
    let (_, body) =
        cx.f.get_bytes(&identify, cx.access, IDENTIFY_SNIFF_BYTES)
            .await
            .ok()?;
    let head = String::from_utf8_lossy(&body[..body.len().min(SNIFF_BYTES)]).to_ascii_lowercase();
    looks_like_oai_pmh(&head).then(|| hint("answers OAI-PMH Identify (?verb=Identify)"))
}

/// `Sitemap:` directives of a robots.txt (field names are case-insensitive), resolved
/// against the robots.txt URL.
fn sitemap_directives(text: &str, base: &Url) -> Vec<Url> {
    text.lines()
        .filter_map(|line| {
            let line = line.split('#').next().unwrap_or("").trim();
            let (name, value) = line.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("sitemap")
                .then(|| base.join(value.trim()).ok())
                .flatten()
        })
        .collect()
}

enum Probe {
    /// A ResourceSync document, header read.
    Document {
        url: Url,
        reader: Box<DocumentReader>,
    },
    /// Anything else, with what could lead on.
    Other {
        url: Url,
        links: Vec<LinkValue>,
        html_links: Vec<Url>,
        what: String,
        /// An OAI-PMH response (OAI-PMH 2.0 section 3.2), not a ResourceSync document.
        oai: bool,
    },
}

#[derive(Default)]
struct Found {
    sets: Vec<CapabilitySet>,
    source_description: Option<Url>,
}

impl Found {
    fn merge(&mut self, other: Found) {
        for s in other.sets {
            if !self.sets.iter().any(|t| t.url == s.url) {
                self.sets.push(s);
            }
        }
        if self.source_description.is_none() {
            self.source_description = other.source_description;
        }
    }
}

type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

struct Cx<'a> {
    f: &'a Fetcher,
    access: &'a Access,
    visited: HashSet<Url>,
    /// Capability Lists read so far, with their `up` link: reached again (two Resource Lists
    /// of one set in robots.txt), they are reused rather than reported as a loop.
    read: HashMap<Url, (CapabilitySet, Option<Url>)>,
    warnings: Vec<String>,
}

impl<'a> Cx<'a> {
    fn warn(&mut self, w: String) {
        tracing::debug!(warning = %w, "discovery");
        self.warnings.push(w);
    }

    fn cached(&self, url: &Url) -> Option<Found> {
        self.read.get(url).map(|(set, up)| Found {
            sets: vec![set.clone()],
            source_description: up.clone(),
        })
    }

    fn done(self, route: Route, found: Found) -> Discovery {
        Discovery {
            route,
            source_description: found.source_description,
            capability_lists: found.sets,
            warnings: self.warnings,
        }
    }

    /// Follows each target (a Capability List, or any document leading to one); `None` when
    /// none gave a Capability List.
    async fn follow_all(&mut self, targets: &[Url], depth: usize) -> Option<Found> {
        let mut found = Found::default();
        for t in targets {
            if let Some(f) = self.cached(t) {
                found.merge(f);
                continue;
            }
            match self.probe(t, depth).await {
                Ok(Probe::Document { url, reader }) => {
                    match self.sets_from(url, reader, depth).await {
                        Ok(f) => found.merge(f),
                        Err(e) => self.warn(e.to_string()),
                    }
                }
                Ok(Probe::Other { url, what, .. }) => {
                    self.warn(format!("{url}: {what}, not a ResourceSync document"));
                }
                Err(e) => self.warn(e.to_string()),
            }
            if found.sets.len() >= MAX_CAPABILITY_LISTS {
                break;
            }
        }
        (!found.sets.is_empty()).then_some(found)
    }

    /// Fetches `url` and tells what it is, reading no more than needed.
    async fn probe(&mut self, url: &Url, depth: usize) -> Result<Probe, Error> {
        if depth >= MAX_HOPS {
            return Err(Error::Navigation {
                url: url.clone(),
                reason: format!("more than {MAX_HOPS} documents on one path"),
            });
        }
        if !self.visited.insert(url.clone()) {
            return Err(Error::Navigation {
                url: url.clone(),
                reason: "document already visited (loop)".into(),
            });
        }
        let req = Request {
            max_bytes: MAX_DOCUMENT_BYTES,
            inflate_gzip: true,
            timeout: Some(self.f.config().document_timeout),
            ..Request::default()
        };
        let fetched = self.f.get(url, self.access, &req).await?;
        let final_url = fetched.url.clone();
        if final_url != *url && !self.visited.insert(final_url.clone()) {
            return Err(Error::Navigation {
                url: final_url,
                reason: "redirected to a document already visited (loop)".into(),
            });
        }
        let mut reader = fetched.body.into_async_read();
        let mut head = Vec::with_capacity(SNIFF_BYTES);
        (&mut reader)
            .take(SNIFF_BYTES as u64)
            .read_to_end(&mut head)
            .await
            .map_err(|e| Error::from_io(&final_url, e))?;
        let ct = fetched
            .content_type
            .as_deref()
            .unwrap_or("")
            .to_ascii_lowercase();
        let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
        let trimmed = text.trim_start_matches('\u{feff}').trim_start();
        let is_html = ct.starts_with("text/html")
            || ct.starts_with("application/xhtml")
            || trimmed.starts_with("<!doctype html")
            || trimmed.starts_with("<html")
            || (!trimmed.contains("<urlset")
                && !trimmed.contains("<sitemapindex")
                && trimmed.contains("<html"));
        if looks_like_oai_pmh(trimmed) {
            return Ok(Probe::Other {
                url: final_url,
                links: fetched.links,
                html_links: Vec::new(),
                what: "an OAI-PMH response (root <OAI-PMH>)".into(),
                oai: true,
            });
        }
        if is_html {
            let mut page = head;
            (&mut reader)
                .take(MAX_HTML_BYTES.saturating_sub(page.len() as u64))
                .read_to_end(&mut page)
                .await
                .map_err(|e| Error::from_io(&final_url, e))?;
            let html_links = html::resourcesync_links(&String::from_utf8_lossy(&page), &final_url);
            return Ok(Probe::Other {
                url: final_url,
                links: fetched.links,
                html_links,
                what: "an HTML page".into(),
                oai: false,
            });
        }
        if !trimmed.starts_with('<') {
            return Ok(Probe::Other {
                url: final_url,
                links: fetched.links,
                html_links: Vec::new(),
                oai: false,
                what: format!(
                    "a {} document",
                    fetched.content_type.as_deref().unwrap_or("non-XML")
                ),
            });
        }
        let input = std::io::Cursor::new(head).chain(reader);
        let opts = ReadOptions {
            mode: Mode::Lenient,
            max_bytes: MAX_DOCUMENT_BYTES,
            source: final_url.to_string(),
            ..ReadOptions::default()
        };
        match DocumentReader::open(input, opts).await {
            Ok(reader) => Ok(Probe::Document {
                url: final_url,
                reader: Box::new(reader),
            }),
            Err(e) => {
                let what = format!("an XML document that is not ResourceSync ({e})");
                Ok(Probe::Other {
                    url: final_url,
                    links: fetched.links,
                    html_links: Vec::new(),
                    what,
                    oai: false,
                })
            }
        }
    }

    /// Capability Lists reachable from a document whose header was read.
    fn sets_from(
        &mut self,
        url: Url,
        mut reader: Box<DocumentReader>,
        depth: usize,
    ) -> BoxFut<'_, Result<Found, Error>> {
        Box::pin(async move {
            let kind = reader.kind();
            match kind {
                DocumentKind::CapabilityList => {
                    let set = read_capability_list(&url, &mut reader, &mut self.warnings).await?;
                    let up = reader
                        .header()
                        .link("up")
                        .and_then(|l| url.join(l.href.trim()).ok());
                    self.read.insert(url, (set.clone(), up.clone()));
                    Ok(Found {
                        sets: vec![set],
                        source_description: up,
                    })
                }
                DocumentKind::SourceDescription
                | DocumentKind::SourceDescriptionIndex
                | DocumentKind::CapabilityListIndex => {
                    if let Some(l) = reader.header().capability().and_then(Capability::legacy) {
                        self.warn(format!("{url}: {}", l.message()));
                    }
                    let locs = self.locs(&url, &mut reader).await?;
                    drop(reader);
                    let mut found = Found::default();
                    for loc in locs {
                        if found.sets.len() >= MAX_CAPABILITY_LISTS {
                            self.warn(format!(
                                "{url}: more than {MAX_CAPABILITY_LISTS} Capability Lists; the rest is ignored"
                            ));
                            break;
                        }
                        let expect_sd = kind == DocumentKind::SourceDescriptionIndex;
                        if !expect_sd && let Some(f) = self.cached(&loc) {
                            found.merge(Found {
                                sets: f.sets,
                                source_description: None,
                            });
                            continue;
                        }
                        match self.probe(&loc, depth + 1).await {
                            Ok(Probe::Document { url: u, reader: r }) => {
                                let k = r.kind();
                                let fits = if expect_sd {
                                    k == DocumentKind::SourceDescription
                                } else {
                                    k == DocumentKind::CapabilityList
                                };
                                if !fits {
                                    self.warn(format!(
                                        "{u}: listed in {url} ({}) but is a {} (spec section {})",
                                        kind.name(),
                                        k.name(),
                                        kind.section()
                                    ));
                                    continue;
                                }
                                match self.sets_from(u, r, depth + 1).await {
                                    Ok(f) => found.merge(Found {
                                        sets: f.sets,
                                        source_description: None,
                                    }),
                                    Err(e) => self.warn(e.to_string()),
                                }
                            }
                            Ok(Probe::Other { url: u, what, .. }) => {
                                self.warn(format!("{u}: listed in {url} but is {what}"))
                            }
                            Err(e) => self.warn(e.to_string()),
                        }
                    }
                    if kind != DocumentKind::CapabilityListIndex {
                        found.source_description = Some(url);
                    }
                    Ok(found)
                }
                _ => {
                    let Some(up) = reader.header().link("up").map(|l| l.href.clone()) else {
                        return Err(Error::NoUpLink {
                            url,
                            kind: kind.name(),
                        });
                    };
                    drop(reader);
                    let up = url.join(up.trim()).map_err(|_| Error::NoUpLink {
                        url: url.clone(),
                        kind: kind.name(),
                    })?;
                    if let Some(f) = self.cached(&up) {
                        return Ok(f);
                    }
                    match self.probe(&up, depth + 1).await? {
                        Probe::Document { url: u, reader: r } => {
                            self.sets_from(u, r, depth + 1).await
                        }
                        Probe::Other { url: u, what, .. } => Err(Error::NotDiscovered {
                            url: u,
                            details: format!("the up link of {url} leads to {what}"),
                        }),
                    }
                }
            }
        })
    }

    /// The `<loc>`s of an index-like document (Source Description or index), resolved.
    async fn locs(&mut self, url: &Url, reader: &mut DocumentReader) -> Result<Vec<Url>, Error> {
        let mut out = Vec::new();
        while let Some(e) = reader
            .next_entry()
            .await
            .map_err(|source| Error::Document {
                url: url.clone(),
                source: Box::new(source),
            })?
        {
            match url.join(e.loc.trim()) {
                Ok(u) if !out.contains(&u) => out.push(u),
                Ok(_) => {}
                Err(_) => self.warn(format!("{url}: unusable <loc> `{}`", e.loc)),
            }
            if out.len() > MAX_CAPABILITY_LISTS {
                break;
            }
        }
        Ok(out)
    }
}

/// Reads the entries of a Capability List (spec section 9) and its change-notification
/// channel (Change Notification section 5). Each legacy capability value adds a warning
/// naming the specification it comes from (the Source should update it).
async fn read_capability_list(
    url: &Url,
    reader: &mut DocumentReader,
    warnings: &mut Vec<String>,
) -> Result<CapabilitySet, Error> {
    let header_hub = reader
        .header()
        .link("hub")
        .and_then(|l| url.join(l.href.trim()).ok());
    let mut set = CapabilitySet {
        url: url.clone(),
        entries: Vec::new(),
        hub: None,
        topic: None,
    };
    let mut entry_hub = None;
    while let Some(e) = reader
        .next_entry()
        .await
        .map_err(|source| Error::Document {
            url: url.clone(),
            source: Box::new(source),
        })?
    {
        let Some(cap) = e.md.as_ref().and_then(|m| m.capability.clone()) else {
            continue;
        };
        let Ok(loc) = url.join(e.loc.trim()) else {
            continue;
        };
        if let Some(l) = cap.legacy() {
            warnings.push(format!("{url}: {}: {}", loc, l.message()));
        }
        if cap == Capability::ChangeNotification && set.topic.is_none() {
            set.topic = Some(loc.clone());
            entry_hub = e.link("hub").and_then(|l| url.join(l.href.trim()).ok());
        }
        if set.entries.len() < 64 {
            set.entries.push((cap, loc));
        }
    }
    set.hub = entry_hub.or(header_hub);
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn capability_list(xml: &[u8], url: &str) -> CapabilitySet {
        let url = Url::parse(url).unwrap();
        let opts = ReadOptions::new(Mode::Lenient, url.to_string());
        let mut reader = DocumentReader::open_blocking(std::io::Cursor::new(xml.to_vec()), opts)
            .await
            .unwrap();
        read_capability_list(&url, &mut reader, &mut Vec::new())
            .await
            .unwrap()
    }

    /// `tests/fixtures/{rel}` of the workspace (the directory cargo gives at run time: a
    /// target directory shared by several clones may hold another clone's compiled-in one).
    fn fixture(rel: &str) -> Vec<u8> {
        let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo");
        std::fs::read(format!("{manifest}/../../tests/fixtures/{rel}")).unwrap()
    }

    #[tokio::test]
    async fn reads_the_channel_of_cn_example_7() {
        let xml = fixture("notification-1.0.1/cn_ex_7.xml");
        let set = capability_list(&xml, "http://example.com/dataset1/capabilitylist.xml").await;
        let channel = set.notification().expect("a channel");
        assert_eq!(
            channel.topic.as_str(),
            "http://example.com/dataset1/change/"
        );
        assert_eq!(channel.hub.as_str(), "http://hub.example.org/websub/");
        assert_eq!(
            set.get(Capability::ChangeList).map(Url::as_str),
            Some("http://example.com/dataset1/changelist.xml")
        );
    }

    #[tokio::test]
    async fn a_topic_without_a_hub_is_no_channel() {
        let xml = br#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:md capability="capabilitylist"/>
  <url><loc>changelist.xml</loc><rs:md capability="changelist"/></url>
  <url><loc>change/</loc><rs:md capability="change-notification"/></url>
</urlset>"#;
        let set = capability_list(xml, "http://example.com/d/capabilitylist.xml").await;
        assert_eq!(
            set.topic.as_ref().map(Url::as_str),
            Some("http://example.com/d/change/")
        );
        assert_eq!(set.notification(), None);
    }

    #[tokio::test]
    async fn a_change_list_archive_stands_for_the_change_list_with_a_warning() {
        let xml = fixture("real-world/capabilitylist.xml");
        let url = Url::parse("http://upstream.example.org/capabilitylist.xml").unwrap();
        let opts = ReadOptions::new(Mode::Lenient, url.to_string());
        let mut reader = DocumentReader::open_blocking(std::io::Cursor::new(xml), opts)
            .await
            .unwrap();
        let mut warnings = Vec::new();
        let set = read_capability_list(&url, &mut reader, &mut warnings)
            .await
            .unwrap();
        assert_eq!(
            set.get(Capability::ChangeList).map(Url::as_str),
            Some("http://upstream.example.org/changelist-archive.xml")
        );
        assert_eq!(
            set.get(Capability::ResourceList).map(Url::as_str),
            Some("http://upstream.example.org/resourcelist.xml")
        );
        assert_eq!(set.get(Capability::ChangeDump), None);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("changelist-archive")
                && warnings[0].contains("ResourceSync Archives"),
            "{warnings:?}"
        );
        // `rel="Up"` is the up link to the Source Description.
        assert_eq!(
            reader.header().link("up").map(|l| l.href.as_str()),
            Some("http://upstream.example.org/.well-known/resourcesync")
        );
    }

    #[test]
    fn the_1_1_value_wins_over_a_legacy_one() {
        let u = |s: &str| Url::parse(&format!("http://e.org/{s}")).unwrap();
        let set = CapabilitySet {
            url: u("cl.xml"),
            entries: vec![
                (Capability::parse("changelist-archive"), u("archive.xml")),
                (Capability::ChangeList, u("changelist.xml")),
            ],
            hub: None,
            topic: None,
        };
        assert_eq!(set.get(Capability::ChangeList), Some(&u("changelist.xml")));
    }

    #[test]
    fn reads_sitemap_directives() {
        let base = Url::parse("http://example.com/robots.txt").unwrap();
        let v = sitemap_directives(
            "User-agent: *\nDisallow: /tmp/\nSitemap: http://example.com/dataset1/resourcelist.xml\r\n\
             sitemap:/sitemap.xml # plain\nSITEMAP : rel.xml\nnot a directive\n",
            &base,
        );
        let got: Vec<&str> = v.iter().map(Url::as_str).collect();
        assert_eq!(
            got,
            [
                "http://example.com/dataset1/resourcelist.xml",
                "http://example.com/sitemap.xml",
                "http://example.com/rel.xml"
            ]
        );
    }
}
