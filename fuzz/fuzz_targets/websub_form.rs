//! The WebSub hub's request parsing (`rsagg_websub::Hub::handle`): the form of
//! `hub.mode=subscribe|unsubscribe|publish` (WebSub 5.1, 6) and the CN 1.0.1 4.1 publish
//! (`Link` headers + XML payload), plus the subscriber's verification query
//! (`subscriber::Verification::from_query`, WebSub 5.3) and `X-Hub-Signature` checking.
//!
//! Input: the first byte picks the content type (form, XML, or another); up to the first
//! `\n\n`, each line is a `Link` header value; the rest is the body.
//!
//! No request of the hub ever leaves the process: each request is handled on a fresh
//! current-thread runtime that is dropped right after `handle` returns, so the verification,
//! denial and topic fetch tasks a request spawns are dropped without ever being polled (the
//! runtime polls the future it blocks on first, and the form path completes in that first
//! poll; the XML path spawns nothing before its `spawn_blocking`). The hub having no
//! subscription afterwards is asserted each time.
//!
//! Invariants beyond "no panic":
//! - the status is one the hub documents (200, 202, 400, 403, 413, 415, 503), never 500;
//! - a form accepted (202) has the `hub.mode` it claims, an absolute http(s) `hub.callback`
//!   and `hub.topic` (or `hub.url`), a `hub.secret` under 200 bytes, and no callback or topic
//!   whose host is an IP literal that is not public or a `localhost` name (the address guard,
//!   WebSub 5.1.2);
//! - a verification query read back from its own serialization gives the same value;
//! - a signature made with `signature::sign` verifies, and a changed body does not.
#![no_main]

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rsagg_websub::signature::{self, Algorithm};
use rsagg_websub::subscriber::Verification;
use rsagg_websub::{Hub, HubConfig, HubRequest, Url};

struct Fixture {
    hub: Hub,
    /// Keeps the runtime the hub was opened on (its sweeper task lives there, never run).
    _runtime: tokio::runtime::Runtime,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut config = HubConfig::new(Url::parse("http://hub.example/").unwrap());
        config.max_publish_bytes = 64 * 1024;
        config.max_form_bytes = 4 * 1024;
        let objects = rsagg_websub::open_store("memory://").unwrap();
        let hub = runtime.block_on(Hub::open(objects, config)).unwrap();
        Fixture {
            hub,
            _runtime: runtime,
        }
    })
}

fn not_public_v4(ip: Ipv4Addr) -> bool {
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
}

fn not_public_v6(ip: Ipv6Addr) -> bool {
    ip.is_loopback()
        || ip.is_unspecified()
        || (ip.segments()[0] & 0xffc0) == 0xfe80
        || (ip.segments()[0] & 0xfe00) == 0xfc00
        || ip.to_ipv4_mapped().is_some_and(not_public_v4)
}

/// Hosts that must be refused when a request comes in, decided here independently of the
/// hub's guard.
fn obviously_private(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => not_public_v4(ip),
        Some(url::Host::Ipv6(ip)) => not_public_v6(ip),
        Some(url::Host::Domain(d)) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            d == "localhost" || d.ends_with(".localhost")
        }
        None => false,
    }
}

fn http_url(value: Option<&String>) -> Url {
    let value = value.map(|v| v.trim()).expect("accepted without the URL");
    let url = Url::parse(value).expect("accepted a URL that does not parse");
    assert!(matches!(url.scheme(), "http" | "https"), "scheme of {url}");
    assert!(
        url.host_str().is_some_and(|h| !h.is_empty()),
        "host of {url}"
    );
    url
}

fn check_accepted_form(body: &[u8]) {
    let mut params: HashMap<String, String> = HashMap::new();
    for (k, v) in url::form_urlencoded::parse(body) {
        params
            .entry(k.into_owned())
            .or_insert_with(|| v.into_owned());
    }
    let targets = match params.get("hub.mode").map(String::as_str) {
        Some("subscribe" | "unsubscribe") => {
            let secret = params.get("hub.secret").map_or(0, String::len);
            assert!(secret < 200, "accepted a secret of {secret} bytes");
            vec![
                http_url(params.get("hub.callback")),
                http_url(params.get("hub.topic")),
            ]
        }
        Some("publish") => vec![http_url(
            params.get("hub.url").or_else(|| params.get("hub.topic")),
        )],
        other => panic!("accepted hub.mode {other:?}"),
    };
    let callback_or_fetched = &targets[0];
    assert!(
        !obviously_private(callback_or_fetched),
        "accepted a request to call {callback_or_fetched}"
    );
}

fn verification_round_trip(query: &str) {
    let Some(v) = Verification::from_query(query) else {
        return;
    };
    let mut s = url::form_urlencoded::Serializer::new(String::new());
    s.append_pair("hub.mode", &v.mode);
    s.append_pair("hub.topic", &v.topic);
    if let Some(c) = &v.challenge {
        s.append_pair("hub.challenge", c);
    }
    if let Some(l) = v.lease_seconds {
        s.append_pair("hub.lease_seconds", &l.to_string());
    }
    if let Some(r) = &v.reason {
        s.append_pair("hub.reason", r);
    }
    let written = s.finish();
    assert_eq!(
        Verification::from_query(&written),
        Some(v),
        "via {written:?}"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let (head, body) = rsagg_fuzz::split_head(rest);
    let links: Vec<String> = String::from_utf8_lossy(head)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    let content_type = match kind % 4 {
        0 => Some("application/x-www-form-urlencoded".to_owned()),
        1 => Some("application/xml; charset=utf-8".to_owned()),
        2 => Some("text/plain".to_owned()),
        _ => None,
    };
    let form = kind % 4 == 0;
    let f = fixture();
    let request = HubRequest {
        content_type,
        links,
        body: Bytes::copy_from_slice(body),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let response = runtime.block_on(f.hub.handle(request));
    drop(runtime);
    assert!(
        matches!(response.status, 200 | 202 | 400 | 403 | 413 | 415 | 503),
        "{response:?}"
    );
    assert!(!response.message.is_empty());
    if form && response.status == 202 {
        check_accepted_form(body);
    }
    assert!(
        f.hub.subscriptions().is_empty(),
        "a task of a request ran (a subscription was verified)"
    );

    verification_round_trip(&String::from_utf8_lossy(body));

    let secret = head;
    let sig = signature::sign(Algorithm::Sha256, secret, body);
    assert!(signature::verify(&sig, secret, body).is_ok());
    let mut other = body.to_vec();
    other.push(b'x');
    assert!(signature::verify(&sig, secret, &other).is_err());
    // Arbitrary header text: an answer, never a panic.
    let _ = signature::verify(&String::from_utf8_lossy(head), secret, body);
});
