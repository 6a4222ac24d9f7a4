//! The store's health: every object-store request's outcome classified, and a circuit
//! breaker that stops a run promptly when the store refuses it or stays unreachable.
//!
//! Without it a dead store is not fatal: every resource is still fetched from its upstream and
//! every PUT fails on its own after its retries (a retry storm that fills the log and never
//! ends), and a store answering 403 makes the state database retry its first LIST forever.
//! With it, [`CountedStore`](crate::CountedStore) reports each outcome here; an authentication
//! or permission error trips the breaker at once, and `max_failures` consecutive failed
//! requests (each already retried by the store client) trip it as unreachable. From then on
//! every request fails at once, without touching the network, and whoever waits on
//! [`StoreHealth::tripped`] (the run) ends with one line naming the store and the cause.
//! Nothing is lost: the state only moves with what was committed, so the next run resumes.
//!
//! The same place holds the writer's fence: once the state database says another writer
//! fenced this one out ([`StoreHealth::fence`]), every write through the store is refused
//! (published documents, stats, history, the outbox, blobs), whatever step asks for it, and
//! whoever waits on [`StoreHealth::fenced_out`] (the run) ends with exit 3. Before, a fenced
//! writer went on publishing and recording its history over what the current writer wrote.

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::Notify;

/// Why the store was given up on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultKind {
    /// The store refused the credentials or the operation (HTTP 401/403: wrong keys, a
    /// bucket policy, an expired token). Retrying does not help.
    Denied,
    /// Consecutive requests failed (connection refused, timeouts, 5xx after the client's own
    /// retries): the store is down or unreachable.
    Unreachable,
    /// The store answered that the bucket does not exist (S3 `NoSuchBucket`): it is
    /// reachable, and no retry will make the bucket appear.
    NoSuchBucket,
}

/// The store was given up on: why, and the last error that said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreFault {
    /// The store URL as configured.
    pub store: String,
    /// Denied or unreachable.
    pub kind: FaultKind,
    /// The error (with its cause chain) that tripped the breaker.
    pub cause: String,
}

impl fmt::Display for StoreFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            FaultKind::Denied => write!(
                f,
                "store {} refused access ({}); check its credentials and permissions",
                self.store, self.cause
            ),
            FaultKind::Unreachable => {
                write!(f, "store {} is unreachable ({})", self.store, self.cause)
            }
            // The cause says it first: `bucket `B` does not exist (…)`.
            FaultKind::NoSuchBucket => write!(f, "store {}: {}", self.store, self.cause),
        }
    }
}

impl std::error::Error for StoreFault {}

/// The breaker of one opened store (shared by every reader and writer of it).
#[derive(Debug)]
pub struct StoreHealth {
    store: String,
    max_failures: u32,
    consecutive: AtomicU32,
    fault: OnceLock<StoreFault>,
    tripped: Notify,
    /// The state path, once another writer fenced this one out.
    fenced: OnceLock<String>,
    fenced_notify: Notify,
}

/// Why a write was refused: another writer of the same state fenced this one out, so
/// nothing it writes may reach the store any more (it would overwrite the current writer's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("state at `{path}`: fenced out by another writer; no more writes to the store")]
pub struct FencedOut {
    /// The state path.
    pub path: String,
}

/// How one request's outcome counts.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// The store answered (also with "not found", "already exists", "precondition failed":
    /// answers, not faults).
    Answered,
    /// Refused: credentials or permissions.
    Denied,
    /// The bucket does not exist.
    NoBucket,
    /// Failed in a way another request may not (network, timeout, 5xx).
    Failed,
    /// Says nothing about the store (an invalid path, an unsupported operation).
    Neutral,
}

impl StoreHealth {
    /// Default of `max_failures`: consecutive failed requests that trip the breaker.
    pub const DEFAULT_MAX_FAILURES: u32 = 3;

    /// A closed breaker for the store at `store` (its URL, for messages), tripping after
    /// `max_failures` consecutive failed requests, or on a refusal; 0: never tripping (for
    /// long-lived readers, which must outlive an outage).
    pub fn new(store: impl Into<String>, max_failures: u32) -> Arc<StoreHealth> {
        Arc::new(StoreHealth {
            store: store.into(),
            max_failures,
            consecutive: AtomicU32::new(0),
            fault: OnceLock::new(),
            tripped: Notify::new(),
            fenced: OnceLock::new(),
            fenced_notify: Notify::new(),
        })
    }

