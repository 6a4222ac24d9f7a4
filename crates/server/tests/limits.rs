//! The inbound limits of every listener rsagg runs, over real TCP on 127.0.0.1: `serve`'s
//! [`Server`], the same server with the WebSub callbacks of `run --follow --listen`, and
//! the hub's [`HubServer`]. A client that does not finish its request head within the
//! header timeout is disconnected; bodies beyond a route's cap get 413; normal requests and
//! graceful shutdown keep working. (The connection cap, idle keep-alive and shutdown with a
//! request in flight are tested beside the loop, in `src/listen.rs`.)

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rsagg_pipeline::{Inbox, Pipeline};
use rsagg_server::hub::HubServer;
use rsagg_server::{Collection, Limits, MAX_PAYLOAD_BYTES, Push, Server};
use rsagg_websub::{Hub, HubConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use url::Url;

const BASE: &str = "https://agg.example.org/maps/";
const WAIT: Duration = Duration::from_secs(20);
/// The header timeout of these tests: short, so a held connection is cut quickly.
const TIMEOUT: Duration = Duration::from_secs(1);

/// Sends `head` (and `body`) on a fresh connection and reads until the server closes it:
/// the status and the body of the answer.
async fn exchange(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut raw))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// `METHOD PATH` with `Connection: close`, a `Content-Length` of `body` and `headers`.
fn head(method: &str, path: &str, headers: &[&str], body: &[u8]) -> String {
    let mut h = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for line in headers {
        h.push_str(line);
        h.push_str("\r\n");
    }
    h.push_str("\r\n");
    h
}

