//! The Kubernetes manifests of `deploy/k8s` against the code they deploy:
//!
//! - every `httpGet` probe (liveness, readiness, startup) names a path the real router of
//!   `rsagg serve` answers with 200 (a collection published into a memory:// store, so
//!   `/readyz` is ready)
//!   and the port the container listens on (`--listen 0.0.0.0:PORT`), and every listening
//!   container has both a liveness and a readiness probe;
//! - every pipeline file of the ConfigMap `rsagg-pipelines` is a valid pipeline, and the
//!   collections can be served together (as `serve.yaml` does).
//!
//! The manifests' schemas, the hadolint lint of the Containerfile and the native release build
//! are checked by `scripts/deploy-check.sh`. The YAML is read with a small line scan (the
//! manifests are plain block-style YAML written by hand), not a YAML library.
//!
//! Run: `cargo test -p rsagg-e2e --test e2e deploy::`.

use std::path::PathBuf;

use anyhow::{Context, Result, bail, ensure};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use tower::ServiceExt;

/// `deploy/k8s` of this repository.
fn k8s_dir() -> PathBuf {
    rsagg_e2e::repo_root().join("deploy/k8s")
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

/// The port of `--probe-listen 0.0.0.0:PORT` (the probes' own listener), if the manifest
/// has one.
fn probe_listen_port(text: &str) -> Option<String> {
    let text: String = text
        .lines()
        .filter(|l| !is_blank(l))
        .map(|l| format!("{l}\n"))
        .collect();
    let at = text.find("--probe-listen")?;
    let rest = &text[at..];
    let i = rest.find("0.0.0.0:")? + "0.0.0.0:".len();
    let port: String = rest[i..].chars().take_while(char::is_ascii_digit).collect();
    (!port.is_empty()).then_some(port)
}

/// The router of `rsagg serve` over one published collection (its Capability List is in
/// the store: `/readyz` is 503 until then) in a memory store (always reachable).
async fn router() -> Result<axum::Router> {
    use object_store::ObjectStoreExt;
    let objects = rsagg_store::open_object_store("memory://")?.objects;
    objects
        .put(
            &object_store::path::Path::from("capabilitylist.xml"),
            "<urlset/>".into(),
        )
        .await?;
    let collection = rsagg_server::Collection::new("c", "http://127.0.0.1:8080/c/", objects)?;
    Ok(rsagg_server::router(vec![collection]))
}

#[tokio::test]
async fn probe_paths_are_answered_by_the_router() -> Result<()> {
    let mut probes = Vec::new();
    for (file, text) in manifests()? {
        let found = http_probes(&file, &text);
        let ports = listen_ports(&text);
        let probe_port = probe_listen_port(&text);
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
            // The probes go to their own listener, which a flood of the main one cannot
            // starve (`--probe-listen`, docs/contract.md).
            ensure!(
                probe_port.as_ref() == Some(port),
                "{at}: probe port {port} is not the --probe-listen port ({probe_port:?})"
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
        // As the probe listener answers them.
        let response = rsagg_server::probes_only(router().await?)
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

/// The image the generator is given in these tests: pinned by digest, as it requires.
const EXAMPLE_IMAGE: &str = "registry.example.org/rsagg@sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// `python3 scripts/gen-deploy.py ARGS`: exit code, standard output, standard error.
fn gen_deploy(args: &[&str]) -> Result<(i32, String, String)> {
    let root = rsagg_e2e::repo_root();
    let out = std::process::Command::new("python3")
        .arg(root.join("scripts/gen-deploy.py"))
        .args(args)
        .current_dir(&root)
        .output()
        .context("running python3 scripts/gen-deploy.py")?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout)?,
        String::from_utf8(out.stderr)?,
    ))
}

/// Whether a label selector (`matchLabels`, `matchExpressions`) selects `labels`.
fn selects(selector: &serde_json::Value, labels: &serde_json::Value) -> bool {
    let label = |k: &str| labels.get(k).and_then(|v| v.as_str());
    let by_label = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k) == v.as_str());
    let by_expression = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let v = label(e["key"].as_str().unwrap_or(""));
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x.as_str())
                .collect();
            match e["operator"].as_str() {
                Some("In") => v.is_some_and(|v| values.contains(&v)),
                Some("NotIn") => !v.is_some_and(|v| values.contains(&v)),
                Some("Exists") => v.is_some(),
                Some("DoesNotExist") => v.is_none(),
                _ => false,
            }
        });
    by_label && by_expression
}

