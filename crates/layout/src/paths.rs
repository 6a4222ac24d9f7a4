//! Where every object rsagg publishes or keeps beside its documents lives, relative to the
//! collection's store root. Published documents are also served at the same path under
//! `collection.base_url` (see `docs/contract.md`, URL map), so an object's name is its path.
//!
//! Writers (`rsagg-publish`, `rsagg-notify`, `rsagg-pipeline`) and readers (`rsagg-server`)
//! take these names from here only, so the two sides cannot drift apart.

/// The collection's Capability List (spec 9), written last in a publish.
pub const CAPABILITY_LIST: &str = "capabilitylist.xml";
/// The collection's own Source Description (spec 8), for deployments serving the store
/// directly; `rsagg serve` builds one for every collection at `/.well-known/resourcesync`.
pub const SOURCE_DESCRIPTION: &str = "sourcedescription.xml";

/// The Resource List, or its index when it has several parts (spec 10.1, 10.2).
pub const RESOURCE_LIST: &str = "resourcelist.xml";
/// Folder of the Resource List's parts.
pub const RESOURCE_LIST_DIR: &str = "resourcelist";
/// [`crate::meta::ResourceListMeta`]: the parts out there.
pub const RESOURCE_LIST_META: &str = "published/resourcelist.json";

/// The open Change List, or the Change List Index once there are closed lists (the root
/// element tells, spec 12.2).
pub const CHANGE_LIST: &str = "changelist.xml";
/// A stable alias of the currently open Change List (for clients that cannot read an index).
pub const CHANGE_LIST_OPEN: &str = "changelist-open.xml";
/// Folder of the closed (immutable) and open Change Lists.
pub const CHANGE_LIST_DIR: &str = "changelist";
/// [`crate::meta::ChangeListsMeta`]: the Change Lists out there.
pub const CHANGE_LISTS_META: &str = "published/changelist.json";

/// The Resource Dump (spec 11.1).
pub const RESOURCE_DUMP: &str = "resourcedump.xml";
/// Folder of the Resource Dump's packages, one generation per sub-folder (`g{n}/`).
pub const RESOURCE_DUMP_DIR: &str = "resourcedump";
/// [`crate::meta::ResourceDumpMeta`].
pub const RESOURCE_DUMP_META: &str = "published/resourcedump.json";

/// The Change Dump (spec 13.1).
pub const CHANGE_DUMP: &str = "changedump.xml";
/// Folder of the Change Dump's packages.
pub const CHANGE_DUMP_DIR: &str = "changedump";
/// [`crate::meta::ChangeDumpMeta`].
pub const CHANGE_DUMP_META: &str = "published/changedump.json";

/// [`crate::meta::GcMeta`]: the last blob garbage collection.
pub const GC_META: &str = "published/gc.json";
/// Content-addressed blobs (`blobs/sha256/ab/abcdef…`), written by the store.
pub const BLOBS: &str = "blobs/sha256";
/// Large bodies while they stream in.
pub const BLOBS_TMP: &str = "blobs/tmp";

/// Where each run leaves its [`crate::report::RunStats`] for `serve` (`/metrics`,
/// `/status`), which reads objects and never opens the state as a writer.
pub const STATS_OBJECT: &str = "stats/last-run.json";

/// Where each run adds itself to the [`crate::history::RunHistory`]: the last runs (for
/// `/status`'s charts) and the totals `serve` exports as counters.
pub const STATS_HISTORY: &str = "stats/history.json";

/// The change-notification topic's path under `collection.base_url` (CN 1.0.1 4.1).
pub const TOPIC: &str = "change/";
/// [`crate::meta::ChannelRecord`]: where the notification channel is.
pub const CHANNEL: &str = "notify/channel.json";
/// Folder of the payloads not yet taken by the hub.
pub const OUTBOX: &str = "notify/outbox";
/// The payload the hub was last asked to take: the topic URI's body.
pub const LATEST: &str = "notify/latest.xml";
/// [`crate::meta::Fetched`]: what the topic route last served.
pub const FETCHED: &str = "notify/fetched.json";

/// The WebSub callbacks' segment under `collection.base_url` (`{base}websub/{upstream}`).
pub const CALLBACK_SEGMENT: &str = "websub/";

/// Every document at the top of a collection, in the order a Destination meets them.
pub const DOCUMENTS: [&str; 7] = [
    CAPABILITY_LIST,
    RESOURCE_LIST,
    CHANGE_LIST,
    CHANGE_LIST_OPEN,
    RESOURCE_DUMP,
    CHANGE_DUMP,
    SOURCE_DESCRIPTION,
];

/// The object path of Resource List part `name` (also its path under `collection.base_url`).
pub fn part_path(name: &str) -> String {
    format!("{RESOURCE_LIST_DIR}/{name}")
}

/// Where the pending parts of a Resource List on an interval are kept (the entries changed
/// since its snapshot, [`crate::meta::ResourceListMeta::pending`]): beside the metadata,
/// not under the collection's URL space, since no published document names them and only
/// `rsagg serve` reads them.
pub const RESOURCE_LIST_PENDING_DIR: &str = "published/resourcelist-pending";

/// The object path of pending part `name`.
pub fn pending_path(name: &str) -> String {
    format!("{RESOURCE_LIST_PENDING_DIR}/{name}")
}

/// The name of the part at object path `path` (the inverse of [`part_path`]).
pub fn part_name(mut path: String) -> String {
    path.split_off(RESOURCE_LIST_DIR.len() + 1)
}

/// The part holding `slot` when the slots are cut into `parts` equal ranges (so a reader,
/// `rsagg serve`, finds the part listing a resource without reading the others).
pub fn part_of(slot: u16, parts: usize) -> usize {
    (usize::from(slot) * parts) >> 16
}

/// The outbox object of payload `n`.
pub fn outbox_path(n: u64) -> String {
    format!("{OUTBOX}/{n:020}.xml")
}

/// Where the Capability List of the collection at `base_url` is.
pub fn capability_list_url(base_url: &str) -> String {
    format!("{base_url}{CAPABILITY_LIST}")
}

/// Where the Source Description of the server publishing `base_url` is: the
/// `/.well-known/resourcesync` of its origin (spec 8).
pub fn source_description_url(base_url: &str) -> String {
    match url::Url::parse(base_url) {
        Ok(u) => format!(
            "{}/.well-known/resourcesync",
            u.origin().ascii_serialization()
        ),
        Err(_) => format!("{base_url}.well-known/resourcesync"),
    }
}

/// The topic URI of the collection at `base_url` (ends with `/`).
pub fn topic_url(base_url: &str) -> String {
    format!("{base_url}{TOPIC}")
}

/// The callback URL of `upstream` under `base_url` (`None` when the name does not fit in a
/// path segment).
pub fn callback_url(base_url: &url::Url, upstream: &str) -> Option<url::Url> {
    base_url.join(&format!("{CALLBACK_SEGMENT}{upstream}")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_names_round_trip() {
        assert_eq!(part_path("p1.xml"), "resourcelist/p1.xml");
        assert_eq!(part_name(part_path("p1.xml")), "p1.xml");
    }

    #[test]
    fn parts_cut_the_slots_evenly() {
        assert_eq!(part_of(0, 4), 0);
        assert_eq!(part_of(u16::MAX, 4), 3);
        assert_eq!(part_of(0x4000, 4), 1);
    }

    #[test]
    fn the_source_description_is_at_the_origin() {
        assert_eq!(
            source_description_url("https://agg.example.org/maps/"),
            "https://agg.example.org/.well-known/resourcesync"
        );
    }
}
