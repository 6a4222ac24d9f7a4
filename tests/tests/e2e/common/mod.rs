//! Helpers of the harvest end-to-end tests: fixture Sources built from entries, pipeline
//! files, running `rsagg run`, and reading back what it stored (state records, change log,
//! quarantine, blobs).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::ensure;
use anyhow::{Context, Result};
use futures::StreamExt;
use md5::{Digest, Md5};
use object_store::ObjectStore;
use rsagg_e2e::{Delivery, FixtureServer, Seaweed, SignatureCheck, rsagg_bin, unique_prefix};
use rsagg_model::{Capability, Change, Mode, UrlEntry, W3cDateTime};
use rsagg_sitemap::{ReadOptions, SyncReader, read_document};
use rsagg_store::{
    Blobs, Checkpoint, LogEntry, QuarantineRecord, ResourceRecord, ResourceStatus, State,
    open_object_store,
};
use rsagg_websub::signature::Algorithm;
use serde_json::Value;

pub const NS: &str = r#"xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/""#;

/// The upstream name every single-upstream pipeline of these tests uses.
pub const UP: &str = "up";

pub fn md5_hex(data: &[u8]) -> String {
    Md5::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub fn sha256_hex(data: &[u8]) -> String {
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

// ---------------------------------------------------------------------------------------
// XML documents

/// `hash="md5:…" length="…"` of a body.
pub fn md_of(body: &[u8]) -> String {
    format!(r#"hash="md5:{}" length="{}""#, md5_hex(body), body.len())
}

/// A whole document: `root` is `urlset` or `sitemapindex`, `md` the root `<rs:md>`'s
/// attributes, `links` (rel, href) the root's `<rs:ln>`s, `items` the `<url>`/`<sitemap>`s.
pub fn doc(root: &str, md: &str, links: &[(&str, &str)], items: &[String]) -> String {
    let mut s = format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<{root} {NS}>\n");
    for (rel, href) in links {
        s.push_str(&format!("  <rs:ln rel=\"{rel}\" href=\"{href}\"/>\n"));
    }
    s.push_str(&format!("  <rs:md {md}/>\n"));
    for i in items {
        s.push_str(i);
    }
    s.push_str(&format!("</{root}>\n"));
    s
}

/// One `<url>`: `md` the `<rs:md>` attributes (none when empty), `links` raw `<rs:ln>`s.
pub fn url_item(loc: &str, lastmod: Option<&str>, md: &str, links: &str) -> String {
    let mut s = format!("  <url>\n    <loc>{loc}</loc>\n");
    if let Some(l) = lastmod {
        s.push_str(&format!("    <lastmod>{l}</lastmod>\n"));
    }
    if !md.is_empty() {
        s.push_str(&format!("    <rs:md {md}/>\n"));
    }
    s.push_str(links);
    s.push_str("  </url>\n");
    s
}

/// One `<sitemap>` of an index.
pub fn sitemap_item(loc: &str, md: &str) -> String {
    if md.is_empty() {
        format!("  <sitemap><loc>{loc}</loc></sitemap>\n")
    } else {
        format!("  <sitemap><loc>{loc}</loc><rs:md {md}/></sitemap>\n")
    }
}

/// A Change List entry; `body` gives hash and length (none for deletions).
pub fn change_item(loc: &str, change: &str, datetime: &str, body: Option<&[u8]>) -> String {
    let mut md = format!(r#"change="{change}" datetime="{datetime}""#);
    if let Some(b) = body {
        md.push(' ');
        md.push_str(&md_of(b));
    }
    url_item(loc, None, &md, "")
}

// ---------------------------------------------------------------------------------------
// Fixture Sources

/// Lastmod of Resource List entries (well before every `at`).
pub const LASTMOD: &str = "2025-12-01T00:00:00Z";
/// `at` of the baseline Resource Lists.
pub const T0: &str = "2026-01-01T00:00:00Z";

/// A static Source on a [`FixtureServer`].
pub struct Site {
    pub fx: FixtureServer,
}

impl Site {
    pub fn new() -> Result<Site> {
        Ok(Site {
            fx: FixtureServer::start()?,
        })
    }

    pub fn url(&self, path: &str) -> String {
        self.fx.url(path)
    }

    pub fn write(&self, path: &str, body: impl AsRef<[u8]>) -> Result<()> {
        self.fx.write(path, body)
    }

    /// Writes each resource's body at its path.
    pub fn resources(&self, res: &[(&str, &[u8])]) -> Result<()> {
        for (p, b) in res {
            self.write(p, b)?;
        }
        Ok(())
    }

    /// `/.well-known/resourcesync` (or `path`) listing Capability Lists (paths).
    pub fn source_description(&self, path: &str, caplists: &[&str]) -> Result<()> {
        let items: Vec<String> = caplists
            .iter()
            .map(|c| url_item(&self.url(c), None, r#"capability="capabilitylist""#, ""))
            .collect();
        self.write(
            path,
            doc("urlset", r#"capability="description""#, &[], &items),
        )
    }

    /// A Capability List at `path` (`up` to `up`, a path) advertising (capability, path)s.
    pub fn capability_list(
        &self,
        path: &str,
        up: Option<&str>,
        caps: &[(&str, &str)],
    ) -> Result<()> {
        let items: Vec<String> = caps
            .iter()
            .map(|(c, p)| url_item(&self.url(p), None, &format!(r#"capability="{c}""#), ""))
            .collect();
        let up_url = up.map(|u| self.url(u));
        let links: Vec<(&str, &str)> = up_url.iter().map(|u| ("up", u.as_str())).collect();
        self.write(
            path,
            doc("urlset", r#"capability="capabilitylist""#, &links, &items),
        )
    }

    /// A Resource List at `path` (`up` → `caplist`) listing resources (path, body) with
    /// lastmod, md5 and length.
    pub fn resource_list(
        &self,
        path: &str,
        caplist: &str,
        at: &str,
        res: &[(&str, &[u8])],
    ) -> Result<()> {
        self.write(path, self.resource_list_doc(caplist, at, res))
    }

    pub fn resource_list_doc(&self, caplist: &str, at: &str, res: &[(&str, &[u8])]) -> String {
        let items: Vec<String> = res
            .iter()
            .map(|(p, b)| url_item(&self.url(p), Some(LASTMOD), &md_of(b), ""))
            .collect();
        doc(
            "urlset",
            &format!(r#"capability="resourcelist" at="{at}""#),
            &[("up", &self.url(caplist))],
            &items,
        )
    }

    /// Writes a Change List or Change Dump (`capability`) at `path` with `from` and an `up`
    /// link to `/capabilitylist.xml`.
    pub fn changes(
        &self,
        path: &str,
        capability: &str,
        from: &str,
        items: &[String],
    ) -> Result<()> {
        self.write(
            path,
            doc(
                "urlset",
                &format!(r#"capability="{capability}" from="{from}""#),
                &[("up", &self.url("/capabilitylist.xml"))],
                items,
            ),
        )
    }

    /// The usual small Source: Source Description → `/capabilitylist.xml` → the
    /// documents `caps` names, plus the resources and a Resource List at
    /// `/resourcelist.xml` (when `caps` advertises it).
    pub fn standard(&self, caps: &[(&str, &str)], res: &[(&str, &[u8])]) -> Result<()> {
        self.resources(res)?;
        self.source_description("/.well-known/resourcesync", &["/capabilitylist.xml"])?;
        self.capability_list(
            "/capabilitylist.xml",
            Some("/.well-known/resourcesync"),
            caps,
        )?;
        if caps.iter().any(|(_, p)| *p == "/resourcelist.xml") {
            self.resource_list("/resourcelist.xml", "/capabilitylist.xml", T0, res)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Stores

/// Where a test's copies and state go: a prefix of the shared SeaweedFS, or a temporary
/// directory (`file://`).
pub struct Store {
    pub url: String,
    prefix: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl Store {
    pub fn s3(name: &str) -> Result<Store> {
        let sw = Seaweed::shared()?;
        let prefix = unique_prefix(name);
        Ok(Store {
            url: sw.store_url(&prefix),
            prefix: Some(prefix),
            _dir: None,
        })
    }

    pub fn file(name: &str) -> Result<Store> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("rsagg-e2e-{name}-"))
            .tempdir()?;
        let url = url::Url::from_directory_path(dir.path().join("store"))
            .map_err(|()| anyhow::anyhow!("not an absolute path"))?;
        Ok(Store {
            url: url.to_string().trim_end_matches('/').to_string(),
            prefix: None,
            _dir: Some(dir),
        })
    }

    /// A store at `url` the test reaches by itself (its own server, a refusing one); the
    /// run's environment is given to [`Case::run_env`].
    pub fn at(url: &str) -> Store {
        Store {
            url: url.to_owned(),
            prefix: None,
            _dir: None,
        }
    }

    /// A fresh client (one per runtime).
    pub fn objects(&self) -> Result<Arc<dyn ObjectStore>> {
        match &self.prefix {
            Some(p) => Ok(Seaweed::shared()?.object_store(p)),
            None => Ok(open_object_store(&self.url)?.objects),
        }
    }

    pub fn env(&self) -> Result<Vec<(String, String)>> {
        match &self.prefix {
            Some(_) => Ok(Seaweed::shared()?.env()),
            None => Ok(Vec::new()),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Pipelines and runs

/// One `[[upstream]]`.
pub struct Upstream {
    pub name: String,
    pub url: String,
    /// Extra TOML lines (e.g. `baseline = "dump"`).
    pub extra: String,
}

pub fn upstream(name: &str, url: &str, extra: &str) -> Upstream {
    Upstream {
        name: name.into(),
        url: url.into(),
        extra: extra.into(),
    }
}

/// A pipeline file in a temporary directory, over a store.
pub struct Case {
    pub store: Store,
    pub toml: PathBuf,
    /// `collection.base_url`.
    pub base_url: String,
    /// TOML appended after the upstreams (e.g. a `[publish]` section).
    pub tail: String,
    _dir: tempfile::TempDir,
}

/// What one `rsagg run --once --json` did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub report: Option<Value>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The report of upstream `name`.
    pub fn up_named(&self, name: &str) -> &Value {
        let r = self
            .report
            .as_ref()
            .unwrap_or_else(|| panic!("no JSON report; {self:?}"));
        r["upstreams"]
            .as_array()
            .and_then(|a| a.iter().find(|u| u["name"] == name))
            .unwrap_or_else(|| panic!("no upstream {name} in the report; {self:?}"))
    }

    /// The report of upstream [`UP`].
    pub fn up(&self) -> &Value {
        self.up_named(UP)
    }

    /// A counter of upstream [`UP`].
    pub fn n(&self, key: &str) -> u64 {
        self.up()[key]
            .as_u64()
            .unwrap_or_else(|| panic!("no counter {key}; {self:?}"))
    }

    pub fn verdict(&self) -> &str {
        self.up()["verdict"].as_str().unwrap_or("")
    }

    pub fn warnings(&self) -> Vec<String> {
        strings(&self.up()["warnings"])
    }

    pub fn resyncs(&self) -> Vec<String> {
        strings(&self.up()["resyncs"])
    }

    /// Panics with everything known unless the run exited 0 with verdict ok.
    pub fn assert_ok(&self) -> &Self {
        assert_eq!(self.code, 0, "exit code; {self:#?}");
        assert_eq!(self.verdict(), "ok", "{self:#?}");
        self
    }

    /// (created, updated, deleted) of upstream [`UP`].
    pub fn cud(&self) -> (u64, u64, u64) {
        (self.n("created"), self.n("updated"), self.n("deleted"))
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

impl Case {
    /// A pipeline with one upstream named [`UP`] at `url` (`allow_private = true`).
    pub fn new(store: Store, url: &str, extra: &str) -> Result<Case> {
        Case::with_upstreams(store, &[upstream(UP, url, extra)])
    }

    pub fn with_upstreams(store: Store, ups: &[Upstream]) -> Result<Case> {
        Case::published_at(store, ups, "http://agg.example.org/e2e/", "")
    }

    /// A pipeline with one upstream [`UP`] at `site`'s Source Description (`extra` lines
    /// added to it), in a `file://` store, published at `http://127.0.0.1:PORT/{path}/` on a
    /// free port (for a later [`rsagg_e2e::RsaggServer::start`]), with `tail` appended.
    /// Returns the case and the port.
    pub fn on_loopback(path: &str, site: &Site, extra: &str, tail: &str) -> Result<(Case, u16)> {
        let port = rsagg_e2e::RsaggServer::pick_port()?;
        let case = Case::published_at(
            Store::file(path)?,
            &[upstream(UP, &site.url("/.well-known/resourcesync"), extra)],
            &format!("http://127.0.0.1:{port}/{path}/"),
            tail,
        )?;
        Ok((case, port))
    }

    /// A pipeline whose collection is published at `base_url`, with `tail` appended.
    pub fn published_at(
        store: Store,
        ups: &[Upstream],
        base_url: &str,
        tail: &str,
    ) -> Result<Case> {
        let dir = tempfile::Builder::new()
            .prefix("rsagg-e2e-pipeline-")
            .tempdir()?;
        let toml = dir.path().join("pipeline.toml");
        let case = Case {
            store,
            toml,
            base_url: base_url.to_owned(),
            tail: tail.to_owned(),
            _dir: dir,
        };
        case.write_pipeline(ups)?;
        Ok(case)
    }

    /// (Re)writes the pipeline file with these upstreams.
    pub fn write_pipeline(&self, ups: &[Upstream]) -> Result<()> {
        // The collection is named after the last segment of its base URL (unique among
        // the pipelines a test serves together).
        let name = self
            .base_url
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or("e2e");
        let mut t = format!(
            "[collection]\nname = \"{name}\"\nbase_url = \"{}\"\n\n\
             [store]\nurl = \"{}\"\n\n[fetch]\nretries = 2\nconnect_timeout = \"5s\"\nread_timeout = \"30s\"\n",
            self.base_url, self.store.url
        );
        for u in ups {
            // Fixtures are on loopback: allowed unless the upstream's extra lines say otherwise.
            let allow = if u.extra.contains("allow_private") {
                ""
            } else {
                "allow_private = true\n"
            };
            t.push_str(&format!(
                "\n[[upstream]]\nname = \"{}\"\nurl = \"{}\"\n{allow}{}\n",
                u.name, u.url, u.extra
            ));
        }
        t.push('\n');
        t.push_str(&self.tail);
        std::fs::write(&self.toml, t)?;
        Ok(())
    }

    /// `rsagg run PIPELINE --once --json` plus `args`.
    pub fn run_with(&self, args: &[&str]) -> Result<Run> {
        let mut cmd = Command::new(rsagg_bin()?);
        cmd.arg("run")
            .arg(&self.toml)
            .args(["--once", "--json"])
            .args(args)
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_PROFILE")
            .env("RUST_LOG", "info")
            .envs(self.store.env()?);
        let out = cmd.output().context("running rsagg")?;
        Ok(parse_run(out))
    }

    pub fn run(&self) -> Result<Run> {
        self.run_with(&[])
    }

    /// `rsagg run PIPELINE --once --json` with `args` and the extra environment `env`.
    pub fn run_env(&self, args: &[&str], env: &[(impl AsRef<str>, String)]) -> Result<Run> {
        let out = self.command(args, env)?.output().context("running rsagg")?;
        Ok(parse_run(out))
    }

    fn command(&self, args: &[&str], env: &[(impl AsRef<str>, String)]) -> Result<Command> {
        let mut cmd = Command::new(rsagg_bin()?);
        cmd.arg("run")
            .arg(&self.toml)
            .args(["--once", "--json"])
            .args(args)
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_PROFILE")
            .env("RUST_LOG", "info")
            .envs(self.store.env()?)
            .envs(env.iter().map(|(k, v)| (k.as_ref().to_owned(), v.clone())));
        Ok(cmd)
    }

    /// [`Case::run_env`] in the background: its output goes to files, read by
    /// [`Running::finish`].
    pub fn spawn_run(&self, env: &[(impl AsRef<str>, String)]) -> Result<Running> {
        let dir = tempfile::Builder::new()
            .prefix("rsagg-e2e-run-")
            .tempdir()?;
        let out = dir.path().join("stdout");
        let err = dir.path().join("stderr");
        let child = self
            .command(&[], env)?
            .stdout(std::fs::File::create(&out)?)
            .stderr(std::fs::File::create(&err)?)
            .spawn()
            .context("spawning rsagg")?;
        Ok(Running {
            child: KillOnDrop(child),
            out,
            err,
            _dir: dir,
        })
    }

    /// Everything the state holds about upstream `up`, read as `rsagg audit` reads it
    /// (read-only: the manifest and the WAL the last writer left; meant for while no rsagg
    /// process runs on it, so no compaction deletes tables under the reader).
    pub fn snapshot(&self, up: &str) -> Result<Snapshot> {
        let objects = self.store.objects()?;
        let up = up.to_owned();
        block_on(async move { Snapshot::read(objects, &up).await })
    }

    /// The stats object the last run wrote (`stats/last-run.json`).
    pub fn stats(&self) -> Result<Value> {
        let objects = self.store.objects()?;
        block_on(async move {
            // `rsagg_pipeline::STATS_OBJECT`; these tests drive the binary and do not link
            // the pipeline crate.
            let path = object_store::path::Path::from("stats/last-run.json");
            let bytes = object_store::ObjectStoreExt::get(objects.as_ref(), &path)
                .await?
                .bytes()
                .await?;
            Ok(serde_json::from_slice(&bytes)?)
        })
    }

    /// The bytes of the blob with this SHA-256.
    pub fn blob(&self, sha256: &str) -> Result<Vec<u8>> {
        let objects = self.store.objects()?;
        let sha = sha256.to_owned();
        block_on(async move {
            let blobs = Blobs::new(objects);
            let mut s = blobs.get(&sha).await?;
            let mut v = Vec::new();
            while let Some(c) = s.next().await {
                v.extend_from_slice(&c?);
            }
            Ok(v)
        })
    }

    /// Whether the blob with this SHA-256 exists.
    pub fn blob_exists(&self, sha256: &str) -> Result<bool> {
        let objects = self.store.objects()?;
        let sha = sha256.to_owned();
        block_on(async move { Ok(Blobs::new(objects).exists(&sha).await?) })
    }

    /// Asserts that the state holds exactly these present resources (URI → bytes) among the
    /// present records of `up` and that each blob holds those bytes; `deleted` URIs must be
    /// records with status deleted whose last copy is still stored.
    pub fn assert_state(
        &self,
        up: &str,
        present: &[(String, Vec<u8>)],
        deleted: &[String],
    ) -> Result<Snapshot> {
        let snap = self.snapshot(up)?;
        let mut want: Vec<&str> = present.iter().map(|(u, _)| u.as_str()).collect();
        want.sort();
        let have: Vec<&str> = snap
            .records
            .values()
            .filter(|r| r.status == ResourceStatus::Present)
            .map(|r| r.uri.as_str())
            .collect();
        assert_eq!(have, want, "present records of {up}");
        for (uri, body) in present {
            let r = &snap.records[uri];
            let copy = r.copy.as_ref().expect("a present record has a copy");
            assert_eq!(copy.md5, md5_hex(body), "md5 of {uri}");
            assert_eq!(copy.length, body.len() as u64, "length of {uri}");
            assert_eq!(copy.sha256, sha256_hex(body), "sha256 of {uri}");
            assert_eq!(&self.blob(&copy.sha256)?, body, "blob bytes of {uri}");
        }
        for uri in deleted {
            let r = snap
                .records
                .get(uri)
                .unwrap_or_else(|| panic!("no record of deleted {uri}"));
            assert_eq!(r.status, ResourceStatus::Deleted, "status of {uri}");
            let copy = r
                .copy
                .as_ref()
                .expect("a deleted record keeps its last copy");
            assert!(
                self.blob_exists(&copy.sha256)?,
                "blob of deleted {uri} kept"
            );
        }
        Ok(snap)
    }
}

fn parse_run(out: std::process::Output) -> Run {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .and_then(|l| serde_json::from_str(l).ok());
    Run {
        code: out.status.code().unwrap_or(-1),
        report,
        stdout,
        stderr: tail(&stderr, 40),
    }
}

pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs `rsagg` with arbitrary arguments (exit code, stdout, stderr).
pub fn rsagg(args: &[&str]) -> Result<(i32, String, String)> {
    let out = Command::new(rsagg_bin()?).args(args).output()?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Runs a future on a runtime of its own (the tests are synchronous; object_store clients
/// are made per runtime).
pub fn block_on<T>(f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?
        .block_on(f)
}

/// `f`, failing with `what` if it has not ended within 120 s (a state of these tests opens,
/// reads and closes in well under a second).
async fn step<T>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, rsagg_store::Error>>,
) -> Result<T> {
    match tokio::time::timeout(Duration::from_secs(120), f).await {
        Ok(r) => Ok(r?),
        Err(_) => anyhow::bail!("{what} did not end within 120 s"),
    }
}

/// What the state holds for one upstream.
#[derive(Debug)]
pub struct Snapshot {
    /// URI → record.
    pub records: BTreeMap<String, ResourceRecord>,
    /// The whole change log (every upstream), in order.
    pub log: Vec<LogEntry>,
    /// Quarantine records of every upstream.
    pub quarantine: Vec<QuarantineRecord>,
}

impl Snapshot {
    pub async fn read(objects: Arc<dyn ObjectStore>, up: &str) -> Result<Snapshot> {
        // Each step is bounded and named: a step that never ends fails the test saying
        // which, instead of hanging the suite.
        // Read-only: an inspection must not become the state's writer. Opened as one (until
        // 2026-11-27), its close after a killed run hung twice in the crash suite (the second
        // time past the 120 s bound), in slatedb's writer close; a reader has nothing to flush.
        let state = step("opening the state", State::open_read_only(objects, "e2e")).await?;
        let read = async {
            let mut records = BTreeMap::new();
            let mut rs = state.resources(up).await?;
            while let Some(r) = rs.next().await? {
                records.insert(r.uri.clone(), r);
            }
            let mut log = Vec::new();
            let mut ls = state.log(1).await?;
            while let Some(e) = ls.next().await? {
                log.push(e);
            }
            let mut quarantine = Vec::new();
            let mut qs = state.quarantine().await?;
            while let Some(q) = qs.next().await? {
                quarantine.push(q);
            }
            Ok::<_, rsagg_store::Error>((records, log, quarantine))
        };
        let (records, log, quarantine) = step("reading the state", read).await?;
        step("closing the state", state.close()).await?;
        Ok(Snapshot {
            records,
            log,
            quarantine,
        })
    }

    /// Log entries of `uri`, as change names.
    pub fn log_of(&self, uri: &str) -> Vec<String> {
        self.log
            .iter()
            .filter(|e| e.uri == uri)
            .map(|e| e.change.as_str().to_owned())
            .collect()
    }

    /// Asserts the log is gap-free (1, 2, …) and has no entry twice: two consecutive
    /// entries of one URI that both leave it present with the same copy are one change
    /// logged twice (a deletion keeps the last copy, so it may repeat the sha-256).
    pub fn assert_log_sane(&self) {
        for (i, e) in self.log.iter().enumerate() {
            assert_eq!(
                e.seq,
                i as u64 + 1,
                "log sequence gap at {i}: {:?}",
                self.log
            );
        }
        let mut last: BTreeMap<&str, &LogEntry> = BTreeMap::new();
        for e in &self.log {
            if let Some(prev) = last.insert(e.uri.as_str(), e) {
                let present = |x: &LogEntry| x.change != rsagg_model::Change::Deleted;
                let sha = |x: &LogEntry| x.copy.as_ref().map(|c| c.sha256.clone());
                assert!(
                    !(present(prev) && present(e) && sha(prev) == sha(e)),
                    "{} logged twice with the same copy: seq {} ({}) and seq {} ({}); log: {:#?}",
                    e.uri,
                    prev.seq,
                    prev.change.as_str(),
                    e.seq,
                    e.change.as_str(),
                    self.log
                );
                assert!(
                    present(prev) || present(e),
                    "{} deleted twice in a row: {:#?}",
                    e.uri,
                    self.log
                );
            }
        }
    }
}

/// Reads the checkpoint of a set (opens the state as writer).
pub fn checkpoint(case: &Case, up: &str, set: &str) -> Result<Option<Checkpoint>> {
    let objects = case.store.objects()?;
    let (up, set) = (up.to_owned(), set.to_owned());
    block_on(async move {
        let state = State::open(objects, "e2e").await?;
        let cp = state.checkpoint(&up, &set).await?;
        state.close().await?;
        Ok(cp)
    })
}

/// Blocking GET (status, body).
pub fn http_get(url: &str) -> Result<(u16, Vec<u8>)> {
    let url = url.to_owned();
    block_on(async move {
        let r = reqwest::get(&url).await?;
        let status = r.status().as_u16();
        Ok((status, r.bytes().await?.to_vec()))
    })
}

// ---------------------------------------------------------------------------------------
// Followers (`rsagg run P --follow --listen`)

/// A `run --once` in the background ([`Case::spawn_run`]).
pub struct Running {
    child: KillOnDrop,
    out: PathBuf,
    err: PathBuf,
    _dir: tempfile::TempDir,
}

impl Running {
    /// Waits for the run to exit (killed after `limit`: then an error) and reads its output.
    pub fn finish(mut self, limit: Duration) -> Result<Run> {
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.0.try_wait()? {
                break s;
            }
            if start.elapsed() > limit {
                let err = std::fs::read_to_string(&self.err).unwrap_or_default();
                anyhow::bail!("rsagg still running after {limit:?}:\n{}", tail(&err, 40));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let output = std::process::Output {
            status,
            stdout: std::fs::read(&self.out)?,
            stderr: std::fs::read(&self.err)?,
        };
        Ok(parse_run(output))
    }
}

/// Waits until `check` holds (checked every 50 ms), or fails after `limit`.
pub fn wait_until(limit: Duration, mut check: impl FnMut() -> Result<bool>) -> Result<()> {
    let start = Instant::now();
    while !check()? {
        ensure!(
            start.elapsed() < limit,
            "condition not reached within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Kills the child (by PID) if the test ends before it exits.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `run --follow --listen` child, its stderr in a log file.
pub struct Follower {
    pub child: KillOnDrop,
    /// Kept open: the follower prints a report per poll pass.
    _stdout: BufReader<std::process::ChildStdout>,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Follower {
    /// Starts `rsagg run PIPELINE --follow --listen 127.0.0.1:PORT` (log level `$RSAGG_LOG`,
    /// else info) and waits for its `listening` line.
    pub fn start(case: &Case, port: u16) -> Result<Follower> {
        let dir = tempfile::Builder::new()
            .prefix("rsagg-e2e-follow-")
            .tempdir()?;
        let log = dir.path().join("follow.log");
        let child = Command::new(rsagg_bin()?)
            .arg("run")
            .arg(&case.toml)
            .args(["--follow", "--listen", &format!("127.0.0.1:{port}")])
            .env(
                "RSAGG_LOG",
                std::env::var("RSAGG_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(case.store.env()?)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        let mut child = KillOnDrop(child);
        let mut line = String::new();
        let mut stdout = BufReader::new(child.0.stdout.take().context("stdout")?);
        stdout.read_line(&mut line)?;
        anyhow::ensure!(
            line.trim() == format!("listening http://127.0.0.1:{port}"),
            "printed {line:?}"
        );
        Ok(Follower {
            child,
            _stdout: stdout,
            log,
            _dir: dir,
        })
    }

    /// The whole log.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last 40 lines of the log, backtrace frames left out.
    pub fn log_tail(&self) -> String {
        let s = self.log_text();
        // Backtrace frames (indented) are left out: the messages tell more.
        let lines: Vec<&str> = s.lines().filter(|l| !l.starts_with("  ")).collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Sends SIGTERM and waits (at most `limit`) for the exit status.
    pub fn terminate(&mut self, limit: Duration) -> Result<ExitStatus> {
        let pid = self.child.0.id().to_string();
        anyhow::ensure!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()?
                .success()
        );
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.child.0.try_wait()? {
                return Ok(s);
            }
            anyhow::ensure!(t0.elapsed() < limit, "still running after SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Waits until `check` holds (checked every 50 ms), or fails after `limit` with the log.
pub fn wait_for(
    what: &str,
    limit: Duration,
    f: &Follower,
    mut check: impl FnMut() -> Result<bool>,
) -> Result<Duration> {
    let t0 = Instant::now();
    loop {
        if check()? {
            return Ok(t0.elapsed());
        }
        if t0.elapsed() > limit {
            anyhow::bail!("{what}: not within {limit:?}; log:\n{}", f.log_tail());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The subscription rsagg keeps for upstream [`UP`]: verified (a lease was granted, with a
/// secret)?
pub fn verified(case: &Case) -> Result<bool> {
    let dir = store_dir(case)?;
    let Ok(text) = std::fs::read_to_string(dir.join(format!("push/{UP}.json"))) else {
        return Ok(false);
    };
    let v: serde_json::Value = serde_json::from_str(&text)?;
    Ok(v["subscriptions"].as_array().is_some_and(|a| {
        a.iter()
            .any(|s| s["lease_granted"].is_u64() && s["secret"].is_string())
    }))
}

/// The directory of a `file://` store.
pub fn store_dir(case: &Case) -> Result<PathBuf> {
    url::Url::parse(&case.store.url)?
        .to_file_path()
        .map_err(|()| anyhow::anyhow!("{} is not a file URL", case.store.url))
}

/// The `rs:md at` of a published document.
pub fn header_at(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| path.display().to_string())?;
    let r = SyncReader::open(
        bytes.as_slice(),
        ReadOptions::new(Mode::Strict, path.display().to_string()),
    )?;
    r.header()
        .md
        .as_ref()
        .and_then(|md| md.at)
        .map(|at| at.to_string())
        .with_context(|| format!("{} has no at", path.display()))
}

// ---------------------------------------------------------------------------------------
// rsagg's delivered change notifications

/// A delivered payload read strictly: its interval and entries.
pub struct Read {
    pub from: W3cDateTime,
    pub until: W3cDateTime,
    pub up: Option<String>,
    pub entries: Vec<UrlEntry>,
}

pub fn read(d: &Delivery) -> Result<Read> {
    read_body(&d.body)
}

/// A change notification payload read strictly (CN 1.0.1 4.3): its interval and entries.
pub fn read_body(body: &[u8]) -> Result<Read> {
    let doc = read_document(body, ReadOptions::new(Mode::Strict, "delivered payload"))?;
    let errors: Vec<_> = doc.errors().collect();
    ensure!(errors.is_empty(), "delivered payload invalid: {errors:?}");
    ensure!(
        doc.header.capability() == Some(&Capability::ChangeNotification),
        "not a change notification"
    );
    let md = doc.header.md.as_ref().context("no rs:md")?;
    Ok(Read {
        from: md.from.context("no from")?,
        until: md.until.context("no until")?,
        up: doc
            .header
            .links
            .iter()
            .find(|l| l.rel == "up")
            .map(|l| l.href.clone()),
        entries: doc.entries,
    })
}

/// (upstream URI named by `via`, change) of every entry.
pub fn changes(r: &Read) -> Vec<(String, Change)> {
    r.entries
        .iter()
        .map(|e| {
            let via = e
                .links
                .iter()
                .find(|l| l.rel == "via")
                .map(|l| l.href.clone())
                .unwrap_or_default();
            let change =
                e.md.as_ref()
                    .and_then(|m| m.change.clone())
                    .unwrap_or(Change::Updated);
            (via, change)
        })
        .collect()
}

/// Reads every delivery, checks `Content-Type`, both `Link` rels, the signature, the `up`
/// link and that the intervals chain; returns the changes they carry, in order.
pub fn check_deliveries(
    deliveries: &[Delivery],
    topic: &str,
    hub: &str,
    caplist: &str,
    alg: Algorithm,
) -> Result<Vec<(String, Change)>> {
    let mut all = Vec::new();
    let mut prev: Option<W3cDateTime> = None;
    for d in deliveries {
        let ct = d.header("content-type").unwrap_or("");
        ensure!(
            ct.split(';').next().map(str::trim) == Some("application/xml"),
            "Content-Type {ct}"
        );
        ensure!(
            d.link("self").as_deref() == Some(topic),
            "Link rel=self: {d:?}"
        );
        ensure!(d.link("hub").as_deref() == Some(hub), "Link rel=hub: {d:?}");
        ensure!(
            d.signature == SignatureCheck::Valid(alg),
            "X-Hub-Signature: {:?}",
            d.signature
        );
        let r = read(d)?;
        ensure!(r.up.as_deref() == Some(caplist), "rs:ln up {:?}", r.up);
        ensure!(r.from.cmp_instant(&r.until).is_lt(), "from < until");
        for e in &r.entries {
            let dt = e.md.as_ref().and_then(|m| m.datetime).context("datetime")?;
            ensure!(
                dt.cmp_instant(&r.from).is_ge() && dt.cmp_instant(&r.until).is_lt(),
                "entry datetime {dt} outside [{}, {})",
                r.from,
                r.until
            );
        }
        if let Some(p) = prev {
            ensure!(
                r.from.cmp_instant(&p).is_eq(),
                "from {} is not the previous until {p}",
                r.from
            );
        }
        prev = Some(r.until);
        all.extend(changes(&r));
    }
    Ok(all)
}