/// Sends half a request head and waits: asserts the server closes the connection after
/// about [`TIMEOUT`], without serving it.
async fn half_sent_head_is_cut(addr: SocketAddr) {
    let mut held = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    held.write_all(b"POST / HTTP/1.1\r\nHost: test\r\nContent-Le")
        .await
        .unwrap();
    let mut got = Vec::new();
    let closed = tokio::time::timeout(WAIT, async {
        let mut buf = [0u8; 1024];
        loop {
            match held.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .is_ok();
    let took = started.elapsed();
    assert!(
        closed,
        "a half-sent request head was held open for {took:?}"
    );
    let got = String::from_utf8_lossy(&got);
    assert!(!got.contains(" 200 ") && !got.contains(" 202 "), "{got}");
    assert!(
        took >= TIMEOUT.mul_f32(0.9) && took < TIMEOUT * 5,
        "cut after {took:?}, the header timeout is {TIMEOUT:?}"
    );
}

fn pipeline() -> Pipeline {
    let text = format!(
        "[collection]\nname = \"maps\"\nbase_url = \"{BASE}\"\n\n[store]\nurl = \"memory:///\"\n\n\
         [[upstream]]\nname = \"museum\"\nurl = \"http://up.example/\"\n"
    );
    Pipeline::parse(Path::new("maps.toml"), &text).unwrap()
}

/// Runs `server` until the returned sender fires (or is dropped).
fn spawn_server(server: Server) -> (oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        server
            .run(async move {
                let _ = rx.await;
            })
            .await
            .unwrap();
    });
    (tx, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_cuts_a_half_sent_head_and_still_serves() {
    let objects = Arc::new(object_store::memory::InMemory::new());
    let collection = Collection::new("maps", BASE, objects).unwrap();
    let server = Server::bind("127.0.0.1:0", vec![collection])
        .await
        .unwrap()
        .with_limits(Limits::new(TIMEOUT, 8));
    let addr = server.local_addr().unwrap();
    let (stop, task) = spawn_server(server);
    half_sent_head_is_cut(addr).await;
    let (status, body) = exchange(addr, &head("GET", "/healthz", &[], b""), b"").await;
    assert_eq!((status, body.trim()), (200, "ok"));
    // No route of `serve` takes a body: it is never read, the method is refused.
    let big = vec![b'x'; 64 * 1024];
    let (status, _) = exchange(
        addr,
        &head("POST", "/maps/resourcelist.xml", &[], &big),
        &big,
    )
    .await;
    assert_eq!(status, 405);
    stop.send(()).unwrap();
    tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_listen_cuts_a_half_sent_head_and_refuses_an_oversized_delivery() {
    let p = pipeline();
    let inbox: Arc<Inbox> = Inbox::new(&p).unwrap();
    let collection = Collection::from_pipeline(&p).unwrap();
    let push = Push {
        collection: "maps".into(),
        intake: inbox.clone(),
        stats: None,
    };
    let server = Server::bind_with("127.0.0.1:0", vec![collection], Some(push))
        .await
        .unwrap()
        .with_limits(Limits::new(TIMEOUT, 8));
    let addr = server.local_addr().unwrap();
    let (stop, task) = spawn_server(server);
    half_sent_head_is_cut(addr).await;
    let path = "/maps/websub/museum";
    let xml = ["Content-Type: application/xml"];
    // Exactly one byte over: the server has read all of it when it answers.
    let huge = vec![b' '; MAX_PAYLOAD_BYTES + 1];
    let (status, body) = exchange(addr, &head("POST", path, &xml, &huge), &huge).await;
    assert_eq!(status, 413, "{body}");
    // A delivery within the cap is taken (unsigned and unknown: dropped, still a 2xx).
    let small = b"<urlset/>";
    let (status, body) = exchange(addr, &head("POST", path, &xml, small), small).await;
    assert!((200..300).contains(&status), "{status} {body}");
    stop.send(()).unwrap();
    tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_cuts_a_half_sent_head_and_refuses_bodies_over_its_cap() {
    let server = HubServer::bind("127.0.0.1:0")
        .await
        .unwrap()
        .with_limits(Limits::new(TIMEOUT, 8));
    let addr = server.local_addr().unwrap();
    let mut config = HubConfig::new(Url::parse(&format!("http://{addr}/")).unwrap());
    config.max_publish_bytes = 4096;
    let objects = Arc::new(object_store::memory::InMemory::new());
    let hub = Arc::new(Hub::open(objects, config).await.unwrap());
    let (tx, rx) = oneshot::channel::<()>();
    let h = hub.clone();
    let task = tokio::spawn(async move {
        server
            .run(h, async move {
                let _ = rx.await;
            })
            .await
            .unwrap();
    });
    half_sent_head_is_cut(addr).await;
    let (status, body) = exchange(addr, &head("GET", "/healthz", &[], b""), b"").await;
    assert_eq!((status, body.trim()), (200, "ok"));
    // A publication one byte over the cap: 413.
    let over = vec![b' '; 4097];
    let links = [
        "Content-Type: application/xml",
        "Link: <http://src.example/change/>; rel=\"self\", <http://hub.example/>; rel=\"hub\"",
    ];
    let (status, body) = exchange(addr, &head("POST", "/", &links, &over), &over).await;
    assert_eq!(status, 413, "{body}");
    // A normal (here malformed) request is still answered.
    let form = b"hub.mode=bogus";
    let ct = ["Content-Type: application/x-www-form-urlencoded"];
    let (status, body) = exchange(addr, &head("POST", "/", &ct, form), form).await;
    assert_eq!(status, 400, "{body}");
    tx.send(()).unwrap();
    tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
}

/// Tries `n` connections to `addr` at once, each sending half a request head and holding
/// it: those the kernel completed (the listener's slots, then its accept backlog; beyond
/// that, connection attempts wait for the backlog, as a flood's do).
async fn flood(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let tries = (0..n).map(|_| async move {
        let mut s = tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(addr))
            .await
            .ok()?
            .ok()?;
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: te")
            .await
            .ok()?;
        Some(s)
    });
    futures::future::join_all(tries)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// GET `path` on a fresh connection, answered within `within`: the status and body, or
/// `None` when no answer came.
async fn get_within(addr: SocketAddr, path: &str, within: Duration) -> Option<(u16, String)> {
    tokio::time::timeout(within, exchange(addr, &head("GET", path, &[], b""), b""))
        .await
        .ok()
}

/// The probe listener of a flooded server: the flood holds every connection slot of the
/// main listener (and waits in its backlog), so its `/healthz` does not answer; the probe
/// listener answers `/healthz` and `/readyz` at once and nothing else.
async fn probes_answer_while_flooded(addr: SocketAddr, probes: SocketAddr) {
    let held = flood(addr, 300).await;
    assert!(held.len() > 4, "only {} connections held", held.len());
    assert!(
        get_within(addr, "/healthz", Duration::from_millis(700))
            .await
            .is_none(),
        "the main listener answered although its slots are held"
    );
    let started = Instant::now();
    let (status, body) = get_within(probes, "/healthz", WAIT).await.unwrap();
    assert_eq!((status, body.trim()), (200, "ok"));
    let (status, body) = get_within(probes, "/readyz", WAIT).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the probes took {:?}",
        started.elapsed()
    );
    let (status, _) = get_within(probes, "/status", WAIT).await.unwrap();
    assert_eq!(status, 404, "the probe listener serves the probes only");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_probes_on_their_own_listener_under_a_flood() {
    use object_store::ObjectStoreExt;
    let objects = Arc::new(object_store::memory::InMemory::new());
    // Published (its Capability List is in the store), so `/readyz` is 200, not 503.
    objects
        .put(
            &object_store::path::Path::from("capabilitylist.xml"),
            "<urlset/>".into(),
        )
        .await
        .unwrap();
    let collection = Collection::new("maps", BASE, objects).unwrap();
    // A header timeout beyond the test: only the probe listener can answer.
    let server = Server::bind("127.0.0.1:0", vec![collection])
        .await
        .unwrap()
        .with_limits(Limits::new(Duration::from_secs(120), 4))
        .bind_probes("127.0.0.1:0")
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    let probes = server.probe_addr().unwrap().unwrap();
    let (stop, task) = spawn_server(server);
    probes_answer_while_flooded(addr, probes).await;
    stop.send(()).unwrap();
    tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
}

/// Starts a hub on 127.0.0.1 within `limits`, publications capped at `max_publish` bytes,
/// with a probe listener when `probes`.
async fn start_hub(
    limits: Limits,
    max_publish: usize,
    probes: bool,
) -> (
    SocketAddr,
    Option<SocketAddr>,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let mut server = HubServer::bind("127.0.0.1:0")
        .await
        .unwrap()
        .with_limits(limits);
    if probes {
        server = server.bind_probes("127.0.0.1:0").await.unwrap();
    }
    let addr = server.local_addr().unwrap();
    let probe_addr = server.probe_addr().unwrap();
    let mut config = HubConfig::new(Url::parse(&format!("http://{addr}/")).unwrap());
    config.max_publish_bytes = max_publish;
    let objects = Arc::new(object_store::memory::InMemory::new());
    let hub = Arc::new(Hub::open(objects, config).await.unwrap());
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        server
            .run(hub, async move {
                let _ = rx.await;
            })
            .await
            .unwrap();
    });
    (addr, probe_addr, tx, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_answers_probes_on_their_own_listener_under_a_flood() {
    let limits = Limits::new(Duration::from_secs(120), 4);
    let (addr, probes, stop, task) = start_hub(limits, 4096, true).await;
    probes_answer_while_flooded(addr, probes.unwrap()).await;
    stop.send(()).unwrap();
    tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_refuses_bodies_beyond_its_budget_with_503() {
    // Room for one 6000-byte publication at a time; a body waits 300 ms for room.
    let limits = Limits::new(TIMEOUT * 30, 8)
        .with_inflight_body_bytes(8192)
        .with_body_wait(Duration::from_millis(300));
    let (addr, _, stop, task) = start_hub(limits, 8192, false).await;
    let links = [
        "Content-Type: application/xml",
        "Link: <http://src.example/change/>; rel=\"self\", <http://hub.example/>; rel=\"hub\"",
    ];
    let body = vec![b' '; 6000];
    // The first publication's head and half its body: the hub takes its 6000 bytes of the
    // budget as it begins to read it, and keeps them while the rest is awaited.
    let mut first = TcpStream::connect(addr).await.unwrap();
    first
        .write_all(head("POST", "/", &links, &body).as_bytes())
        .await
        .unwrap();
    first.write_all(&body[..3000]).await.unwrap();
    // A second one cannot have its bytes meanwhile: 503 with Retry-After, unread.
    let refused = async {
        loop {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(head("POST", "/", &links, &body).as_bytes())
                .await
                .unwrap();
            let _ = s.write_all(&body).await;
            let mut raw = Vec::new();
            let _ = s.read_to_end(&mut raw).await;
            let text = String::from_utf8_lossy(&raw).into_owned();
            // Until the first body is being read, the second may still be admitted.
            if text.starts_with("HTTP/1.1 503") {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let text = tokio::time::timeout(WAIT, refused).await.unwrap();
    assert!(
        text.to_ascii_lowercase().contains("retry-after: 2"),
        "{text}"
    );
    // Once the first is complete and answered, its bytes are back: the next is read.
    first.write_all(&body[3000..]).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(WAIT, first.read_to_end(&mut raw))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert!(!text.starts_with("HTTP/1.1 503"), "{text}");
    let (status, body) = exchange(addr, &head("POST", "/", &links, &body), &body).await;
    assert_ne!(status, 503, "{body}");
    stop.send(()).unwrap();
    tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
}