/// The pod templates of workload objects: (kind/name, template).
fn templates(items: &[serde_json::Value]) -> Vec<(String, &serde_json::Value)> {
    items
        .iter()
        .filter_map(|o| {
            let t = match o["kind"].as_str()? {
                "Deployment" => &o["spec"]["template"],
                "CronJob" => &o["spec"]["jobTemplate"]["spec"]["template"],
                _ => return None,
            };
            Some((
                format!("{}/{}", o["kind"].as_str()?, o["metadata"]["name"]),
                t,
            ))
        })
        .collect()
}

/// `scripts/gen-deploy.py` on every pipeline file of `pipelines/`, as a CronJob and as a
/// follow Deployment, each with `serve`: the pipeline file travels byte for byte, there is one
/// writer of the right shape, every image is pinned, every probe and the PodMonitor's path
/// are answered by the real router, and the Services, NetworkPolicies and PodMonitor select
/// exactly the pods they are for. (Their schemas: `scripts/deploy-check.sh`.)
#[tokio::test]
async fn generated_manifests_deploy_each_pipeline_file() -> Result<()> {
    let dir = rsagg_e2e::repo_root().join("pipelines");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "toml"));
    files.sort();
    ensure!(files.len() >= 2, "pipeline files in {}", dir.display());
    let mut paths = std::collections::BTreeSet::new();
    let mut probe_paths = std::collections::BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file)?;
        let pipeline = rsagg_pipeline::Pipeline::parse(file, &text)
            .with_context(|| format!("{}", file.display()))?;
        let name = pipeline.config.collection.name.clone();
        for mode in ["batch", "follow"] {
            let at = format!("{} --mode {mode}", file.display());
            let args = [
                file.to_str().context("path")?,
                "--image",
                EXAMPLE_IMAGE,
                "--mode",
                mode,
                "--serve",
                "--format",
                "json",
            ];
            let (code, out, err) = gen_deploy(&args)?;
            ensure!(code == 0, "{at}: exit {code}: {err}");
            let list: serde_json::Value = serde_json::from_str(&out)?;
            let items = list["items"].as_array().context("items")?.clone();
            let named = |kind: &str, n: &str| {
                items
                    .iter()
                    .find(|o| o["kind"] == kind && o["metadata"]["name"] == n)
            };

            // The pipeline file, byte for byte.
            let cm = named("ConfigMap", &format!("rsagg-pipeline-{name}"))
                .with_context(|| format!("{at}: no ConfigMap"))?;
            ensure!(
                cm["data"][format!("{name}.toml")].as_str() == Some(text.as_str()),
                "{at}: the ConfigMap does not hold the pipeline file as written"
            );

            // One writer, of the right shape; every container pinned and mounting the file.
            let pods = templates(&items);
            let mut writers = Vec::new();
            let mut listening = Vec::new();
            for (what, t) in &pods {
                let spec = &t["spec"];
                ensure!(
                    spec["volumes"][0]["configMap"]["name"]
                        == format!("rsagg-pipeline-{name}").as_str(),
                    "{at}: {what} does not mount the pipeline's ConfigMap"
                );
                for c in spec["containers"].as_array().into_iter().flatten() {
                    ensure!(
                        c["image"] == EXAMPLE_IMAGE,
                        "{at}: {what}: image {}",
                        c["image"]
                    );
                    let args: Vec<&str> = c["args"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|a| a.as_str())
                        .collect();
                    ensure!(
                        args.contains(&format!("/etc/rsagg/pipelines/{name}.toml").as_str()),
                        "{at}: {what}: args {args:?}"
                    );
                    if args.first() == Some(&"run") {
                        writers.push((what.clone(), args.clone()));
                    }
                    if let Some(ports) = c["ports"].as_array() {
                        listening.push(what.clone());
                        ensure!(ports[0]["name"] == "http", "{at}: {what}: port name");
                        let port = ports[0]["containerPort"].as_u64().context("port")?;
                        ensure!(
                            args.contains(&format!("0.0.0.0:{port}").as_str()),
                            "{at}: {what} listens elsewhere than its port {port}: {args:?}"
                        );
                        // The probes on their own listener (`--probe-listen`).
                        ensure!(ports[1]["name"] == "probes", "{at}: {what}: {ports:?}");
                        let probe_port = ports[1]["containerPort"].as_u64().context("port")?;
                        let flag = args.iter().position(|a| *a == "--probe-listen");
                        ensure!(
                            flag.and_then(|i| args.get(i + 1)).copied()
                                == Some(format!("0.0.0.0:{probe_port}").as_str()),
                            "{at}: {what} has no --probe-listen 0.0.0.0:{probe_port}: {args:?}"
                        );
                        for probe in ["livenessProbe", "readinessProbe"] {
                            let get = &c[probe]["httpGet"];
                            ensure!(
                                get["port"].as_u64() == Some(probe_port),
                                "{at}: {what} {probe}"
                            );
                            probe_paths.insert(get["path"].as_str().context("path")?.to_owned());
                        }
                    }
                }
            }
            ensure!(writers.len() == 1, "{at}: writers {writers:?}");
            let (writer, args) = &writers[0];
            if mode == "batch" {
                let cron = named("CronJob", &format!("rsagg-run-{name}")).context("CronJob")?;
                ensure!(cron["spec"]["concurrencyPolicy"] == "Forbid", "{at}");
                ensure!(args.contains(&"--once"), "{at}: {args:?}");
            } else {
                let d = named("Deployment", &format!("rsagg-follow-{name}")).context("follow")?;
                ensure!(d["spec"]["replicas"] == 1, "{at}");
                ensure!(d["spec"]["strategy"]["type"] == "Recreate", "{at}");
                ensure!(args.contains(&"--follow"), "{at}: {writer} {args:?}");
            }

            // Services: each selects pods that have the port it targets.
            for svc in items.iter().filter(|o| o["kind"] == "Service") {
                let sel = serde_json::json!({ "matchLabels": svc["spec"]["selector"] });
                let picked: Vec<&String> = pods
                    .iter()
                    .filter(|(_, t)| selects(&sel, &t["metadata"]["labels"]))
                    .map(|(w, _)| w)
                    .collect();
                ensure!(
                    picked.len() == 1 && listening.contains(picked[0]),
                    "{at}: Service {} selects {picked:?}",
                    svc["metadata"]["name"]
                );
            }

            // NetworkPolicies: the default one covers every pod; the http one and the
            // PodMonitor exactly the listening ones.
            let default = named("NetworkPolicy", &format!("rsagg-{name}")).context("policy")?;
            let http = named("NetworkPolicy", &format!("rsagg-{name}-http")).context("http")?;
            let monitor = named("PodMonitor", &format!("rsagg-{name}")).context("monitor")?;
            for (what, t) in &pods {
                let labels = &t["metadata"]["labels"];
                ensure!(
                    selects(&default["spec"]["podSelector"], labels),
                    "{at}: {what}"
                );
                let listens = listening.contains(what);
                ensure!(
                    selects(&http["spec"]["podSelector"], labels) == listens,
                    "{at}: rsagg-{name}-http and {what}"
                );
                ensure!(
                    selects(&monitor["spec"]["selector"], labels) == listens,
                    "{at}: the PodMonitor and {what}"
                );
            }
            let egress_ports: Vec<u64> = default["spec"]["egress"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|r| r["ports"].as_array().into_iter().flatten())
                .filter_map(|p| p["port"].as_u64())
                .collect();
            for port in [53, 8333, 80, 443] {
                ensure!(
                    egress_ports.contains(&port),
                    "{at}: egress {egress_ports:?}"
                );
            }
            for u in &pipeline.config.upstreams {
                let port = u.url.port_or_known_default().context("port")?;
                ensure!(
                    egress_ports.contains(&u64::from(port)),
                    "{at}: upstream {} on {port}, egress {egress_ports:?}",
                    u.name
                );
            }
            let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
            ensure!(endpoint["port"] == "http", "{at}");
            paths.insert(endpoint["path"].as_str().context("path")?.to_owned());
        }
    }
    // Every path probed is answered by the real router as the probe listener serves it,
    // every path scraped by the real router.
    for path in &probe_paths {
        let response = rsagg_server::probes_only(router().await?)
            .oneshot(Request::builder().uri(path.as_str()).body(Body::empty())?)
            .await?;
        ensure!(
            response.status() == StatusCode::OK,
            "GET {path} (probe listener): {}",
            response.status()
        );
    }
    ensure!(probe_paths.contains("/readyz"), "{probe_paths:?}");
    for path in &paths {
        let response = router()
            .await?
            .oneshot(Request::builder().uri(path.as_str()).body(Body::empty())?)
            .await?;
        ensure!(
            response.status() == StatusCode::OK,
            "GET {path}: {}",
            response.status()
        );
    }
    ensure!(paths.contains("/metrics"), "{paths:?}");

    // An image by tag, or a bad pipeline file, is refused (exit 2) with the reason.
    let reference = dir.join("reference.toml");
    let reference = reference.to_str().context("path")?;
    let (code, _, err) = gen_deploy(&[reference, "--image", "registry.example.org/rsagg:0.1.0"])?;
    ensure!(
        code == 2 && err.contains("not pinned by digest"),
        "{code}: {err}"
    );
    let bad = tempfile::NamedTempFile::new()?;
    std::fs::write(bad.path(), "[collection]\nname = \"Not A Label\"\n")?;
    let (code, _, err) = gen_deploy(&[
        bad.path().to_str().context("path")?,
        "--image",
        EXAMPLE_IMAGE,
    ])?;
    ensure!(code == 2 && err.contains("DNS label"), "{code}: {err}");
    Ok(())
}

