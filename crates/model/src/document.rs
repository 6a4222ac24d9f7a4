//! Typed ResourceSync documents: the root (`<urlset>` or `<sitemapindex>`), its `<rs:md>` and
//! `<rs:ln>` (the [`Header`]), and one [`UrlEntry`] per `<url>` or `<sitemap>` child
//! (spec section 7, Tables 2 and 3).
//!
//! The document kind follows from the root element and the `capability` of the root `<rs:md>`
//! ([`DocumentKind`]); one set of types serves every kind, because every kind shares the same
//! elements and attributes and only the rules of use differ (see [`crate::validate`]).

use std::fmt;

use crate::datetime::W3cDateTime;
use crate::hash::Hashes;

/// The Sitemap namespace, default namespace of every ResourceSync document.
pub const SITEMAP_NS: &str = "http://www.sitemaps.org/schemas/sitemap/0.9";
/// The ResourceSync namespace of `<rs:md>` and `<rs:ln>` (spec section 4).
pub const RS_NS: &str = "http://www.openarchives.org/rs/terms/";

/// Which Sitemap document format a document uses (spec section 7, Table 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Root {
    /// `<urlset>` with `<url>` children.
    Urlset,
    /// `<sitemapindex>` with `<sitemap>` children.
    Sitemapindex,
}

impl Root {
    /// The root element's local name.
    pub fn element(self) -> &'static str {
        match self {
            Root::Urlset => "urlset",
            Root::Sitemapindex => "sitemapindex",
        }
    }
    /// The child element's local name (`url` or `sitemap`).
    pub fn child(self) -> &'static str {
        match self {
            Root::Urlset => "url",
            Root::Sitemapindex => "sitemap",
        }
    }
}

/// Values of the `capability` attribute (spec section 7; `change-notification` from Change
/// Notification 1.0.1 section 3).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Capability {
    /// `description` — Source Description (8).
    Description,
    /// `capabilitylist` — Capability List (9).
    CapabilityList,
    /// `resourcelist` — Resource List (10.1) or its index (10.2).
    ResourceList,
    /// `changelist` — Change List (12.1) or its index (12.2).
    ChangeList,
    /// `resourcedump` — Resource Dump (11.1) or its index.
    ResourceDump,
    /// `changedump` — Change Dump (13.1) or its index.
    ChangeDump,
    /// `resourcedump-manifest` — Resource Dump Manifest (11.2).
    ResourceDumpManifest,
    /// `changedump-manifest` — Change Dump Manifest (13.2).
    ChangeDumpManifest,
    /// `change-notification` — a Change Notification payload or channel (CN 3, 5).
    ChangeNotification,
    /// A value defined elsewhere (e.g. the archiving specification); kept as written.
    Other(String),
}

impl Capability {
    /// Parses an attribute value (never fails; unknown values become [`Capability::Other`]).
    pub fn parse(s: &str) -> Self {
        match s {
            "description" => Capability::Description,
            "capabilitylist" => Capability::CapabilityList,
            "resourcelist" => Capability::ResourceList,
            "changelist" => Capability::ChangeList,
            "resourcedump" => Capability::ResourceDump,
            "changedump" => Capability::ChangeDump,
            "resourcedump-manifest" => Capability::ResourceDumpManifest,
            "changedump-manifest" => Capability::ChangeDumpManifest,
            "change-notification" => Capability::ChangeNotification,
            other => Capability::Other(other.to_owned()),
        }
    }

