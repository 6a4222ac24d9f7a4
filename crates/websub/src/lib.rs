//! rsagg-websub: the WebSub hub of `rsagg hub`, the publishing client rsagg's own change
//! notifications go out with, the subscriber side `rsagg run --follow --listen` uses for
//! upstream channels, and the HMAC signatures of WebSub 7.1.
//!
//! The hub speaks W3C WebSub (Recommendation, 23 January 2018) to subscribers and accepts
//! publications in both forms a ResourceSync Source uses: the Change Notification 1.0.1
//! section 4.1 form (the payload POSTed with `Link` rel `self`/`hub`, answered 200) and the
//! plain WebSub `hub.mode=publish` form (answered 202, then the hub GETs the topic), because
//! stock publishers only know the latter.
//!
//! No HTTP framework type appears in the hub's API: a request is a [`HubRequest`] (content
//! type, `Link` values, body) and the answer a [`HubResponse`], so the router in
//! `rsagg-server` stays a thin adapter. Outgoing requests (verification of intent, topic
//! fetches, deliveries) use `reqwest`, through the address guard of `rsagg-fetch`
//! ([`rsagg_fetch::guard`]): anyone can hand a hub a callback URL, so unless
//! [`HubConfig::allow_private_callbacks`] is set the hub refuses private, loopback,
//! link-local and unspecified targets — IP literals and `localhost` names when the request
//! comes in (WebSub 5.1.2), every resolved address when a connection is made — follows no
//! redirect and uses no proxy. The subscriber's requests to an upstream's hub go through the
//! same guard ([`subscriber::Subscriber::guarded`]).
//!
//! Subscriptions and undelivered messages live in an object store (the same kinds of URLs as
//! the rest of rsagg), so a restarted hub resumes where it stopped:
//!
//! ```text
//! hub/subscriptions/<id>.json        a verified subscription (id = sha256 of topic + callback)
//! hub/queue/<id>/<seq:020>.json      a message waiting for that subscriber, in order
//! hub/payloads/<message id>          a published body, shared by its queue entries,
//!                                    deleted when the last of them is delivered or dropped
//! ```
//!
//! # Layout
//!
//! - `signature.rs`: `X-Hub-Signature` (sign, constant-time verify; sha1/256/384/512).
//! - `link.rs`: reading and writing the `Link` header (rel `self` and `hub`).
//! - `config.rs`: [`HubConfig`] (lease range, allowlist, address guard, bounds) and its
//!   defaults.
//! - `records.rs`: the persisted subscription and queue records and their object paths.
//! - `hub.rs`: [`Hub`]: requests (subscribe, unsubscribe, both publish forms), verification
//!   of intent, restoring from the store.
//! - `shared.rs`: the hub's state shared by requests and delivery workers.
//! - `delivery.rs`: per-subscriber workers: ordered delivery, retries with backoff, expiry.
//! - `publisher.rs`: the publishing side ([`Publisher`]): one publish request to a hub, in
//!   the CN 1.0.1 4.1 form or the WebSub `hub.mode=publish` form, and what its answer means
//!   for a retry loop (used by rsagg's notification outbox, ``rsagg-notify`).
//! - `intake.rs`: [`intake::PushIntake`], what a callback hands a delivery to (implemented
//!   by the harvest's push inbox, called by the server's callback router).
//! - `subscriber.rs`: [`subscriber::Subscriber`]: subscription requests, verification of
//!   intent answered only for what was asked, lease renewal, authentication of deliveries.

mod config;
mod delivery;
mod hub;
pub mod intake;
pub mod link;
mod publisher;
mod records;
mod shared;
pub mod signature;
pub mod subscriber;

use std::fmt;

pub use config::HubConfig;
pub use hub::{Hub, HubRequest, HubResponse, HubStats, SubscriptionInfo};
pub use publisher::{Attempt, PublishForm, Publisher, backoff};
pub use records::subscription_id;
/// Re-exported: [`HubConfig::public_url`] is a `Url`.
pub use url::Url;

