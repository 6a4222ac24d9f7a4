//! The Kubernetes manifests of `deploy/k8s` against the code they deploy:
//!
//! - every `httpGet` probe (liveness, readiness, startup) names a path the real router of
//!   `rsagg serve` answers with 200 (memory:// stores are reachable, so `/readyz` is ready)
//!   and the port the container listens on (`--listen 0.0.0.0:PORT`), and every listening
//!   container has both a liveness and a readiness probe;
//! - every pipeline file of the ConfigMap `rsagg-pipelines` is a valid pipeline, and the
//!   collections can be served together (as `serve.yaml` does).
//!
//! The manifests' schemas, the hadolint lint of the Containerfile and the native release build
//! are checked by `scripts/deploy-check.sh`. The YAML is read with a small line scan (the
//! manifests are plain block-style YAML written by hand), not a YAML library.
//!
//! Run: `cargo test -p rsagg-e2e --test deploy`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use tower::ServiceExt;

/// `deploy/k8s` of this repository.
fn k8s_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/k8s")
}

/// Every `*.yaml` of `deploy/k8s`, with its text, sorted by name.
fn manifests() -> Result<Vec<(String, String)>> {
    let dir = k8s_dir();
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            out.push((name, text));
        }
    }
    out.sort();
    ensure!(!out.is_empty(), "no manifests in {}", dir.display());
    Ok(out)
}

/// Indentation (leading spaces) of a line.
fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// A line that carries no YAML content.
fn is_blank(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

/// The scalar after `key:` on a trimmed line (`key: value`, quotes removed, comment cut).
fn value_of<'a>(trimmed: &'a str, key: &str) -> Option<&'a str> {
    let rest = trimmed.strip_prefix(key)?.strip_prefix(':')?;
    let rest = rest.split(" #").next().unwrap_or(rest).trim();
    Some(rest.trim_matches(|c| c == '"' || c == '\''))
}

/// One `httpGet` probe of a manifest.
#[derive(Debug)]
struct Probe {
    file: String,
    /// 1-based line of `httpGet:`.
    line: usize,
    /// `livenessProbe`, `readinessProbe` or `startupProbe`.
    kind: String,
    path: Option<String>,
    port: Option<String>,
}

/// Every `httpGet:` block of `text`: the probe key above it, and its `path:` and `port:`.
fn http_probes(file: &str, text: &str) -> Vec<Probe> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() != "httpGet:" {
            continue;
        }
        let base = indent(line);
        let kind = lines[..i]
            .iter()
            .rev()
            .find(|l| !is_blank(l) && indent(l) < base)
            .map(|l| {
                l.trim()
                    .trim_start_matches("- ")
                    .trim_end_matches(':')
                    .to_owned()
            })
            .unwrap_or_default();
        let mut probe = Probe {
            file: file.to_owned(),
            line: i + 1,
            kind,
            path: None,
            port: None,
        };
        for l in lines[i + 1..].iter().filter(|l| !is_blank(l)) {
            if indent(l) <= base {
                break;
            }
            let t = l.trim();
            if let Some(v) = value_of(t, "path") {
                probe.path = Some(v.to_owned());
            } else if let Some(v) = value_of(t, "port") {
                probe.port = Some(v.to_owned());
            }
        }
        out.push(probe);
    }
    out
}