    /// The attribute value.
    pub fn as_str(&self) -> &str {
        match self {
            Capability::Description => "description",
            Capability::CapabilityList => "capabilitylist",
            Capability::ResourceList => "resourcelist",
            Capability::ChangeList => "changelist",
            Capability::ResourceDump => "resourcedump",
            Capability::ChangeDump => "changedump",
            Capability::ResourceDumpManifest => "resourcedump-manifest",
            Capability::ChangeDumpManifest => "changedump-manifest",
            Capability::ChangeNotification => "change-notification",
            Capability::Other(s) => s,
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Values of the `change` attribute (spec section 7).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Change {
    /// `created`
    Created,
    /// `updated`
    Updated,
    /// `deleted`
    Deleted,
    /// Anything else; invalid, kept only so it can be reported and written back.
    Other(String),
}

impl Change {
    /// Parses an attribute value.
    pub fn parse(s: &str) -> Self {
        match s {
            "created" => Change::Created,
            "updated" => Change::Updated,
            "deleted" => Change::Deleted,
            other => Change::Other(other.to_owned()),
        }
    }
    /// The attribute value.
    pub fn as_str(&self) -> &str {
        match self {
            Change::Created => "created",
            Change::Updated => "updated",
            Change::Deleted => "deleted",
            Change::Other(s) => s,
        }
    }
}

/// Values of `<changefreq>` (Sitemap protocol; spec section 7).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ChangeFreq {
    /// `always`
    Always,
    /// `hourly`
    Hourly,
    /// `daily`
    Daily,
    /// `weekly`
    Weekly,
    /// `monthly`
    Monthly,
    /// `yearly`
    Yearly,
    /// `never`
    Never,
    /// Anything else; invalid, kept as written.
    Other(String),
}

impl ChangeFreq {
    /// Parses an element value.
    pub fn parse(s: &str) -> Self {
        match s {
            "always" => ChangeFreq::Always,
            "hourly" => ChangeFreq::Hourly,
            "daily" => ChangeFreq::Daily,
            "weekly" => ChangeFreq::Weekly,
            "monthly" => ChangeFreq::Monthly,
            "yearly" => ChangeFreq::Yearly,
            "never" => ChangeFreq::Never,
            other => ChangeFreq::Other(other.to_owned()),
        }
    }
    /// The element value.
    pub fn as_str(&self) -> &str {
        match self {
            ChangeFreq::Always => "always",
            ChangeFreq::Hourly => "hourly",
            ChangeFreq::Daily => "daily",
            ChangeFreq::Weekly => "weekly",
            ChangeFreq::Monthly => "monthly",
            ChangeFreq::Yearly => "yearly",
            ChangeFreq::Never => "never",
            ChangeFreq::Other(s) => s,
        }
    }
}

/// An attribute outside the ResourceSync vocabulary, kept so documents round-trip (spec 7:
/// communities may add attributes in their own namespace).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ExtAttr {
    /// Namespace URI; empty for an unprefixed attribute that ResourceSync does not define.
    pub namespace: String,
    /// Prefix used when read (a writer may need to declare it).
    pub prefix: String,
    /// Local name.
    pub local: String,
    /// Value (unescaped).
    pub value: String,
}

/// `<rs:md>`: metadata about the document (as a child of the root) or about the resource of an
/// entry. Every attribute of spec section 7, Table 3.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Md {
    /// `capability`
    pub capability: Option<Capability>,
    /// `at`
    pub at: Option<W3cDateTime>,
    /// `completed`
    pub completed: Option<W3cDateTime>,
    /// `from`
    pub from: Option<W3cDateTime>,
    /// `until`
    pub until: Option<W3cDateTime>,
    /// `change`
    pub change: Option<Change>,
    /// `datetime`
    pub datetime: Option<W3cDateTime>,
    /// `encoding`
    pub encoding: Option<String>,
    /// `hash`
    pub hash: Option<Hashes>,
    /// `length`
    pub length: Option<u64>,
    /// `path`
    pub path: Option<String>,
    /// `type`
    pub mime_type: Option<String>,
    /// Attributes in other namespaces.
    pub ext: Vec<ExtAttr>,
}

/// `<rs:ln>`: a link from the document or from an entry (spec sections 7 and 14).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Link {
    /// `rel` (mandatory; empty when missing in a lenient read).
    pub rel: String,
    /// `href` (mandatory; empty when missing in a lenient read).
    pub href: String,
    /// `encoding`
    pub encoding: Option<String>,
    /// `hash`
    pub hash: Option<Hashes>,
    /// `length`
    pub length: Option<u64>,
    /// `modified`
    pub modified: Option<W3cDateTime>,
    /// `path`
    pub path: Option<String>,
    /// `pri` — 1..=999999, lower is preferred, absent means 999999.
    pub pri: Option<u32>,
    /// `type`
    pub mime_type: Option<String>,
    /// Attributes in other namespaces.
    pub ext: Vec<ExtAttr>,
}

impl Link {
    /// A link with just `rel` and `href`.
    pub fn new(rel: impl Into<String>, href: impl Into<String>) -> Self {
        Link {
            rel: rel.into(),
            href: href.into(),
            ..Link::default()
        }
    }
}

/// One `<url>` or `<sitemap>` child of the root.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct UrlEntry {
    /// `<loc>` (mandatory; empty when missing in a lenient read).
    pub loc: String,
    /// `<lastmod>`
    pub lastmod: Option<W3cDateTime>,
    /// `<changefreq>`
    pub changefreq: Option<ChangeFreq>,
    /// `<priority>` (plain Sitemap protocol element), as written.
    pub priority: Option<String>,
    /// `<rs:md>` (not repeatable).
    pub md: Option<Md>,
    /// `<rs:ln>` elements in document order.
    pub links: Vec<Link>,
}

impl UrlEntry {
    /// The first link with relation `rel`.
    pub fn link(&self, rel: &str) -> Option<&Link> {
        self.links.iter().find(|l| l.rel == rel)
    }

