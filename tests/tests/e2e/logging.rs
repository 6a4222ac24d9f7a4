//! What `rsagg run` tells an operator while it runs (docs/contract.md, "Logging and
//! progress"): off a terminal, heartbeat events with the progress figures as fields; JSON log
//! lines with `upstream`, `uri` and `error` as fields; and `run --follow` printing a report
//! only after a pass that did something.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::*;
use rsagg_e2e::{Failure, rsagg_bin};
use serde_json::Value;

/// Every stderr line as JSON (a line that is not JSON fails the test: with
/// `--log-format json` nothing else may be written there).
fn json_lines(stderr: &str) -> Vec<Value> {
    stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn with_message<'a>(lines: &'a [Value], message: &str) -> Vec<&'a Value> {
    lines.iter().filter(|v| v["message"] == message).collect()
}

#[test]
fn json_logs_carry_heartbeats_and_upstream_uri_error_fields() -> Result<()> {
    let site = Site::new()?;
    let good = ("/res/good.txt", &b"good bytes"[..]);
    let slow = ("/res/slow.txt", &b"slow bytes"[..]);
    site.standard(&[("resourcelist", "/resourcelist.xml")], &[good, slow])?;
    // bad: listed with the MD5 of other bytes (quarantined after a second fetch).
    site.write("/res/bad.txt", "tampered bytes")?;
    let cap = site.url("/capabilitylist.xml");
    site.write(
        "/resourcelist.xml",
        doc(
            "urlset",
            &format!(r#"capability="resourcelist" at="{T0}""#),
            &[("up", &cap)],
            &[
                url_item(&site.url(good.0), Some(LASTMOD), &md_of(good.1), ""),
                url_item(&site.url(slow.0), Some(LASTMOD), &md_of(slow.1), ""),
                url_item(&site.url("/res/bad.txt"), None, &md_of(b"expected"), ""),
            ],
        ),
    )?;
    // slow: 503 with `Retry-After: 1` once, so the run lasts well over the heartbeat
    // interval below, and logs a retry.
    site.fx.fail_next(slow.0, 1, Failure::unavailable(1));
    let case = Case::new(
        Store::file("logfields")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let mut cmd = Command::new(rsagg_bin()?);
    cmd.arg("run")
        .arg(&case.toml)
        .args([
            "--once",
            "--log-format",
            "json",
            "--progress-interval",
            "100ms",
        ])
        // The default filter: heartbeats and warnings must show without any set-up.
        .env_remove("RSAGG_LOG")
        .env_remove("RSAGG_LOG_FORMAT");
    let out = cmd.output().context("running rsagg")?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let lines = json_lines(&stderr);

    // Heartbeats: the figures as fields, the line as message.
    let beats: Vec<&Value> = lines
        .iter()
        .filter(|v| v["target"] == "rsagg::progress")
        .collect();
    ensure!(!beats.is_empty(), "no heartbeat in\n{stderr}");
    for b in &beats {
        for key in [
            "done",
            "total",
            "total_final",
            "bytes",
            "per_second",
            "bytes_per_second",
        ] {
            ensure!(!b[key].is_null(), "heartbeat without `{key}`: {b}");
        }
        ensure!(b["level"] == "INFO", "{b}");
        ensure!(
            b["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("progress: ")),
            "{b}"
        );
        ensure!(b["done"].as_u64() <= b["total"].as_u64(), "{b}");
    }
    // While the retried resource waits, the list has been read: the total is final.
    ensure!(
        beats
            .iter()
            .any(|b| b["total"] == 3 && b["total_final"] == true && b["done"].as_u64() < Some(3)),
        "no heartbeat with the whole list's total while resources were pending:\n{stderr}"
    );

    // The quarantine line: upstream, uri and error as fields.
    let q = with_message(&lines, "quarantined");
    ensure!(q.len() == 1, "one quarantine line expected:\n{stderr}");
    assert_eq!(q[0]["level"], "WARN", "{}", q[0]);
    assert_eq!(q[0]["upstream"], UP, "{}", q[0]);
    assert_eq!(q[0]["uri"], site.url("/res/bad.txt"), "{}", q[0]);
    let error = q[0]["error"].as_str().unwrap_or_default();
    ensure!(
        error.contains("bytes differ") && error.contains("expected ") && error.contains("got "),
        "{}",
        q[0]
    );

    // The retry line: the upstream it was for, the URI and why.
    let r = with_message(&lines, "retrying request");
    ensure!(!r.is_empty(), "no retry line:\n{stderr}");
    assert_eq!(r[0]["upstream"], UP, "{}", r[0]);
    assert_eq!(r[0]["uri"], site.url(slow.0), "{}", r[0]);
    ensure!(
        r[0]["error"].as_str().is_some_and(|e| e.contains("503")),
        "{}",
        r[0]
    );
    assert_eq!(r[0]["attempt"], 1, "{}", r[0]);

    // Human summary on stdout, sizes readable.
    ensure!(stdout.contains(" read, "), "{stdout}");
    ensure!(!stdout.contains("bytes read"), "{stdout}");
    Ok(())
}

/// Kills the child (by PID) if the test ends before it exits.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn follow_prints_a_report_only_after_a_pass_that_did_something() -> Result<()> {
    let site = Site::new()?;
    let res: &[(&str, &[u8])] = &[("/res/a.txt", b"alpha"), ("/res/b.txt", b"bravo")];
    site.standard(
        &[
            ("resourcelist", "/resourcelist.xml"),
            ("changelist", "/changelist.xml"),
        ],
        res,
    )?;
    site.changes("/changelist.xml", "changelist", T0, &[])?;
    let case = Case::new(
        Store::file("quietfollow")?,
        &site.url("/.well-known/resourcesync"),
        "poll_interval = \"1s\"",
    )?;
    let child = Command::new(rsagg_bin()?)
        .arg("run")
        .arg(&case.toml)
        .args(["--follow", "--json", "--log-format", "json"])
        .env("RSAGG_LOG", "info")
        .env_remove("RSAGG_LOG_FORMAT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut child = KillOnDrop(child);
    let stdout = child.0.stdout.take().context("stdout")?;
    let stderr = child.0.stderr.take().context("stderr")?;
    let printed = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    // Each poll pass begins with discovery; once the third has begun, the first (the
    // baseline) and the second (nothing new upstream) have printed what they print.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut logged = Vec::new();
    let mut passes = 0;
    let t0 = Instant::now();
    while passes < 3 {
        ensure!(
            t0.elapsed() < Duration::from_secs(60),
            "three passes never began:\n{}",
            logged.join("\n")
        );
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
            let v: Value = serde_json::from_str(&l).with_context(|| format!("not JSON: {l}"))?;
            if v["message"] == "discovered" {
                passes += 1;
            }
            logged.push(l);
        }
    }
    let pid = child.0.id().to_string();
    ensure!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()?
            .success()
    );
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.0.try_wait()? {
            break s;
        }
        ensure!(t0.elapsed().as_secs() < 40, "still running after SIGTERM");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(0), "{status:?}");
    let printed = printed.join().expect("stdout reader");
    // The baseline's report, and nothing for the idle pass(es) after it.
    assert_eq!(printed.len(), 1, "{printed:#?}");
    let report: Value = serde_json::from_str(&printed[0])?;
    assert_eq!(report["upstreams"][0]["created"], 2, "{report}");
    Ok(())
}
