//! End-to-end tests of issue 26's hardening (points 1 and 6): credentials in configured URLs
//! are never printed, logged, reported or served; over-long upstream URIs are skipped,
//! counted and never echoed whole; `rsagg check` refuses huge config strings at their key.
//!
//! Peers: SeaweedFS (the store, `s3://` with credentials in its URL) and fixture HTTP
//! upstreams. Run: `cargo test -p rsagg-e2e --test e2e hardening::`.

use crate::common;

use std::process::Command;

use anyhow::{Context, Result};
use common::*;
use rsagg_e2e::{RsaggServer, rsagg_bin};

/// Secrets placed in configured URLs; none may appear in anything rsagg prints or serves.
const UP_USER: &str = "aliceUserQ7";
const UP_PASS: &str = "Upstr3amPassw0rd";
const UP_TOKEN: &str = "Qu3ryT0kenValue";
const BAD_USER: &str = "bobUserQ7";
const BAD_PASS: &str = "B0bPassw0rdQ7";
const BAD_KEY: &str = "ApiK3yValueQ7";
const STORE_USER: &str = "St0reUserQ7";
const STORE_PASS: &str = "St0reS3cretQ7";

const SECRETS: &[&str] = &[
    UP_USER, UP_PASS, UP_TOKEN, BAD_USER, BAD_PASS, BAD_KEY, STORE_USER, STORE_PASS,
];