    /// The instant this entry is ordered by in a change document: `datetime`, else `lastmod`.
    pub fn change_instant(&self) -> Option<&W3cDateTime> {
        self.md
            .as_ref()
            .and_then(|m| m.datetime.as_ref())
            .or(self.lastmod.as_ref())
    }
}

/// Everything of a document before its first entry: the root, its `<rs:md>` and `<rs:ln>`s.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Header {
    /// Root element.
    pub root: Root,
    /// The root's `<rs:md>`; `None` for a plain Sitemap (accepted in lenient mode only).
    pub md: Option<Md>,
    /// The root's `<rs:ln>`s in document order.
    pub links: Vec<Link>,
}

impl Header {
    /// A header with a `capability` and nothing else.
    pub fn new(root: Root, capability: Capability) -> Self {
        Header {
            root,
            md: Some(Md {
                capability: Some(capability),
                ..Md::default()
            }),
            links: Vec::new(),
        }
    }

    /// The capability of the root `<rs:md>`.
    pub fn capability(&self) -> Option<&Capability> {
        self.md.as_ref().and_then(|m| m.capability.as_ref())
    }

    /// The first link with relation `rel`.
    pub fn link(&self, rel: &str) -> Option<&Link> {
        self.links.iter().find(|l| l.rel == rel)
    }

    /// What kind of document this header opens.
    pub fn kind(&self) -> DocumentKind {
        DocumentKind::of(self.root, self.capability())
    }
}

/// Every ResourceSync document type, as told by root element and capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DocumentKind {
    /// Source Description (8).
    SourceDescription,
    /// Source Description Index (8).
    SourceDescriptionIndex,
    /// Capability List (9).
    CapabilityList,
    /// A `<sitemapindex>` of Capability Lists, which Sources should not generate (9).
    CapabilityListIndex,
    /// Resource List (10.1).
    ResourceList,
    /// Resource List Index (10.2).
    ResourceListIndex,
    /// Resource Dump (11.1).
    ResourceDump,
    /// Resource Dump Index (11.1).
    ResourceDumpIndex,
    /// Resource Dump Manifest (11.2).
    ResourceDumpManifest,
    /// Change List (12.1).
    ChangeList,
    /// Change List Index (12.2).
    ChangeListIndex,
    /// Change Dump (13.1).
    ChangeDump,
    /// Change Dump Index (13.1).
    ChangeDumpIndex,
    /// Change Dump Manifest (13.2).
    ChangeDumpManifest,
    /// Change Notification payload (CN 3).
    ChangeNotification,
    /// A plain Sitemap without `<rs:md>` (read leniently as a Resource List).
    PlainSitemap,
    /// A plain Sitemap index without `<rs:md>` (read leniently as a Resource List Index).
    PlainSitemapIndex,
    /// A root or capability this crate has no rules for (manifest or notification as an index,
    /// unknown capability values).
    Other,
}

impl DocumentKind {
    /// Kind from the root element and the root capability.
    pub fn of(root: Root, capability: Option<&Capability>) -> Self {
        use Capability as C;
        use DocumentKind as K;
        match (root, capability) {
            (Root::Urlset, None) => K::PlainSitemap,
            (Root::Sitemapindex, None) => K::PlainSitemapIndex,
            (Root::Urlset, Some(c)) => match c {
                C::Description => K::SourceDescription,
                C::CapabilityList => K::CapabilityList,
                C::ResourceList => K::ResourceList,
                C::ChangeList => K::ChangeList,
                C::ResourceDump => K::ResourceDump,
                C::ChangeDump => K::ChangeDump,
                C::ResourceDumpManifest => K::ResourceDumpManifest,
                C::ChangeDumpManifest => K::ChangeDumpManifest,
                C::ChangeNotification => K::ChangeNotification,
                C::Other(_) => K::Other,
            },
            (Root::Sitemapindex, Some(c)) => match c {
                C::Description => K::SourceDescriptionIndex,
                C::CapabilityList => K::CapabilityListIndex,
                C::ResourceList => K::ResourceListIndex,
                C::ChangeList => K::ChangeListIndex,
                C::ResourceDump => K::ResourceDumpIndex,
                C::ChangeDump => K::ChangeDumpIndex,
                _ => K::Other,
            },
        }
    }

    /// True for documents that are indexes of other documents.
    pub fn is_index(self) -> bool {
        matches!(
            self,
            DocumentKind::SourceDescriptionIndex
                | DocumentKind::CapabilityListIndex
                | DocumentKind::ResourceListIndex
                | DocumentKind::ResourceDumpIndex
                | DocumentKind::ChangeListIndex
                | DocumentKind::ChangeDumpIndex
                | DocumentKind::PlainSitemapIndex
        )
    }

