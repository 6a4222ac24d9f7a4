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
    /// A value of an earlier ResourceSync specification that 0.9/1.0-era Sources still
    /// publish, read as its 1.1 equivalent ([`Legacy::current`]); written back as read.
    Legacy(Legacy),
    /// A value defined elsewhere; kept as written.
    Other(String),
}

/// Capability values that ResourceSync specifications before 1.1 defined and that 1.1 (spec 7,
/// whose list of defined values has none of them) expresses otherwise. Only values that
/// were published are here (no `resourcelist-index` or the like: indexes have always
/// shared their list's value, spec 7).
///
/// Why: Sources built against those drafts still run. Ignoring their values cost a
/// Destination the changes they offer (a Source whose changes are only in a Change List
/// Archive was re-synced from its Resource List on every run), so a lenient reader takes
/// each as its 1.1 equivalent, with a warning naming where the value comes from; strict
/// validation still flags it, since rsagg never writes one.
///
/// - `resourcesync`: ResourceSync 0.9 (beta draft of 7 June 2013) called the document at
///   `/.well-known/resourcesync` a *ResourceSync Description* with this capability; 0.9.1
///   (August 2013) renamed it *Source Description*, `description` (spec 8).
/// - `resourcelist-archive`, `resourcedump-archive`, `changelist-archive`,
///   `changedump-archive`: the *ResourceSync Archives* specification (beta drafts of the
///   0.9/1.0 era, <http://www.openarchives.org/rs/archives>, advertised in Capability
///   Lists beside the core capabilities): a document listing a Source's earlier Resource
///   Lists (each with `at`), Resource Dumps, Change Lists or Change Dumps (each with
///   `from`/`until`). 1.1 lists consecutive Change Lists (Change Dumps) in a Change List
///   Index (Change Dump Index, spec 12.2, 13.1), so a change archive is read as that index;
///   an archive of Resource Lists (Dumps) lists snapshots over time rather than parts of
///   one, so a reader takes its newest snapshot as the Resource List (Dump).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Legacy {
    /// `resourcesync` (0.9), now `description`.
    ResourceSyncDescription,
    /// `resourcelist-archive` (ResourceSync Archives), read as the newest Resource List.
    ResourceListArchive,
    /// `resourcedump-archive` (ResourceSync Archives), read as the newest Resource Dump.
    ResourceDumpArchive,
    /// `changelist-archive` (ResourceSync Archives), read as a Change List Index.
    ChangeListArchive,
    /// `changedump-archive` (ResourceSync Archives), read as a Change Dump Index.
    ChangeDumpArchive,
}

impl Legacy {
    /// Every legacy value.
    pub const ALL: [Legacy; 5] = [
        Legacy::ResourceSyncDescription,
        Legacy::ResourceListArchive,
        Legacy::ResourceDumpArchive,
        Legacy::ChangeListArchive,
        Legacy::ChangeDumpArchive,
    ];

    /// The legacy value an attribute holds, if it is one.
    pub fn parse(s: &str) -> Option<Self> {
        Legacy::ALL.into_iter().find(|l| l.as_str() == s)
    }