    /// Marks the writer as fenced out of the state at `path` (by the state database, on the
    /// first error or status that says so): from now on every write is refused. Final.
    pub fn fence(&self, path: &str) {
        if self.fenced.set(path.to_owned()).is_ok() {
            tracing::debug!(store = %self.store, state = %path, "fenced out: no more writes");
            self.fenced_notify.notify_waiters();
        }
    }

    /// The state path, once this writer was fenced out.
    pub fn fenced(&self) -> Option<&str> {
        self.fenced.get().map(String::as_str)
    }

    /// Resolves once this writer is fenced out (at once if it is), with the state path.
    pub async fn fenced_out(&self) -> String {
        loop {
            let notified = self.fenced_notify.notified();
            if let Some(p) = self.fenced.get() {
                return p.clone();
            }
            notified.await;
        }
    }

    /// Before a write (PUT, upload, copy, rename, delete): an error when the breaker tripped
    /// or the writer was fenced out.
    pub(crate) fn check_write(&self) -> object_store::Result<()> {
        self.check()?;
        match self.fenced.get() {
            Some(path) => Err(object_store::Error::Generic {
                store: "rsagg",
                source: Box::new(FencedOut { path: path.clone() }),
            }),
            None => Ok(()),
        }
    }

    /// The fault, once the breaker tripped.
    pub fn fault(&self) -> Option<&StoreFault> {
        self.fault.get()
    }

    /// Resolves once the breaker trips (at once if it has).
    pub async fn tripped(&self) -> StoreFault {
        loop {
            let notified = self.tripped.notified();
            if let Some(f) = self.fault.get() {
                return f.clone();
            }
            notified.await;
        }
    }

    /// Before a request: an error when the breaker tripped, so nothing more goes out.
    pub(crate) fn check(&self) -> object_store::Result<()> {
        match self.fault.get() {
            Some(f) => Err(object_store::Error::Generic {
                store: "rsagg",
                source: Box::new(f.clone()),
            }),
            None => Ok(()),
        }
    }

    /// After a request: counts its outcome.
    pub(crate) fn observe<T>(&self, r: &object_store::Result<T>) {
        if self.max_failures == 0 {
            return;
        }
        let e = match r {
            Ok(_) => {
                self.consecutive.store(0, Ordering::Relaxed);
                return;
            }
            Err(e) => e,
        };
        match classify(e) {
            Verdict::Answered => self.consecutive.store(0, Ordering::Relaxed),
            Verdict::Neutral => {}
            Verdict::Denied => self.trip(FaultKind::Denied, e),
            Verdict::NoBucket => self.trip(FaultKind::NoSuchBucket, e),
            Verdict::Failed => {
                let n = self.consecutive.fetch_add(1, Ordering::Relaxed) + 1;
                if n >= self.max_failures {
                    self.trip(FaultKind::Unreachable, e);
                }
            }
        }
    }

    fn trip(&self, kind: FaultKind, e: &object_store::Error) {
        // Our own refusal (after the trip) is not a new fault; a disabled breaker never trips.
        if self.fault.get().is_some() || self.max_failures == 0 {
            return;
        }
        let fault = StoreFault {
            store: self.store.clone(),
            kind,
            cause: chain(e),
        };
        if self.fault.set(fault).is_ok() {
            // The run ends with the fault as its one error line; this is for debugging.
            tracing::debug!(store = %self.store, fault = ?self.fault.get(), "store breaker tripped");
            self.tripped.notify_waiters();
        }
    }
}

/// `e` and its sources, `: `-separated, without repeats (wrappers often repeat their
/// source's text), on one line (an S3 error document has several) of at most
/// [`CAUSE_CHARS`] characters.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let one_line = one_line(e);
    match one_line.char_indices().nth(CAUSE_CHARS) {
        Some((i, _)) => format!("{}…", &one_line[..i]),
        None => one_line,
    }
}

/// `e` and its sources on one line, as people read it: an S3 error document in it (object
/// store clients quote the response body, `<?xml …><Error><Code>…</Code><Message>…`) is
/// replaced by its code and message, and a missing bucket (`NoSuchBucket`) is said first,
/// in words: `bucket `B` does not exist (…)`. Every error rsagg shows of a store goes
/// through here (the command's one line, the breaker's fault, `/readyz`).
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let text = full_chain(e);
    let Some(doc) = S3ErrorDocument::find(&text) else {
        return text;
    };
    let mut out = String::with_capacity(text.len());
    out.push_str(text[..doc.span.start].trim_end_matches([' ', ':']));
    if !out.is_empty() {
        out.push_str(": ");
    }
    out.push_str(&doc.code);
    if let Some(m) = &doc.message {
        out.push_str(": ");
        out.push_str(m);
    }
    out.push_str(&text[doc.span.end..]);
    if doc.code == "NoSuchBucket" {
        let bucket = doc.bucket.as_deref().unwrap_or("of the store URL");
        return format!("bucket `{bucket}` does not exist ({out})");
    }
    out
}