/// `scripts/gen-deploy.py DIR --shards N`: a fleet's Indexed Job. Pod I of the Job runs
/// `rsagg run /etc/rsagg/pipelines --once --shards N` (shard I from `JOB_COMPLETION_INDEX`),
/// `completions` = `parallelism` = N, the directory's files travel byte for byte in
/// ConfigMaps projected at that path, a shard failing on exit 2 or 3 fails only its index,
/// and `serve` serves the same directory.
#[test]
fn a_directory_becomes_an_indexed_job_of_shards() -> Result<()> {
    let dir = rsagg_e2e::repo_root().join("pipelines");
    let d = dir.to_str().context("path")?;
    let (code, out, err) = gen_deploy(&[
        d,
        "--image",
        EXAMPLE_IMAGE,
        "--shards",
        "4",
        "--max-pipelines",
        "2",
        "--serve",
        "--name",
        "core",
        "--format",
        "json",
    ])?;
    ensure!(code == 0, "gen-deploy failed: {err}");
    let list: serde_json::Value = serde_json::from_str(&out)?;
    let items = list["items"].as_array().context("items")?;
    let job = items
        .iter()
        .find(|o| o["kind"] == "CronJob")
        .context("no CronJob")?;
    assert_eq!(job["metadata"]["name"], "rsagg-fleet-core");
    assert_eq!(job["spec"]["concurrencyPolicy"], "Forbid");
    let spec = &job["spec"]["jobTemplate"]["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    assert_eq!(spec["completions"], 4);
    assert_eq!(spec["parallelism"], 4);
    let rules = spec["podFailurePolicy"]["rules"]
        .as_array()
        .context("rules")?;
    assert!(
        rules.iter().any(|r| r["action"] == "FailIndex"
            && r["onExitCodes"]["values"] == serde_json::json!([2, 3])),
        "{rules:?}"
    );
    assert!(
        spec["backoffLimitPerIndex"].as_u64().is_some(),
        "FailIndex needs it"
    );
    let pod = &spec["template"]["spec"];
    let args: Vec<&str> = pod["containers"][0]["args"]
        .as_array()
        .context("args")?
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert_eq!(
        args,
        [
            "run",
            "/etc/rsagg/pipelines",
            "--once",
            "--shards",
            "4",
            "--max-pipelines",
            "2"
        ]
    );
    // The files, byte for byte, in the ConfigMaps the volume projects.
    let projected: Vec<&str> = pod["volumes"]
        .as_array()
        .context("volumes")?
        .iter()
        .find(|v| v["name"] == "pipelines")
        .context("pipelines volume")?["projected"]["sources"]
        .as_array()
        .context("sources")?
        .iter()
        .filter_map(|s| s["configMap"]["name"].as_str())
        .collect();
    let mut data = std::collections::BTreeMap::new();
    for cm in items.iter().filter(|o| o["kind"] == "ConfigMap") {
        let name = cm["metadata"]["name"].as_str().context("name")?;
        assert!(projected.contains(&name), "{name} is not projected");
        for (k, v) in cm["data"].as_object().context("data")? {
            data.insert(k.clone(), v.as_str().unwrap_or("").to_owned());
        }
    }
    let mut files = 0;
    for e in std::fs::read_dir(&dir)? {
        let path = e?.path();
        if path.extension().is_some_and(|e| e == "toml") {
            files += 1;
            let key = path.file_name().and_then(|n| n.to_str()).context("name")?;
            assert_eq!(
                data.get(key).map(String::as_str),
                Some(std::fs::read_to_string(&path)?.as_str()),
                "{key}"
            );
        }
    }
    assert_eq!(data.len(), files);
    let serve = items
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .context("serve")?;
    assert_eq!(
        serve["spec"]["template"]["spec"]["containers"][0]["args"][1],
        "/etc/rsagg/pipelines"
    );
    // One collection's CronJob is still made from a file; --shards needs a directory.
    let one = dir.join("demo.toml");
    let one = one.to_str().context("path")?;
    let (code, _, _) = gen_deploy(&[one, "--image", EXAMPLE_IMAGE])?;
    assert_eq!(code, 0);
    let (code, _, err) = gen_deploy(&[one, "--image", EXAMPLE_IMAGE, "--shards", "2"])?;
    assert_eq!(code, 2, "{err}");
    Ok(())
}
