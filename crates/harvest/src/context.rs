//! What the harvest works with: the run-wide [`Ctx`] and one upstream's [`Harvest`], which
//! every step (`baseline.rs`, `incremental.rs`, `from_dump.rs`, `resource.rs`, `push.rs`)
//! extends with its own `impl Harvest` block.

use std::collections::HashSet;
use std::sync::Arc;

use rsagg_config::{FetchSection, UpstreamConfig};
use rsagg_fetch::{Access, Fetcher};
use rsagg_store::{Blobs, State};

/// Shared by every upstream of a run.
pub struct Ctx {
    /// The HTTP client (the pipeline's `[fetch]` bounds).
    pub fetcher: Fetcher,
    /// Where copies go.
    pub blobs: Blobs,
    /// The collection's state, opened as the writer.
    pub state: Arc<State>,
    /// The pipeline's `[fetch]` settings.
    pub fetch: FetchSection,
    /// How far the run is (for a progress display).
    pub progress: Arc<crate::Progress>,
    /// `run --baseline`: every set is re-synced from its Resource List although it has a
    /// checkpoint, and every listed resource is fetched again (unconditionally, nothing
    /// skipped as unchanged), so stored bytes that went missing or bad are written again.
    pub baseline: bool,
}

/// One upstream's harvest; cheap to clone, so each resource's work can run as its own task
/// (on either core) rather than all inside the one task that drives the list.
#[derive(Clone)]
pub struct Harvest {
    pub(crate) ctx: Arc<Ctx>,
    pub(crate) up: Arc<UpstreamConfig>,
    pub(crate) access: Access,
    /// URIs of this upstream in quarantine when the run started (few): a verified copy
    /// releases them.
    pub(crate) quarantined: Arc<HashSet<String>>,
}