/// `rsagg ARGS` with `env`: (exit code, whole stdout, whole stderr).
fn rsagg_env(args: &[&str], env: &[(String, String)]) -> Result<(i32, String, String)> {
    let out = Command::new(rsagg_bin()?)
        .args(args)
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .context("running rsagg")?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Fails naming the channel and the secret when `text` holds any of [`SECRETS`].
fn assert_clean(channel: &str, text: &str) {
    for s in SECRETS {
        assert!(
            !text.contains(s),
            "{channel} holds the secret `{s}`:\n{}",
            tail(text, 60)
        );
    }
}

/// The object at `path` of the case's store, as text.
fn object_text(case: &Case, path: &str) -> Result<String> {
    let objects = case.store.objects()?;
    let path = object_store::path::Path::from(path);
    block_on(async move {
        let bytes = object_store::ObjectStoreExt::get(objects.as_ref(), &path)
            .await?
            .bytes()
            .await?;
        Ok(String::from_utf8(bytes.to_vec())?)
    })
}

/// Issue 26, point 1: an upstream `url` with `user:password@` and an `access_token`, a
/// failing upstream with credentials, and an `s3://USER:PASS@bucket/…` store. The
/// credentials of the good upstream are still sent (basic auth); none of them appears in the
/// text or JSON logs, `run --json`, the breaker's line on a 403, `rsagg check`,
/// `stats/last-run.json`, `stats/history.json`, or `rsagg serve`'s `/status` and `/metrics`.
#[test]
fn credentials_in_upstream_and_store_urls_are_never_printed() -> Result<()> {
    let site = Site::new()?;
    site.standard(
        &[("resourcelist", "/resourcelist.xml")],
        &[("/a.txt", b"alpha"), ("/b.txt", b"beta")],
    )?;
    // Nothing there: discovery fails, and the error names the URL.
    let empty = Site::new()?;
    let good_url = format!(
        "http://{UP_USER}:{UP_PASS}@{}/?access_token={UP_TOKEN}",
        site.fx.addr()
    );
    let bad_url = format!(
        "http://{BAD_USER}:{BAD_PASS}@{}/none/?api_key={BAD_KEY}",
        empty.fx.addr()
    );
    let mut store = Store::s3("secrets")?;
    store.url = store
        .url
        .replacen("s3://", &format!("s3://{STORE_USER}:{STORE_PASS}@"), 1);
    let port = RsaggServer::pick_port()?;
    let case = Case::published_at(
        store,
        &[
            upstream("good", &good_url, ""),
            upstream("bad", &bad_url, ""),
        ],
        &format!("http://127.0.0.1:{port}/secrets/"),
        "",
    )?;
    let toml = case.toml.to_str().context("pipeline path")?;
    let env = case.store.env()?;
    let with = |extra: &[(&str, &str)]| -> Vec<(String, String)> {
        let mut e = env.clone();
        e.push(("RSAGG_LOG".into(), "info".into()));
        e.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        e
    };

    // Text logs, with the report on stdout.
    let (code, stdout, stderr) = rsagg_env(&["run", toml, "--once", "--json"], &with(&[]))?;
    assert_eq!(code, 1, "the bad upstream fails the run\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).context("run --json")?;
    let ups = report["upstreams"].as_array().context("upstreams")?;
    let good = ups.iter().find(|u| u["name"] == "good").context("good")?;
    let bad = ups.iter().find(|u| u["name"] == "bad").context("bad")?;
    assert_eq!(good["created"], 2, "{report}");
    assert_eq!(bad["verdict"], "failed", "{report}");
    // The URLs are quoted — redacted: the test sees the places that used to leak.
    let good_warnings = good["warnings"].to_string();
    assert!(
        good_warnings.contains("http://***@") && good_warnings.contains("access_token=***"),
        "{report}"
    );
    assert!(
        bad["error"].as_str().unwrap_or("").contains("http://***@"),
        "{report}"
    );
    assert!(stderr.contains("store=s3://***@"), "{stderr}");
    assert_clean("text log", &stderr);
    assert_clean("run --json", &stdout);
    // Only the display is redacted: the credentials were sent to the good upstream.
    let auth = site
        .fx
        .requests()
        .into_iter()
        .find(|r| r.path == "/.well-known/resourcesync")
        .and_then(|r| r.header("authorization").map(str::to_owned))
        .context("the upstream's credentials were not sent")?;
    assert!(auth.starts_with("Basic "), "{auth}");

    // JSON logs, text report.
    let (code, stdout, stderr) =
        rsagg_env(&["run", toml, "--once", "--log-format", "json"], &with(&[]))?;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("s3://***@"), "{stderr}");
    assert_clean("json log", &stderr);
    assert_clean("run report", &stdout);

    // A store that refuses the credentials: the breaker's one line names the store.
    let (code, stdout, stderr) = rsagg_env(
        &["run", toml, "--once"],
        &with(&[("AWS_SECRET_ACCESS_KEY", "wrong-secret")]),
    )?;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("rsagg run:") && l.contains("s3://***@")),
        "{stderr}"
    );
    assert_clean("breaker line", &stderr);
    assert_clean("breaker run stdout", &stdout);

    let (code, stdout, stderr) = rsagg_env(&["check", toml], &[])?;
    assert_eq!(code, 0, "{stderr}");
    assert_clean("check", &format!("{stdout}{stderr}"));

    let last_run = object_text(&case, "stats/last-run.json")?;
    assert!(last_run.contains("http://***@"), "{last_run}");
    assert_clean("stats/last-run.json", &last_run);
    let history = object_text(&case, "stats/history.json")?;
    assert_clean("stats/history.json", &history);

    let server = RsaggServer::start(port, &[&case.toml], &env)?;
    for page in ["/status", "/status/secrets", "/metrics"] {
        let (status, body) = http_get(&format!("{}{page}", server.origin()))?;
        assert_eq!(status, 200, "{page}");
        let body = String::from_utf8_lossy(&body);
        assert_clean(page, &body);
        if page == "/status/secrets" {
            assert!(body.contains("***@"), "{body}");
        }
    }
    assert_clean("serve log", &server.log_tail(200));
    Ok(())
}

