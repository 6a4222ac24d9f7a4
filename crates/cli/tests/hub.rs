//! `rsagg hub` as a process (contract: one line `listening http://HOST:PORT` on stdout once
//! it accepts connections; all requests by POST at `/`; 1.0.1 publish → 200; graceful
//! shutdown on SIGTERM; usage errors exit 2).

mod common;

use common::{start, terminate};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

fn http(addr: &str, method: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let path = headers
        .iter()
        .find(|(k, _)| *k == "path")
        .map_or("/", |(_, v)| *v);
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers.iter().filter(|(k, _)| *k != "path") {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap();
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

const PAYLOAD: &str = r#"<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/"><rs:md capability="change-notification" from="2013-01-03T00:00:00Z" until="2013-01-03T00:10:00Z"/><url><loc>http://src.test/r</loc><rs:md change="created"/></url></urlset>"#;

#[test]
fn hub_listens_answers_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}/", dir.path().display());
    let (mut running, addr) = start(&[
        "hub",
        "--listen",
        "127.0.0.1:0",
        "--store",
        &store,
        "--lease-min",
        "1",
        "--lease-max",
        "60",
        "--allow-publisher",
        "http://src.test/",
        // The callback below is on loopback.
        "--allow-private-callbacks",
    ]);
    assert_eq!(http(&addr, "GET", &[("path", "/healthz")], b"").0, 200);
    assert_eq!(http(&addr, "GET", &[("path", "/readyz")], b"").0, 200);
    assert_eq!(http(&addr, "GET", &[], b"").0, 405);

    // The default public URL is the bound address: a 1.0.1 publish naming it is accepted.
    let link = format!("<http://src.test/change/>; rel=\"self\", <http://{addr}/>; rel=\"hub\"");
    let xml = ("Content-Type", "application/xml");
    let (s, m) = http(&addr, "POST", &[xml, ("Link", &link)], PAYLOAD.as_bytes());
    assert_eq!(s, 200, "{m}");
    let (s, _) = http(
        &addr,
        "POST",
        &[xml, ("Link", "<http://src.test/change/>; rel=\"self\"")],
        PAYLOAD.as_bytes(),
    );
    assert_eq!(s, 400, "rel=\"hub\" missing");
    let other = format!("<http://other.test/change/>; rel=\"self\", <http://{addr}/>; rel=\"hub\"");
    assert_eq!(
        http(&addr, "POST", &[xml, ("Link", &other)], PAYLOAD.as_bytes()).0,
        403
    );
    let form = ("Content-Type", "application/x-www-form-urlencoded");
    let sub = "hub.mode=subscribe&hub.topic=http%3A%2F%2Fsrc.test%2Fchange%2F&hub.callback=http%3A%2F%2F127.0.0.1%3A9%2Fcb";
    assert_eq!(http(&addr, "POST", &[form], sub.as_bytes()).0, 202);
    assert_eq!(
        http(
            &addr,
            "POST",
            &[form],
            b"hub.mode=publish&hub.url=http%3A%2F%2Fsrc.test%2Fchange%2F"
        )
        .0,
        202
    );

    let status = terminate(&mut running);
    assert!(status.success(), "{status}");
}

/// Without `--allow-private-callbacks` the address guard is on: a loopback callback (or a
/// `localhost` one, or a topic to fetch there) is refused with 403 and the reason, and
/// nothing reaches the listener behind it.
#[test]
fn the_hub_refuses_private_callbacks_by_default() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let (mut running, addr) = start(&["hub", "--listen", "127.0.0.1:0", "--store", "memory://"]);
    let form = ("Content-Type", "application/x-www-form-urlencoded");
    for target in [
        format!("http%3A%2F%2F127.0.0.1%3A{port}%2Fcb"),
        format!("http%3A%2F%2Flocalhost%3A{port}%2Fcb"),
        "http%3A%2F%2F169.254.169.254%2Fcb".to_owned(),
    ] {
        let sub = format!(
            "hub.mode=subscribe&hub.topic=http%3A%2F%2Fsrc.test%2Fchange%2F&hub.callback={target}"
        );
        let (s, m) = http(&addr, "POST", &[form], sub.as_bytes());
        assert_eq!(s, 403, "{target}: {m}");
        assert!(m.contains("--allow-private-callbacks"), "{m}");
        let publish = format!("hub.mode=publish&hub.url={target}");
        assert_eq!(http(&addr, "POST", &[form], publish.as_bytes()).0, 403);
    }
    // The refusals are answered before anything is sent; a short window then shows that
    // nothing is sent after the answer either (an absence has no event to wait for).
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        listener.accept().is_err(),
        "nothing connected to the loopback listener"
    );
    let status = terminate(&mut running);
    assert!(status.success(), "{status}");
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &[
            "--store",
            "memory://",
            "--lease-min",
            "10",
            "--lease-max",
            "5",
        ][..],
        &["--store", "ftp://x/y"][..],
        &["--store", "memory://", "--public-url", "not a url"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_rsagg"))
            .arg("hub")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "no listening line on a usage error");
    }
}