/// Opens the hub's store from a store URL (`file:///dir`, `s3://bucket/prefix`, `memory://`),
/// the same URLs as pipelines use (`rsagg_store::open_object_store`).
pub fn open_store(url: &str) -> Result<std::sync::Arc<dyn object_store::ObjectStore>, Error> {
    Ok(rsagg_store::open_object_store(url)?.objects)
}

/// Why a signature did not verify (inside [`Error::Signature`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignatureFailure {
    /// The header is not `method=hex`.
    Malformed,
    /// The method is none of WebSub 7.1's (`sha1`, `sha256`, `sha384`, `sha512`).
    UnknownMethod,
    /// The HMAC does not match: wrong secret or altered body.
    Mismatch,
}

impl fmt::Display for SignatureFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SignatureFailure::Malformed => "not of the form method=hex",
            SignatureFailure::UnknownMethod => "method is not sha1, sha256, sha384 or sha512",
            SignatureFailure::Mismatch => "HMAC does not match the body",
        })
    }
}

/// Errors of the hub and of signature checks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The hub's configuration cannot work (e.g. an empty lease range).
    #[error("hub configuration: {0}")]
    Config(String),
    /// The store failed (JSON records).
    #[error(transparent)]
    Store(#[from] rsagg_store::Error),
    /// An object store request failed.
    #[error("object `{path}`: {source}")]
    ObjectStore {
        /// Object path.
        path: String,
        /// Underlying error.
        #[source]
        source: object_store::Error,
    },
    /// The HTTP client could not be built.
    #[error("HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// A subscription request to a hub failed (WebSub 5.1: the hub must answer 2xx).
    #[error("subscription request to hub `{hub}` (WebSub 5.1): {message}")]
    Request {
        /// The hub URL.
        hub: String,
        /// What happened.
        message: String,
    },
    /// An `X-Hub-Signature` did not verify.
    #[error("X-Hub-Signature: {0}")]
    Signature(SignatureFailure),
    /// The address guard of `rsagg-fetch` refused an outgoing request: its target is, or
    /// resolves to, a private, loopback, link-local or unspecified address (or a `localhost`
    /// name), and such targets are not allowed (the hub without
    /// [`HubConfig::allow_private_callbacks`], or a subscriber for an upstream without
    /// `allow_private`). Nothing was sent.
    #[error("`{url}`: refused by the address guard: {reason}")]
    Refused {
        /// The URL refused.
        url: String,
        /// Which address, and why.
        reason: String,
    },
    /// An outgoing request of the hub (verification of intent, topic fetch, delivery) got no
    /// usable answer: connection, timeout, or a body over its cap.
    #[error("request to `{url}`: {message}")]
    Outgoing {
        /// The URL requested.
        url: String,
        /// What happened.
        message: String,
    },
}

/// The guard of `rsagg-fetch` on a target before a request is sent
/// ([`rsagg_fetch::guard::check_target`]: the scheme, then, unless `allow_private`, IP
/// literals, which skip DNS, and `localhost` names). Host names are judged again at connect
/// time by the resolver of a client from [`rsagg_fetch::guard::client_builder`].
pub(crate) fn check_target(url: &Url, allow_private: bool) -> Result<(), Error> {
    rsagg_fetch::guard::check_target(url, allow_private).map_err(|e| match e {
        rsagg_fetch::Error::Refused { reason, .. } => Error::Refused {
            url: url.to_string(),
            reason,
        },
        other => Error::Outgoing {
            url: url.to_string(),
            message: other.to_string(),
        },
    })
}

/// A failed request of a guarded client: the resolver's refusal when there is one in the
/// error's chain (the name resolved to a non-public address), else the transport error.
pub(crate) fn request_error(url: &str, e: &reqwest::Error) -> Error {
    match rsagg_fetch::guard::find_refusal(e) {
        Some(reason) => Error::Refused {
            url: url.to_owned(),
            reason,
        },
        None => Error::Outgoing {
            url: url.to_owned(),
            message: e.to_string(),
        },
    }
}

impl Error {
    pub(crate) fn object_store(path: impl fmt::Display, source: object_store::Error) -> Error {
        Error::ObjectStore {
            path: path.to_string(),
            source,
        }
    }
}