    /// The attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            Legacy::ResourceSyncDescription => "resourcesync",
            Legacy::ResourceListArchive => "resourcelist-archive",
            Legacy::ResourceDumpArchive => "resourcedump-archive",
            Legacy::ChangeListArchive => "changelist-archive",
            Legacy::ChangeDumpArchive => "changedump-archive",
        }
    }

    /// The specification (and version) that defined the value, for warnings.
    pub fn version(self) -> &'static str {
        match self {
            Legacy::ResourceSyncDescription => "ResourceSync 0.9 (June 2013; renamed in 0.9.1)",
            _ => "ResourceSync Archives (0.9/1.0 era)",
        }
    }

    /// The ResourceSync 1.1 capability the value is read as.
    pub fn current(self) -> Capability {
        match self {
            Legacy::ResourceSyncDescription => Capability::Description,
            Legacy::ResourceListArchive => Capability::ResourceList,
            Legacy::ResourceDumpArchive => Capability::ResourceDump,
            Legacy::ChangeListArchive => Capability::ChangeList,
            Legacy::ChangeDumpArchive => Capability::ChangeDump,
        }
    }

    /// True for the archives, documents listing other documents of their capability.
    pub fn is_archive(self) -> bool {
        self != Legacy::ResourceSyncDescription
    }

    /// True for the archives of snapshots (Resource Lists, Resource Dumps), of which a
    /// reader takes the newest; the archives of changes are read whole, as an index.
    pub fn is_snapshot_archive(self) -> bool {
        matches!(
            self,
            Legacy::ResourceListArchive | Legacy::ResourceDumpArchive
        )
    }

    /// How a reader takes the value, for warnings: `Source Description (section 8)`.
    pub fn read_as(self) -> &'static str {
        match self {
            Legacy::ResourceSyncDescription => "a Source Description (`description`, section 8)",
            Legacy::ResourceListArchive => {
                "its newest Resource List (`resourcelist`, section 10.1)"
            }
            Legacy::ResourceDumpArchive => {
                "its newest Resource Dump (`resourcedump`, section 11.1)"
            }
            Legacy::ChangeListArchive => "a Change List Index (`changelist`, section 12.2)",
            Legacy::ChangeDumpArchive => "a Change Dump Index (`changedump`, section 13.1)",
        }
    }

    /// The warning a lenient reader gives for the value.
    pub fn message(self) -> String {
        format!(
            "capability `{}` is from {}, not ResourceSync 1.1; read as {}",
            self.as_str(),
            self.version(),
            self.read_as()
        )
    }
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
            other => match Legacy::parse(other) {
                Some(l) => Capability::Legacy(l),
                None => Capability::Other(other.to_owned()),
            },
        }
    }

    /// The ResourceSync 1.1 capability this value stands for: itself, or what a legacy
    /// value is read as ([`Legacy::current`]).
    pub fn current(&self) -> Capability {
        match self {
            Capability::Legacy(l) => l.current(),
            other => other.clone(),
        }
    }

    /// True when this value stands for the 1.1 capability `c`, itself or as a legacy value.
    pub fn means(&self, c: &Capability) -> bool {
        self == c || matches!(self, Capability::Legacy(l) if l.current() == *c)
    }

    /// The legacy value, if this is one.
    pub fn legacy(&self) -> Option<Legacy> {
        match self {
            Capability::Legacy(l) => Some(*l),
            _ => None,
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
            Capability::Legacy(l) => l.as_str(),
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

impl Md {
    /// The content coding the entry describes its resource in (spec 7 `encoding`: the
    /// `Content-Encoding` its URI serves it with, to which `hash` and `length` apply),
    /// lowercased; `None` for the identity representation (no `encoding`, or `identity`).
    pub fn content_coding(&self) -> Option<String> {
        self.encoding
            .as_deref()
            .map(|c| c.trim().to_ascii_lowercase())
            .filter(|c| !c.is_empty() && c != "identity")
    }
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
    /// True when `rel` is one of the link's relation types. Relation types compare
    /// case-insensitively (RFC 8288 section 2.1.1: `describedBy` is `describedby`), and a
    /// `rel` may hold several, separated by white space (RFC 8288 section 3.3).
    pub fn has_rel(&self, rel: &str) -> bool {
        self.rel
            .split_ascii_whitespace()
            .any(|t| t.eq_ignore_ascii_case(rel))
    }

    /// The `rel` as rsagg writes it: registered relation types lowercased (their registered
    /// names, RFC 8288 section 2.1.1, IANA Link Relations), extension relation types (URIs,
    /// section 2.1.2) as written, several separated by one space. Why: relation types
    /// compare case-insensitively, so an upstream's `describedBy` is `describedby`, and the
    /// lowercase registered name is what every reader matches.
    pub fn normalised_rel(&self) -> String {
        let mut out = String::with_capacity(self.rel.len());
        for t in self.rel.split_ascii_whitespace() {
            if !out.is_empty() {
                out.push(' ');
            }
            if t.contains(':') {
                out.push_str(t);
            } else {
                out.extend(t.chars().map(|c| c.to_ascii_lowercase()));
            }
        }
        out
    }

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
    /// The first link with relation `rel` (compared as [`Link::has_rel`] does).
    pub fn link(&self, rel: &str) -> Option<&Link> {
        self.links.iter().find(|l| l.has_rel(rel))
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

    /// The first link with relation `rel` (compared as [`Link::has_rel`] does).
    pub fn link(&self, rel: &str) -> Option<&Link> {
        self.links.iter().find(|l| l.has_rel(rel))
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
                C::Legacy(l) => Self::of_legacy(root, *l),
                C::Other(_) => K::Other,
            },
            (Root::Sitemapindex, Some(C::Legacy(l))) => Self::of_legacy(root, *l),
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

    /// The kind of a document with a legacy capability ([`Legacy`]): a ResourceSync 0.9
    /// Description is a Source Description (or its index); an archive, of either root,
    /// lists other documents of its capability, which is what the 1.1 index kinds do
    /// (how a reader takes an archive of snapshots: see [`Legacy`]).
    fn of_legacy(root: Root, l: Legacy) -> Self {
        use DocumentKind as K;
        match (l, root) {
            (Legacy::ResourceSyncDescription, Root::Urlset) => K::SourceDescription,
            (Legacy::ResourceSyncDescription, Root::Sitemapindex) => K::SourceDescriptionIndex,
            (Legacy::ResourceListArchive, _) => K::ResourceListIndex,
            (Legacy::ResourceDumpArchive, _) => K::ResourceDumpIndex,
            (Legacy::ChangeListArchive, _) => K::ChangeListIndex,
            (Legacy::ChangeDumpArchive, _) => K::ChangeDumpIndex,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_capabilities_are_read_as_their_1_1_equivalents() {
        for (value, current) in [
            ("resourcesync", Capability::Description),
            ("resourcelist-archive", Capability::ResourceList),
            ("resourcedump-archive", Capability::ResourceDump),
            ("changelist-archive", Capability::ChangeList),
            ("changedump-archive", Capability::ChangeDump),
        ] {
            let c = Capability::parse(value);
            assert!(c.legacy().is_some(), "{value}");
            assert_eq!(c.as_str(), value, "written back as read");
            assert_eq!(c.current(), current, "{value}");
            assert!(c.means(&current) && c != current, "{value}");
        }
        // Only values that were published: indexes always shared their list's value.
        for value in [
            "resourcelist-index",
            "changelist-index",
            "capabilitylistindex",
        ] {
            assert_eq!(
                Capability::parse(value),
                Capability::Other(value.into()),
                "{value}"
            );
        }
        assert!(Capability::ChangeList.means(&Capability::ChangeList));
        assert_eq!(Capability::ChangeList.current(), Capability::ChangeList);
        assert!(
            Legacy::ChangeListArchive
                .message()
                .contains("ResourceSync Archives")
        );
        assert!(
            Legacy::ResourceSyncDescription
                .message()
                .contains("ResourceSync 0.9")
        );
    }

    #[test]
    fn legacy_documents_have_the_kind_of_their_1_1_equivalent() {
        use DocumentKind as K;
        let of = |root, v: &str| DocumentKind::of(root, Some(&Capability::parse(v)));
        assert_eq!(of(Root::Urlset, "resourcesync"), K::SourceDescription);
        assert_eq!(
            of(Root::Sitemapindex, "resourcesync"),
            K::SourceDescriptionIndex
        );
        assert_eq!(of(Root::Urlset, "changelist-archive"), K::ChangeListIndex);
        assert_eq!(
            of(Root::Sitemapindex, "changelist-archive"),
            K::ChangeListIndex
        );
        assert_eq!(of(Root::Urlset, "changedump-archive"), K::ChangeDumpIndex);
        assert_eq!(
            of(Root::Urlset, "resourcelist-archive"),
            K::ResourceListIndex
        );
        assert_eq!(
            of(Root::Urlset, "resourcedump-archive"),
            K::ResourceDumpIndex
        );
        assert_eq!(of(Root::Urlset, "no-such-thing"), K::Other);
    }

    #[test]
    fn relation_types_compare_case_insensitively() {
        let h = Header {
            root: Root::Urlset,
            md: None,
            links: vec![
                Link::new("DescribedBy", "http://e.org/about"),
                Link::new("UP", "http://e.org/cl.xml"),
                Link::new("index alternate", "http://e.org/i.xml"),
            ],
        };
        assert_eq!(h.link("describedby").unwrap().href, "http://e.org/about");
        assert_eq!(h.link("up").unwrap().href, "http://e.org/cl.xml");
        assert_eq!(h.link("Index").unwrap().href, "http://e.org/i.xml");
        assert_eq!(h.link("alternate").unwrap().href, "http://e.org/i.xml");
        assert!(h.link("describes").is_none());
        let e = UrlEntry {
            links: h.links.clone(),
            ..UrlEntry::default()
        };
        assert_eq!(e.link("describedBy").unwrap().href, "http://e.org/about");
    }

    #[test]
    fn relation_types_are_written_as_lowercase_registered_names() {
        let rel = |r: &str| Link::new(r, "x").normalised_rel();
        assert_eq!(rel("describedBy"), "describedby");
        assert_eq!(rel(" Via "), "via");
        assert_eq!(rel("Up  Index"), "up index");
        // Extension relation types are URIs, left as written.
        assert_eq!(
            rel("http://www.openarchives.org/rs/terms/Patch"),
            "http://www.openarchives.org/rs/terms/Patch"
        );
    }
}