/// The fields of an S3 error response body (`<Error><Code>…</Code>…</Error>`) quoted in an
/// error message, and where it is.
struct S3ErrorDocument {
    span: std::ops::Range<usize>,
    code: String,
    message: Option<String>,
    bucket: Option<String>,
}

impl S3ErrorDocument {
    fn find(text: &str) -> Option<S3ErrorDocument> {
        let open = text.find("<Error>")?;
        let start = text[..open].rfind("<?xml").unwrap_or(open);
        let end = text[open..]
            .find("</Error>")
            .map_or(text.len(), |i| open + i + "</Error>".len());
        let body = &text[open..end];
        let field = |name: &str| {
            let from = body.find(&format!("<{name}>"))? + name.len() + 2;
            let to = from + body[from..].find(&format!("</{name}>"))?;
            Some(body[from..to].trim().to_owned()).filter(|v| !v.is_empty())
        };
        let bucket = field("BucketName").or_else(|| {
            // `<Resource>/bucket/key</Resource>` when the store does not name it.
            field("Resource").and_then(|r| {
                r.trim_start_matches('/')
                    .split('/')
                    .next()
                    .map(str::to_owned)
            })
        });
        Some(S3ErrorDocument {
            span: start..end,
            code: field("Code")?,
            message: field("Message"),
            bucket: bucket.filter(|b| !b.is_empty()),
        })
    }
}

/// `e` and its sources on one line, whole.
fn full_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let t = s.to_string();
        if !out.contains(&t) {
            out.push_str(": ");
            out.push_str(&t);
        }
        cur = s.source();
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Longest cause kept in a [`StoreFault`].
const CAUSE_CHARS: usize = 400;

