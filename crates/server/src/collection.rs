//! A served collection: what one pipeline published, and where on the server it lives.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use object_store::ObjectStore;
use rsagg_config::Pipeline;
use url::Url;

use crate::Error;

/// One republished collection as the server sees it: its name, its public prefix
/// (`collection.base_url`, which ends with `/`), the path part of that prefix (requests are
/// routed by path only, since the server may sit behind a proxy that changes scheme and
/// host) and the object store its pipeline publishes into.
#[derive(Debug, Clone)]
pub struct Collection {
    name: String,
    base_url: String,
    base_path: String,
    objects: Arc<dyn ObjectStore>,
    /// The hub of the collection's change-notification channel (`[notify] hub`), when it
    /// has one: its topic URI `{base_url}change/` is then served.
    hub: Option<String>,
    /// `collection.describedby`: linked from the Source Description's entry (spec 8).
    describedby: Option<String>,
}

impl Collection {
    /// A collection named `name`, published under `base_url` into `objects`. The base URL
    /// must be an absolute http(s) URL ending with `/`, without query or fragment (it is a
    /// prefix that document names are appended to).
    pub fn new(
        name: impl Into<String>,
        base_url: &str,
        objects: Arc<dyn ObjectStore>,
    ) -> Result<Collection, Error> {
        let name = name.into();
        let err = |message: &str| Error::BaseUrl {
            name: name.clone(),
            url: base_url.to_owned(),
            message: message.to_owned(),
        };
        let url = Url::parse(base_url).map_err(|e| err(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(err("must be an http(s) URL"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(err("must not have a query or fragment"));
        }
        // The documents' `<loc>`s are this string with names appended: it must be the
        // prefix exactly as written, so the serialised URL has to agree with it.
        if !base_url.ends_with('/') || !url.as_str().ends_with('/') {
            return Err(err("must end with `/`"));
        }
        Ok(Collection {
            name,
            base_url: base_url.to_owned(),
            base_path: url.path().to_owned(),
            objects,
            hub: None,
            describedby: None,
        })
    }

    /// The same collection with a change-notification channel published to `hub` (its
    /// topic URI is then served, CN 1.0.1 section 4.1).
    pub fn with_hub(mut self, hub: impl Into<String>) -> Collection {
        self.hub = Some(hub.into());
        self
    }

    /// The same collection described by the document at `url` (`collection.describedby`),
    /// which the Source Description links to (spec 8).
    pub fn with_describedby(mut self, url: impl Into<String>) -> Collection {
        self.describedby = Some(url.into());
        self
    }

    /// The collection of a validated pipeline, reading from the store its config names
    /// (opened as plain objects: the state database is never opened here).
    pub fn from_pipeline(p: &Pipeline) -> Result<Collection, Error> {
        // Read-only: a `file://` store no run has written yet is not created by serving it.
        let store = rsagg_store::open_store_read_only(
            p.config.store.url.as_str(),
            &rsagg_store::StoreOptions::READER,
        )?;
        let c = Collection::new(
            p.config.collection.name.clone(),
            p.config.collection.base_url.as_str(),
            store.objects,
        )?;
        let c = match &p.config.collection.describedby {
            Some(d) => c.with_describedby(d.to_string()),
            None => c,
        };
        Ok(match &p.config.notify {
            Some(n) => c.with_hub(n.hub.to_string()),
            None => c,
        })
    }

    /// `collection.name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `collection.base_url` (ends with `/`).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The path of the base URL (starts and ends with `/`), as requests carry it.
    pub fn base_path(&self) -> &str {
        &self.base_path
    }

    /// The hub of the collection's change-notification channel, when it has one.
    pub fn hub(&self) -> Option<&str> {
        self.hub.as_deref()
    }

    /// The document describing the collection (`collection.describedby`), when set.
    pub fn describedby(&self) -> Option<&str> {
        self.describedby.as_deref()
    }

    /// The store the collection's pipeline publishes into.
    pub fn objects(&self) -> &Arc<dyn ObjectStore> {
        &self.objects
    }

    /// The same collection read through `objects` (the router's counting wrapper of its
    /// store).
    pub(crate) fn with_objects(mut self, objects: Arc<dyn ObjectStore>) -> Collection {
        self.objects = objects;
        self
    }
}

/// Checks that `collections` can be served together: names are unique (they name the
/// collections in logs and, in the contract, among served pipelines) and so are base paths
/// (two collections under one path would answer the same requests).
pub fn check_collections(collections: &[Collection]) -> Result<(), Error> {
    let mut names: HashSet<&str> = HashSet::new();
    let mut paths: HashMap<&str, &str> = HashMap::new();
    for c in collections {
        if !names.insert(&c.name) {
            return Err(Error::Conflict {
                first: c.name.clone(),
                second: c.name.clone(),
                message: "have the same name (collection.name must be unique among served \
                          pipelines)"
                    .to_owned(),
            });
        }
        if let Some(first) = paths.insert(&c.base_path, &c.name) {
            return Err(Error::Conflict {
                first: first.to_owned(),
                second: c.name.clone(),
                message: format!(
                    "have the same base path `{}` (requests are routed by path only)",
                    c.base_path
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn store() -> Arc<dyn ObjectStore> {
        Arc::new(InMemory::new())
    }

    #[test]
    fn base_paths_come_from_the_base_url() {
        let c = Collection::new("maps", "https://agg.example.org/x/maps/", store()).unwrap();
        assert_eq!(c.base_path(), "/x/maps/");
        let root = Collection::new("all", "http://agg.example.org/", store()).unwrap();
        assert_eq!(root.base_path(), "/");
    }

    #[test]
    fn unusable_base_urls_are_refused() {
        for bad in [
            "https://agg.example.org/maps",
            "ftp://agg.example.org/maps/",
            "https://agg.example.org/maps/?a=1",
            "/maps/",
        ] {
            let e = Collection::new("maps", bad, store()).unwrap_err();
            assert!(e.to_string().contains("maps"), "{bad}: {e}");
        }
    }

    #[test]
    fn names_and_base_paths_must_be_unique() {
        let a = Collection::new("a", "https://one.example/maps/", store()).unwrap();
        let b = Collection::new("b", "https://two.example/maps/", store()).unwrap();
        let c = Collection::new("a", "https://one.example/texts/", store()).unwrap();
        let d = Collection::new("d", "https://one.example/texts/", store()).unwrap();
        let e = check_collections(&[a.clone(), b]).unwrap_err().to_string();
        assert!(e.contains("base path `/maps/`"), "{e}");
        let e = check_collections(&[a.clone(), c]).unwrap_err().to_string();
        assert!(e.contains("same name"), "{e}");
        check_collections(&[a, d]).unwrap();
    }
}