    /// True for the documents that use `from`/`until` (Appendix A, right half).
    pub fn is_change_document(self) -> bool {
        matches!(
            self,
            DocumentKind::ChangeList
                | DocumentKind::ChangeListIndex
                | DocumentKind::ChangeDump
                | DocumentKind::ChangeDumpIndex
                | DocumentKind::ChangeDumpManifest
                | DocumentKind::ChangeNotification
        )
    }

    /// True for the documents that use `at`/`completed` (Appendix A, left half).
    pub fn is_snapshot_document(self) -> bool {
        matches!(
            self,
            DocumentKind::ResourceList
                | DocumentKind::ResourceListIndex
                | DocumentKind::ResourceDump
                | DocumentKind::ResourceDumpIndex
                | DocumentKind::ResourceDumpManifest
                | DocumentKind::PlainSitemap
                | DocumentKind::PlainSitemapIndex
        )
    }

    /// Human name as the spec writes it.
    pub fn name(self) -> &'static str {
        match self {
            DocumentKind::SourceDescription => "Source Description",
            DocumentKind::SourceDescriptionIndex => "Source Description Index",
            DocumentKind::CapabilityList => "Capability List",
            DocumentKind::CapabilityListIndex => "Capability List Index",
            DocumentKind::ResourceList => "Resource List",
            DocumentKind::ResourceListIndex => "Resource List Index",
            DocumentKind::ResourceDump => "Resource Dump",
            DocumentKind::ResourceDumpIndex => "Resource Dump Index",
            DocumentKind::ResourceDumpManifest => "Resource Dump Manifest",
            DocumentKind::ChangeList => "Change List",
            DocumentKind::ChangeListIndex => "Change List Index",
            DocumentKind::ChangeDump => "Change Dump",
            DocumentKind::ChangeDumpIndex => "Change Dump Index",
            DocumentKind::ChangeDumpManifest => "Change Dump Manifest",
            DocumentKind::ChangeNotification => "Change Notification",
            DocumentKind::PlainSitemap => "Sitemap",
            DocumentKind::PlainSitemapIndex => "Sitemap Index",
            DocumentKind::Other => "document",
        }
    }

    /// The spec section that defines this kind.
    pub fn section(self) -> &'static str {
        match self {
            DocumentKind::SourceDescription | DocumentKind::SourceDescriptionIndex => "8",
            DocumentKind::CapabilityList | DocumentKind::CapabilityListIndex => "9",
            DocumentKind::ResourceList | DocumentKind::PlainSitemap => "10.1",
            DocumentKind::ResourceListIndex | DocumentKind::PlainSitemapIndex => "10.2",
            DocumentKind::ResourceDump | DocumentKind::ResourceDumpIndex => "11.1",
            DocumentKind::ResourceDumpManifest => "11.2",
            DocumentKind::ChangeList => "12.1",
            DocumentKind::ChangeListIndex => "12.2",
            DocumentKind::ChangeDump | DocumentKind::ChangeDumpIndex => "13.1",
            DocumentKind::ChangeDumpManifest => "13.2",
            DocumentKind::ChangeNotification => "CN 3",
            DocumentKind::Other => "7",
        }
    }
}

/// A position in a document, 1-based.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Pos {
    /// Line, from 1.
    pub line: u32,
    /// Column in bytes, from 1.
    pub column: u32,
}

/// Where the parts of a header were found, for problem reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderSpans {
    /// The root element.
    pub root: Pos,
    /// The root `<rs:md>`.
    pub md: Pos,
    /// Each root `<rs:ln>`, parallel to [`Header::links`].
    pub links: Vec<Pos>,
}

/// Where the parts of an entry were found, for problem reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntrySpans {
    /// The `<url>`/`<sitemap>` element.
    pub entry: Pos,
    /// `<loc>`
    pub loc: Pos,
    /// `<lastmod>`
    pub lastmod: Pos,
    /// `<rs:md>`
    pub md: Pos,
    /// Each `<rs:ln>`, parallel to [`UrlEntry::links`].
    pub links: Vec<Pos>,
}

impl EntrySpans {
    /// Position of link `i`, or of the entry when unknown.
    pub fn link(&self, i: usize) -> Pos {
        self.links.get(i).copied().unwrap_or(self.entry)
    }
}

impl HeaderSpans {
    /// Position of link `i`, or of the root when unknown.
    pub fn link(&self, i: usize) -> Pos {
        self.links.get(i).copied().unwrap_or(self.root)
    }
}

/// Serde as the attribute's text form, so stored records read like the documents they came
/// from and stay readable when new variants are added.
macro_rules! serde_as_str {
    ($t:ty) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                Ok(<$t>::parse(&text))
            }
        }
    };
}
serde_as_str!(Capability);
serde_as_str!(Change);
serde_as_str!(ChangeFreq);
