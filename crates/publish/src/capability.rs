//! Writing the collection's Capability List (spec 9) and its own Source Description (spec 8),
//! rendered by `rsagg-layout`'s `capability` module.
//!
//! The Capability List is written last in a publish, after the documents it names, so a
//! Destination starting from it never meets a capability whose document is not there yet. It
//! advertises only what exists. Its `up` link names the Source Description at the server's
//! `/.well-known/resourcesync` (spec 8: the Source Description of a Source lives there;
//! `rsagg serve` builds it for every pipeline it serves); `sourcedescription.xml` in the
//! collection's store is the same document for this collection alone, for deployments that
//! serve the store directly.

use std::sync::Arc;

use object_store::ObjectStore;
use rsagg_layout::capability::{Advertised, Listed, capability_list, source_description};
use rsagg_layout::paths::{CAPABILITY_LIST, SOURCE_DESCRIPTION, capability_list_url};
use rsagg_store::documents::put;

use crate::Error;

/// Writes `capabilitylist.xml` and `sourcedescription.xml` of the collection at `base_url`.
pub async fn publish(
    objects: &Arc<dyn ObjectStore>,
    base_url: &str,
    what: &Advertised,
) -> Result<(), Error> {
    let store = objects.as_ref();
    let description = source_description([Listed {
        capability_list: capability_list_url(base_url),
        describedby: what.describedby.clone(),
    }]);
    put(store, SOURCE_DESCRIPTION, description).await?;
    put(store, CAPABILITY_LIST, capability_list(base_url, what)).await?;
    Ok(())
}
