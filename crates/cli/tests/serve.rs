//! `rsagg serve` as a process (contract: one line `listening http://HOST:PORT` on stdout
//! once it accepts connections; read-only serving from the pipelines' stores; graceful
//! shutdown on SIGTERM; exit 2 on config errors).

mod common;

use common::{start, terminate};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn pipeline(dir: &Path, file: &str, name: &str, base_url: &str, store: &Path) -> String {
    let path = dir.join(file);
    let store = url_of(store);
    std::fs::write(
        &path,
        format!(
            "[collection]\nname = \"{name}\"\nbase_url = \"{base_url}\"\n\n[store]\nurl = \"{store}\"\n\n[[upstream]]\nname = \"up\"\nurl = \"https://up.example.org/.well-known/resourcesync\"\n"
        ),
    )
    .unwrap();
    path.to_string_lossy().into_owned()
}

fn url_of(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request on its own connection, read to the end.
fn http(addr: &str, method: &str, path: &str) -> Answer {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: agg.example.org\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete response head");
    let head = String::from_utf8(raw[..split].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    }
}

#[test]
fn serves_published_objects_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir_all(store.join("published")).unwrap();
    // What a publisher left in the store: a document, and its private metadata.
    let list = b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset/>\n";
    std::fs::write(store.join("resourcelist.xml"), list).unwrap();
    std::fs::write(store.join("published/resourcelist.json"), b"{}").unwrap();
    let p = pipeline(
        dir.path(),
        "maps.toml",
        "maps",
        "http://agg.example.org/maps/",
        &store,
    );
    let (mut running, addr) = start(&["serve", &p, "--listen", "127.0.0.1:0"]);

    let robots = http(&addr, "GET", "/robots.txt");
    assert_eq!(robots.status, 200);
    let text = String::from_utf8(robots.body.clone()).unwrap();
    assert!(
        text.lines()
            .any(|l| l == "Sitemap: http://agg.example.org/maps/resourcelist.xml"),
        "{text}"
    );
    // HEAD over a real connection: same length announced, no body sent.
    let head = http(&addr, "HEAD", "/robots.txt");
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header("content-length"),
        Some(robots.body.len().to_string().as_str())
    );
    assert!(head.body.is_empty());

    let doc = http(&addr, "GET", "/maps/resourcelist.xml");
    assert_eq!(doc.status, 200);
    assert_eq!(doc.body, list);
    assert_eq!(doc.header("content-type"), Some("application/xml"));
    assert!(doc.header("etag").is_some());
    let head = http(&addr, "HEAD", "/maps/resourcelist.xml");
    assert_eq!(
        head.header("content-length"),
        Some(list.len().to_string().as_str())
    );
    assert!(head.body.is_empty());
    assert_eq!(
        http(&addr, "GET", "/maps/published/resourcelist.json").status,
        404
    );
    let sd = http(&addr, "GET", "/.well-known/resourcesync");
    assert_eq!(sd.status, 200);
    assert!(
        String::from_utf8_lossy(&sd.body)
            .contains("<loc>http://agg.example.org/maps/capabilitylist.xml</loc>")
    );
    assert_eq!(http(&addr, "POST", "/robots.txt").status, 405);

    // Graceful shutdown on SIGTERM, by the child's PID: exit 0.
    let status = terminate(&mut running);
    assert!(status.success(), "{status}");
}

#[test]
fn config_errors_exit_2_before_listening() {
    let dir = tempfile::tempdir().unwrap();
    let a = pipeline(
        dir.path(),
        "a.toml",
        "a",
        "http://one.example/maps/",
        &dir.path().join("a"),
    );
    let b = pipeline(
        dir.path(),
        "b.toml",
        "b",
        "https://two.example/maps/",
        &dir.path().join("b"),
    );
    let a2 = pipeline(
        dir.path(),
        "a2.toml",
        "a",
        "http://one.example/texts/",
        &dir.path().join("c"),
    );
    let missing = dir.path().join("missing.toml");
    for (args, needle) in [
        (vec![a.as_str(), b.as_str()], "/maps/"),
        (vec![a.as_str(), a2.as_str()], "same name"),
        (vec![missing.to_str().unwrap()], "missing.toml"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_rsagg"))
            .arg("serve")
            .args(&args)
            .args(["--listen", "127.0.0.1:0"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "nothing served: {args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