/// The ports a manifest's containers listen on: every `0.0.0.0:PORT` (the `--listen` value).
fn listen_ports(text: &str) -> Vec<String> {
    text.match_indices("0.0.0.0:")
        .map(|(i, m)| {
            text[i + m.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .filter(|p| !p.is_empty())
        .collect()
}

/// The router of `rsagg serve` over one collection in a memory store (always reachable).
fn router() -> Result<axum::Router> {
    let objects = rsagg_store::open_object_store("memory://")?.objects;
    let collection = rsagg_server::Collection::new("c", "http://127.0.0.1:8080/c/", objects)?;
    Ok(rsagg_server::router(vec![collection]))
}

#[tokio::test]
async fn probe_paths_are_answered_by_the_router() -> Result<()> {
    let mut probes = Vec::new();
    for (file, text) in manifests()? {
        let found = http_probes(&file, &text);
        let ports = listen_ports(&text);
        for p in &found {
            let at = format!("{}:{} ({})", p.file, p.line, p.kind);
            let (Some(path), Some(port)) = (&p.path, &p.port) else {
                bail!("{at}: httpGet without path or port: {p:?}");
            };
            ensure!(path.starts_with('/'), "{at}: path `{path}` is not absolute");
            ensure!(
                ports.contains(port),
                "{at}: probe port {port} is not a port the container listens on ({ports:?})"
            );
        }
        // A container that listens is probed for both liveness and readiness.
        if !ports.is_empty() {
            for kind in ["livenessProbe", "readinessProbe"] {
                ensure!(
                    found.iter().any(|p| p.kind == kind),
                    "{file}: listens on {ports:?} but has no httpGet {kind}"
                );
            }
        }
        probes.extend(found);
    }
    ensure!(!probes.is_empty(), "no httpGet probes in deploy/k8s");

    let mut paths: Vec<&str> = probes.iter().filter_map(|p| p.path.as_deref()).collect();
    paths.sort_unstable();
    paths.dedup();
    let mut failed = Vec::new();
    for path in paths {
        let response = router()?
            .oneshot(
                Request::builder()
                    .method("GET")
                    .uri(path)
                    .body(Body::empty())?,
            )
            .await?;
        if response.status() != StatusCode::OK {
            let used_by: Vec<String> = probes
                .iter()
                .filter(|p| p.path.as_deref() == Some(path))
                .map(|p| format!("{}:{} ({})", p.file, p.line, p.kind))
                .collect();
            failed.push(format!(
                "GET {path} answered {} (probed by {})",
                response.status(),
                used_by.join(", ")
            ));
        }
    }
    ensure!(
        failed.is_empty(),
        "probe paths the router of `rsagg serve` does not answer with 200:\n  {}",
        failed.join("\n  ")
    );
    Ok(())
}

/// The block scalars under `data:` of the ConfigMap named `name` in a multi-document file:
/// `(key, text)` pairs, the text dedented.
fn configmap_blocks(text: &str, name: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for doc in text.split("\n---") {
        let lines: Vec<&str> = doc.lines().collect();
        let is_it = lines.iter().any(|l| l.trim() == "kind: ConfigMap")
            && lines
                .iter()
                .any(|l| indent(l) == 2 && value_of(l.trim(), "name") == Some(name));
        if !is_it {
            continue;
        }
        let Some(data) = lines.iter().position(|l| l.trim_end() == "data:") else {
            continue;
        };
        let mut i = data + 1;
        while i < lines.len() {
            let line = lines[i];
            i += 1;
            if is_blank(line) {
                continue;
            }
            if indent(line) == 0 {
                break;
            }
            let Some(key) = line.trim().strip_suffix(": |") else {
                continue;
            };
            let key_indent = indent(line);
            let mut block = Vec::new();
            while i < lines.len() && (lines[i].trim().is_empty() || indent(lines[i]) > key_indent) {
                block.push(lines[i]);
                i += 1;
            }
            let cut = block
                .iter()
                .filter(|l| !l.trim().is_empty())
                .map(|l| indent(l))
                .min()
                .unwrap_or(0);
            let body: String = block
                .iter()
                .map(|l| format!("{}\n", l.get(cut..).unwrap_or("")))
                .collect();
            out.push((key.to_owned(), body));
        }
    }
    out
}

/// `${NAME}` replaced by `example` (the pods get the values from the ConfigMap rsagg-env;
/// scripts/deploy-check.sh checks that every name used is one of its keys).
fn with_placeholders(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        match rest[i..].find('}') {
            Some(end) => {
                out.push_str("example");
                rest = &rest[i + end + 1..];
            }
            None => {
                out.push_str(&rest[i..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn configmap_pipelines_are_valid_and_can_be_served_together() -> Result<()> {
    let mut collections = Vec::new();
    for (file, text) in manifests()? {
        for (key, body) in configmap_blocks(&text, "rsagg-pipelines") {
            ensure!(
                key.ends_with(".toml"),
                "{file}: rsagg-pipelines key `{key}` is not a .toml"
            );
            let origin = PathBuf::from(format!("deploy/k8s/{file} (data.{key})"));
            let p = rsagg_pipeline::Pipeline::parse(&origin, &with_placeholders(&body))
                .with_context(|| format!("{}:\n{body}", origin.display()))?;
            let objects = rsagg_store::open_object_store("memory://")?.objects;
            collections.push(rsagg_server::Collection::new(
                p.config.collection.name.clone(),
                p.config.collection.base_url.as_str(),
                objects,
            )?);
        }
    }
    ensure!(
        !collections.is_empty(),
        "no pipeline files in a ConfigMap rsagg-pipelines under deploy/k8s"
    );
    rsagg_server::check_collections(&collections)?;
    Ok(())
}

#[test]
fn the_line_scan_reads_probes_and_blocks() {
    let text = "\
kind: Deployment
spec:
  containers:
    - args: [\"serve\", \"--listen\", \"0.0.0.0:8080\"]
      livenessProbe:
        httpGet:
          # a comment
          path: \"/healthz\"
          port: 8080
        periodSeconds: 20
      readinessProbe:
        httpGet: {}
---
kind: ConfigMap
metadata:
  name: rsagg-pipelines
data:
  a.toml: |
    [collection]

    name = \"a\"
  b.toml: |
    x = 1
";
    let probes = http_probes("f", text);
    assert_eq!(probes.len(), 1, "{probes:?}");
    assert_eq!(probes[0].kind, "livenessProbe");
    assert_eq!(probes[0].path.as_deref(), Some("/healthz"));
    assert_eq!(probes[0].port.as_deref(), Some("8080"));
    assert_eq!(listen_ports(text), ["8080"]);
    let blocks = configmap_blocks(text, "rsagg-pipelines");
    assert_eq!(
        blocks,
        [
            (
                "a.toml".to_owned(),
                "[collection]\n\nname = \"a\"\n".to_owned()
            ),
            ("b.toml".to_owned(), "x = 1\n".to_owned())
        ]
    );
    assert_eq!(with_placeholders("s3://${B}/x ${"), "s3://example/x ${");
}
