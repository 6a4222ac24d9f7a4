//! `rsagg check` and config errors of `rsagg run` (contract: exit 0 valid, 2 invalid; errors
//! name file, line and key). The repository's pipelines, the full reference included, must
//! pass unchanged.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn rsagg(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rsagg"))
        .args(args)
        .env("RSAGG_DEMO_STORE", "file:///tmp/rsagg-check-demo")
        .env("RSAGG_DEMO_UPSTREAM", "http://127.0.0.1:9")
        .env("RSAGG_DEMO_PORT", "8080")
        .env("RSAGG_SIM_URL", "http://127.0.0.1:18888")
        .env("RSAGG_BUCKET", "rsagg-data")
        .output()
        .expect("run rsagg")
}

fn pipelines_dir() -> PathBuf {
    Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo")).join("../../pipelines")
}

#[test]
fn every_pipeline_in_the_repository_passes_unchanged() {
    let mut files: Vec<String> = std::fs::read_dir(pipelines_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert!(
        files.iter().any(|f| f.ends_with("reference.toml")),
        "{files:?}"
    );
    for f in &files {
        let out = rsagg(&["check", f]);
        assert!(
            out.status.success(),
            "{f}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn errors_name_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[collection]\nname = \"Bad Name\"\nbase_url = \"https://x.example/\"\n\n[store]\nurl = \"file:///tmp/x\"\n\n[[upstream]]\nname = \"u\"\nurl = \"https://u.example/\"\n",
    )
    .unwrap();
    let out = rsagg(&["check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml:2"), "{err}");
    assert!(err.contains("collection.name"), "{err}");

    let unknown = dir.path().join("unknown.toml");
    std::fs::write(
        &unknown,
        "[collection]\nname = \"ok\"\nbase_url = \"https://x.example/\"\n\n[store]\nurl = \"file:///tmp/x\"\n\n[[upstream]]\nname = \"u\"\nurl = \"https://u.example/\"\npoll_intervall = \"5m\"\n",
    )
    .unwrap();
    let out = rsagg(&["check", unknown.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown.toml:11"), "{err}");
    assert!(err.contains("poll_intervall"), "{err}");

    // `run` refuses the same file with exit 2 before touching any store or network.
    let out = rsagg(&["run", bad.to_str().unwrap(), "--once"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn duplicate_collection_names_are_refused_together() {
    let demo = pipelines_dir().join("demo.toml");
    let d = demo.to_str().unwrap();
    let out = rsagg(&["check", d, d]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("also used by"));
}

/// What `run` refuses before any I/O, `check` refuses too, in one pass, every error at once;
/// and `run` exits 2 on it as on any config error (not 1, as for a store that failed).
#[test]
fn check_refuses_what_run_refuses_every_error_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[collection]\nname = \"c\"\nbase_url = \"https://x.example/c/\"\n\n\
         [stor]\nurl = \"file:///tmp/x\"\n\n\
         [[upstream]]\nname = \"one\"\nurl = \"http://127.0.0.1:8000/.well-known/resourcesync\"\n\n\
         [[upstream]]\nname = \"two\"\nurl = \"https://u.example/\"\npoll_interval = \"0s\"\n",
    )
    .unwrap();
    let out = rsagg(&["check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for wanted in [
        "unknown field `stor`",
        "missing field `store`",
        "upstream[0].url",
        "allow_private = true",
        "upstream[1].poll_interval",
    ] {
        assert!(err.contains(wanted), "{wanted}: {err}");
    }

    let relative = dir.path().join("relative.toml");
    std::fs::write(
        &relative,
        "[collection]\nname = \"c\"\nbase_url = \"https://x.example/c/\"\n\n\
         [store]\nurl = \"file://relative/store\"\n\n\
         [[upstream]]\nname = \"one\"\nurl = \"https://u.example/\"\n",
    )
    .unwrap();
    for args in [
        vec!["check", relative.to_str().unwrap()],
        vec!["run", relative.to_str().unwrap(), "--once"],
        vec!["audit", relative.to_str().unwrap()],
    ] {
        let out = rsagg(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("relative.toml:6"), "{args:?}: {err}");
        assert!(
            err.contains("not an absolute local path"),
            "{args:?}: {err}"
        );
    }

    let plain = dir.path().join("plain.toml");
    std::fs::write(
        &plain,
        "[collection]\nname = \"c\"\nbase_url = \"https://x.example/c/\"\n\n\
         [store]\nurl = \"/var/lib/rsagg/maps\"\n\n\
         [[upstream]]\nname = \"one\"\nurl = \"https://u.example/\"\n",
    )
    .unwrap();
    let out = rsagg(&["check", plain.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"file:///var/lib/rsagg/maps\""), "{err}");
}

/// An `s3://` store without credentials is a configuration error: said before any request
/// (naming what was looked for), exit 2 for `run` and the operator commands alike.
#[test]
fn an_s3_store_without_credentials_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s3.toml");
    std::fs::write(
        &p,
        "[collection]\nname = \"c\"\nbase_url = \"https://x.example/c/\"\n\n\
         [store]\nurl = \"s3://rsagg-data/c\"\nopen_timeout = \"5s\"\n\n\
         [[upstream]]\nname = \"one\"\nurl = \"https://u.example/\"\n",
    )
    .unwrap();
    let path = p.to_str().unwrap();
    for args in [
        vec!["run", path, "--once"],
        vec!["audit", path],
        vec!["gc", path],
    ] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rsagg"));
        for (k, _) in std::env::vars() {
            if k.starts_with("AWS_") {
                cmd.env_remove(k);
            }
        }
        let out = cmd
            .args(&args)
            // Loopback only, and never the instance-metadata service, whatever host runs this.
            .env("AWS_ENDPOINT", "http://127.0.0.1:9")
            .env("AWS_ALLOW_HTTP", "true")
            .env("RSAGG_S3_INSTANCE_METADATA", "0")
            .env("RSAGG_LOG", "off")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("no S3 credentials"), "{args:?}: {err}");
        assert!(err.contains("AWS_ACCESS_KEY_ID"), "{args:?}: {err}");
    }
}