/// Issue 26, point 6: a Resource List entry with a 1 MiB `<loc>` is skipped and counted;
/// the run succeeds with the other entries, and stderr, stdout and `stats/last-run.json`
/// stay small (before: the whole `<loc>` was echoed into each, twice into stderr).
#[test]
fn an_over_long_loc_is_skipped_counted_and_never_echoed() -> Result<()> {
    let site = Site::new()?;
    site.standard(
        &[("resourcelist", "/resourcelist.xml")],
        &[("/a.txt", b"alpha"), ("/b.txt", b"beta")],
    )?;
    let huge = format!("{}{}", site.url("/x/"), "a".repeat(1 << 20));
    let items = vec![
        url_item(&site.url("/a.txt"), Some(LASTMOD), &md_of(b"alpha"), ""),
        url_item(&huge, Some(LASTMOD), &md_of(b"never"), ""),
        url_item(&site.url("/b.txt"), Some(LASTMOD), &md_of(b"beta"), ""),
    ];
    site.write(
        "/resourcelist.xml",
        doc(
            "urlset",
            &format!(r#"capability="resourcelist" at="{T0}""#),
            &[("up", &site.url("/capabilitylist.xml"))],
            &items,
        ),
    )?;
    let case = Case::new(
        Store::file("long-loc")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let toml = case.toml.to_str().context("pipeline path")?;
    for format in ["text", "json"] {
        let (code, stdout, stderr) = rsagg_env(
            &["run", toml, "--once", "--json", "--log-format", format],
            &[("RSAGG_LOG".into(), "info".into())],
        )?;
        assert_eq!(code, 0, "{}", tail(&stderr, 20));
        let report: serde_json::Value = serde_json::from_str(stdout.trim())?;
        let up = &report["upstreams"][0];
        assert_eq!(up["verdict"], "ok", "{up}");
        assert_eq!(up["skipped"], 1, "{up}");
        assert!(up["warnings"].to_string().contains("max_uri_bytes"), "{up}");
        assert!(stdout.len() < 16 * 1024, "stdout: {} bytes", stdout.len());
        assert!(stderr.len() < 64 * 1024, "stderr: {} bytes", stderr.len());
        // Logged with an excerpt that says how much was left out.
        assert!(stderr.contains("more bytes]"), "{}", tail(&stderr, 20));
    }
    // The two good entries were harvested on the first run; the skipped one never fetched.
    let last_run = object_text(&case, "stats/last-run.json")?;
    assert!(
        last_run.len() < 16 * 1024,
        "last-run.json: {} bytes",
        last_run.len()
    );
    assert!(site.fx.hits("/a.txt") >= 1 && site.fx.hits("/b.txt") >= 1);
    assert_eq!(
        site.fx
            .requests()
            .iter()
            .filter(|r| r.path.starts_with("/x/"))
            .count(),
        0
    );
    Ok(())
}

/// Issue 26, point 6: `rsagg check` refuses a 10 MB `base_url` and a 10 MB `user_agent`
/// with one short line each naming the key and the limit (before: both passed, then a
/// publish wrote 2 GiB, or every request failed).
#[test]
fn check_refuses_huge_config_strings_at_their_key() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let big = "a".repeat(10 << 20);
    for (name, text, key, limit) in [
        (
            "base.toml",
            format!(
                "[collection]\nname = \"c\"\nbase_url = \"https://agg.example.org/{big}/\"\n\
                 [store]\nurl = \"file:///tmp/rsagg-never\"\n\
                 [[upstream]]\nname = \"u\"\nurl = \"https://up.example.org/\"\n"
            ),
            "collection.base_url",
            "1024",
        ),
        (
            "ua.toml",
            format!(
                "[collection]\nname = \"c\"\nbase_url = \"https://agg.example.org/c/\"\n\
                 [store]\nurl = \"file:///tmp/rsagg-never\"\n\
                 [[upstream]]\nname = \"u\"\nurl = \"https://up.example.org/\"\n\
                 [fetch]\nuser_agent = \"{big}\"\n"
            ),
            "fetch.user_agent",
            "512",
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text)?;
        let (code, stdout, stderr) = rsagg(&["check", path.to_str().context("path")?])?;
        assert_eq!(code, 2, "{name}: {stdout}{}", tail(&stderr, 5));
        assert!(
            stderr.contains(&format!("{key}: "))
                && stderr.contains(&format!("at most {limit} bytes")),
            "{name}: {}",
            tail(&stderr, 5)
        );
        assert!(
            stderr.len() < 1024,
            "{name}: {} bytes on stderr",
            stderr.len()
        );
    }
    Ok(())
}