fn classify(e: &object_store::Error) -> Verdict {
    use object_store::Error as E;
    match e {
        // A GET or PUT in a missing bucket is a 404 too, but not an object's absence.
        E::NotFound { .. } if full_chain(e).contains("<Code>NoSuchBucket</Code>") => {
            Verdict::NoBucket
        }
        E::NotFound { .. }
        | E::AlreadyExists { .. }
        | E::Precondition { .. }
        | E::NotModified { .. } => Verdict::Answered,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => Verdict::Denied,
        E::NotImplemented { .. }
        | E::NotSupported { .. }
        | E::InvalidPath { .. }
        | E::UnknownConfigurationKey { .. } => Verdict::Neutral,
        E::Generic { source, .. } if source.is::<StoreFault>() || source.is::<FencedOut>() => {
            Verdict::Neutral
        }
        other => {
            // Stores that report a refusal only in the text of a generic error (S3's XML
            // codes, an HTTP status in the message).
            let text = full_chain(other);
            const DENIED: [&str; 7] = [
                "AccessDenied",
                "InvalidAccessKeyId",
                "SignatureDoesNotMatch",
                "ExpiredToken",
                "403 Forbidden",
                "401 Unauthorized",
                "Permission denied",
            ];
            if DENIED.iter().any(|d| text.contains(d)) {
                Verdict::Denied
            } else if text.contains("<Code>NoSuchBucket</Code>") {
                Verdict::NoBucket
            } else {
                Verdict::Failed
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(msg: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: Box::new(std::io::Error::other(msg.to_owned())),
        }
    }

    #[tokio::test]
    async fn consecutive_failures_trip_and_answers_reset() {
        let h = StoreHealth::new("s3://b/p", 3);
        h.observe::<()>(&Err(generic("connection refused")));
        h.observe::<()>(&Err(generic("connection refused")));
        // A "not found" is the store answering: the count starts again.
        h.observe::<()>(&Err(object_store::Error::NotFound {
            path: "x".into(),
            source: Box::new(std::io::Error::other("nope")),
        }));
        h.observe::<()>(&Err(generic("connection refused")));
        h.observe::<()>(&Err(generic("connection refused")));
        assert!(h.fault().is_none() && h.check().is_ok());
        h.observe::<()>(&Err(generic("connection refused")));
        let f = h.tripped().await;
        assert_eq!(f.kind, FaultKind::Unreachable);
        assert!(f.to_string().contains("s3://b/p") && f.to_string().contains("connection refused"));
        let refused = h.check().unwrap_err();
        assert!(refused.to_string().contains("unreachable"), "{refused}");
        // Its own refusals do not change the fault.
        h.observe::<()>(&Err(refused));
        assert_eq!(h.fault().unwrap().kind, FaultKind::Unreachable);
    }

    #[test]
    fn s3_error_documents_read_as_one_line_with_code_and_message() {
        let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>\n  <Code>NoSuchBucket</Code>\n  <Message>The specified bucket does not exist</Message>\n  <Resource>/nobucket/state/manifest</Resource>\n  <RequestId>1</RequestId>\n  <BucketName>nobucket</BucketName>\n</Error>";
        let e = generic(&format!(
            "Error performing GET http://127.0.0.1:1/nobucket?list-type=2 in 2ms - Server returned non-2xx status code: 404 Not Found: {body}"
        ));
        let line = one_line(&e);
        assert!(!line.contains('<') && !line.contains('\n'), "{line}");
        assert!(
            line.starts_with("bucket `nobucket` does not exist ("),
            "{line}"
        );
        assert!(
            line.contains("404 Not Found: NoSuchBucket: The specified bucket does not exist"),
            "{line}"
        );
        let e = generic(
            "Server returned error response: <Error><Code>SlowDown</Code><Message>Reduce your request rate</Message></Error> (retry later)",
        );
        assert_eq!(
            one_line(&e),
            "Generic S3 error: Server returned error response: SlowDown: Reduce your request rate (retry later)"
        );
        // Without a bucket name, from the resource.
        let e = generic("<Error><Code>NoSuchBucket</Code><Resource>/b2/x</Resource></Error>");
        assert_eq!(
            one_line(&e),
            "bucket `b2` does not exist (Generic S3 error: NoSuchBucket)"
        );
        // The breaker gives up at once, saying what it is, not "unreachable".
        let h = StoreHealth::new("s3://nobucket/p", 3);
        h.observe::<()>(&Err(generic(body)));
        let f = h.fault().unwrap();
        assert_eq!(f.kind, FaultKind::NoSuchBucket);
        assert!(
            f.to_string()
                .starts_with("store s3://nobucket/p: bucket `nobucket` does not exist ("),
            "{f}"
        );
        // Anything else as it was.
        assert_eq!(
            one_line(&generic("connection refused")),
            "Generic S3 error: connection refused"
        );
    }

    #[tokio::test]
    async fn permission_errors_trip_at_once() {
        let h = StoreHealth::new("s3://b", 3);
        h.observe::<()>(&Err(object_store::Error::PermissionDenied {
            path: "state/manifest/".into(),
            source: Box::new(std::io::Error::other("AccessDenied: Access Denied")),
        }));
        assert_eq!(h.tripped().await.kind, FaultKind::Denied);
        let h = StoreHealth::new("s3://b", 3);
        h.observe::<()>(&Err(generic(
            "response error \"<Code>AccessDenied</Code>\"",
        )));
        assert_eq!(h.fault().unwrap().kind, FaultKind::Denied);
        let h = StoreHealth::new("s3://b", 3);
        h.observe::<()>(&Err(object_store::Error::NotSupported {
            source: Box::new(std::io::Error::other("x")),
        }));
        h.observe::<()>(&Ok(()));
        assert!(h.fault().is_none());
        // Disabled (long-lived readers): never trips.
        let h = StoreHealth::new("s3://b", 0);
        h.observe::<()>(&Err(object_store::Error::PermissionDenied {
            path: "x".into(),
            source: Box::new(std::io::Error::other("AccessDenied")),
        }));
        assert!(h.fault().is_none() && h.check().is_ok());
    }

    #[tokio::test]
    async fn a_fence_refuses_writes_only_and_is_final() {
        let h = StoreHealth::new("s3://b", 3);
        assert!(h.check_write().is_ok() && h.fenced().is_none());
        h.fence("s3://b/state");
        h.fence("s3://b/other");
        assert_eq!(h.fenced(), Some("s3://b/state"));
        assert_eq!(h.fenced_out().await, "s3://b/state");
        // Reads still go out; writes do not, and the refusal is no store fault.
        assert!(h.check().is_ok());
        let refused = h.check_write().unwrap_err();
        assert!(refused.to_string().contains("fenced out"), "{refused}");
        for _ in 0..5 {
            h.observe::<()>(&Err(h.check_write().unwrap_err()));
        }
        assert!(h.fault().is_none());
    }
}
