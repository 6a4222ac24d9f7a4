//! Published documents and the small JSON objects the publishers keep beside them
//! (`published/*.json`), in the same object store as the blobs and the state.
//!
//! Every publisher follows the same discipline, so the helpers live here once:
//!
//! - a document is replaced by writing a new object and then the object that names it, so a
//!   reader following links never meets a name that does not exist yet;
//! - an object no longer named is *retired* (remembered with the time it stopped being
//!   named) and deleted only after a grace period, so a Destination that read the previous
//!   document can still fetch what it names ([`sweep_retired`]); a retired entry ending in
//!   `/` stands for everything under it (a whole generation of packages).

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Error;

fn os_err(path: &Path) -> impl FnOnce(object_store::Error) -> Error + '_ {
    move |source| Error::object_store(path, source)
}

/// Reads the JSON object at `path`; `None` when there is none.
pub async fn get_json<T: DeserializeOwned>(
    objects: &dyn ObjectStore,
    path: &str,
) -> Result<Option<T>, Error> {
    let p = Path::from(path);
    let bytes = match objects.get(&p).await {
        Ok(r) => r.bytes().await.map_err(os_err(&p))?,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(os_err(&p)(e)),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| Error::Record {
            key: path.to_owned(),
            source,
        })
}

/// Writes `value` as JSON at `path` (replacing what was there).
pub async fn put_json<T: Serialize>(
    objects: &dyn ObjectStore,
    path: &str,
    value: &T,
) -> Result<(), Error> {
    let body = serde_json::to_vec(value).map_err(|source| Error::Record {
        key: path.to_owned(),
        source,
    })?;
    put(objects, path, Bytes::from(body)).await
}

/// Writes `body` at `path` (replacing what was there). A [`PutPayload`] may be made of
/// several chunks (e.g. a document's header and its entries), written without joining them.
pub async fn put(
    objects: &dyn ObjectStore,
    path: &str,
    body: impl Into<PutPayload>,
) -> Result<(), Error> {
    let p = Path::from(path);
    objects.put(&p, body.into()).await.map_err(os_err(&p))?;
    Ok(())
}

/// Deletes the retired objects (`(object path, unix seconds when retired)`) whose grace
/// period has passed at `now` (unix seconds) and removes them from `retired`; the others
/// stay for a later call. An entry ending in `/` is a prefix: everything under it goes. An
/// object already gone counts as deleted; an entry that could not be deleted stays for the
/// next call (a publish does not fail over a leftover). Returns how many entries went.
pub async fn sweep_retired(
    objects: &dyn ObjectStore,
    retired: &mut Vec<(String, i64)>,
    now: i64,
    grace: Duration,
) -> Result<usize, Error> {
    let grace = i64::try_from(grace.as_secs()).unwrap_or(i64::MAX);
    let mut deleted = 0;
    let mut kept = Vec::with_capacity(retired.len());
    for (name, at) in retired.drain(..) {
        if now.saturating_sub(at) < grace {
            kept.push((name, at));
            continue;
        }
        match delete(objects, &name).await {
            Ok(()) => deleted += 1,
            Err(e) => {
                tracing::warn!(object = %name, error = %rsagg_model::ErrorChain(&e), "could not delete a retired object");
                kept.push((name, at));
            }
        }
    }
    *retired = kept;
    Ok(deleted)
}

/// Deletes the object `name`, or everything under it when it ends in `/`; what is already
/// gone is no error.
async fn delete(objects: &dyn ObjectStore, name: &str) -> Result<(), object_store::Error> {
    let targets: Vec<Path> = if name.ends_with('/') {
        let prefix = Path::from(name);
        let mut listed = objects.list(Some(&prefix));
        let mut all = Vec::new();
        while let Some(meta) = listed.next().await {
            all.push(meta?.location);
        }
        all
    } else {
        vec![Path::from(name)]
    };
    for path in targets {
        match objects.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn json_round_trips_and_retired_objects_wait_for_their_grace() {
        let objects = InMemory::new();
        assert_eq!(
            get_json::<Vec<u32>>(&objects, "m.json").await.unwrap(),
            None
        );
        put_json(&objects, "m.json", &vec![1u32, 2]).await.unwrap();
        assert_eq!(
            get_json::<Vec<u32>>(&objects, "m.json").await.unwrap(),
            Some(vec![1, 2])
        );
        put(&objects, "m.json", Bytes::from_static(b"not json"))
            .await
            .unwrap();
        let e = get_json::<Vec<u32>>(&objects, "m.json").await.unwrap_err();
        assert!(e.to_string().contains("m.json"), "{e}");

        for name in ["a", "b"] {
            put(&objects, name, Bytes::from_static(b"x")).await.unwrap();
        }
        let mut retired = vec![
            ("a".to_owned(), 100),
            ("b".to_owned(), 190),
            ("gone".into(), 0),
        ];
        let n = sweep_retired(&objects, &mut retired, 200, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(n, 2, "`a` and the already deleted `gone`");
        assert_eq!(retired, [("b".to_owned(), 190)]);
        assert!(objects.head(&Path::from("a")).await.is_err());
        assert!(objects.head(&Path::from("b")).await.is_ok());
        let n = sweep_retired(&objects, &mut retired, 250, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!((n, retired.len()), (1, 0));
    }

    #[tokio::test]
    async fn a_retired_prefix_takes_everything_under_it() {
        let objects = InMemory::new();
        for name in ["g1/a.zip", "g1/sub/b.xml", "g10/c.zip", "g2/d.zip"] {
            put(&objects, name, Bytes::from_static(b"x")).await.unwrap();
        }
        let mut retired = vec![("g1/".to_owned(), 0), ("g2/".to_owned(), 100)];
        let n = sweep_retired(&objects, &mut retired, 100, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(retired, [("g2/".to_owned(), 100)]);
        for (name, there) in [
            ("g1/a.zip", false),
            ("g1/sub/b.xml", false),
            ("g10/c.zip", true),
            ("g2/d.zip", true),
        ] {
            assert_eq!(
                objects.head(&Path::from(name)).await.is_ok(),
                there,
                "{name}"
            );
        }
    }
}
