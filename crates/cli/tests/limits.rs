//! `--header-timeout` and `--max-connections` reach the listener, through the real binary:
//! with a limit of one connection, a client holding a half-sent head keeps a second client
//! waiting until the header timeout cuts it; then the second is served. Bad values are
//! usage errors (exit 2). The behaviour itself is tested in `rsagg-server`.

mod common;

use common::{start, terminate};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn the_hub_cuts_a_held_connection_and_serves_the_one_waiting() {
    let (mut running, addr) = start(&[
        "hub",
        "--listen",
        "127.0.0.1:0",
        "--store",
        "memory://",
        "--header-timeout",
        "1s",
        "--max-connections",
        "1",
    ]);
    let mut held = TcpStream::connect(&addr).unwrap();
    held.write_all(b"GET /healthz HTTP/1.1\r\nHo").unwrap();
    // The listener's backlog is FIFO: the hub accepts the held connection first, whenever
    // it gets to it, so the waiting one cannot take the slot before it.
    let started = Instant::now();
    let mut waiting = TcpStream::connect(&addr).unwrap();
    waiting
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .unwrap();
    waiting
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut answer = String::new();
    waiting.read_to_string(&mut answer).unwrap();
    let took = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        took >= Duration::from_millis(700),
        "served after {took:?}, while the only slot was held"
    );
    assert!(took < Duration::from_secs(10), "served only after {took:?}");
    // The held connection was closed by then.
    held.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut rest = Vec::new();
    let _ = held.read_to_end(&mut rest);
    assert!(!String::from_utf8_lossy(&rest).contains(" 200 "));
    assert!(terminate(&mut running).success());
}

#[test]
fn bad_limits_are_usage_errors() {
    for (flag, value) in [
        ("--header-timeout", "0s"),
        ("--header-timeout", "soon"),
        ("--max-connections", "0"),
    ] {
        for command in [
            &["hub", "--store", "memory://"][..],
            &["serve", "p.toml"][..],
        ] {
            let out = Command::new(env!("CARGO_BIN_EXE_rsagg"))
                .args(command)
                .args([flag, value])
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(2), "{command:?} {flag} {value}");
            assert!(
                String::from_utf8_lossy(&out.stderr).contains(flag),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_rsagg"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--header-timeout") && help.contains("--max-connections"));
}
