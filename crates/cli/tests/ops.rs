//! The read-only operator commands on a store no run has written (contract: they write
//! nothing, not even a `file://` store's directory; `audit` and `quarantine list` say the
//! store holds no collection and exit 2, a dry run plans the first run), and the help of `quarantine` and `run` (exit codes, the summary's words).

use std::path::Path;
use std::process::{Command, Output};

fn rsagg(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rsagg"))
        .args(args)
        .env("RSAGG_LOG", "warn")
        .output()
        .expect("run rsagg")
}

/// A pipeline whose `file://` store is `store` (not created) and whose upstream is a port
/// nobody listens on.
fn pipeline(dir: &Path, store: &Path) -> String {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let toml = dir.join("p.toml");
    std::fs::write(
        &toml,
        format!(
            "[collection]\nname = \"ops\"\nbase_url = \"http://127.0.0.1:8080/ops/\"\n\n\
             [store]\nurl = \"file://{}\"\n\n\
             [[upstream]]\nname = \"up\"\nurl = \"http://{closed}/.well-known/resourcesync\"\n\
             allow_private = true\n\n[fetch]\nretries = 0\n",
            store.display()
        ),
    )
    .unwrap();
    toml.to_string_lossy().into_owned()
}

#[test]
fn read_only_commands_create_nothing_and_an_empty_quarantine_is_json() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store/not/yet");
    let toml = pipeline(dir.path(), &store);

    // Nothing to list from a store no run wrote: said so (exit 2), no empty listing that
    // would read as "nothing quarantined".
    for args in [
        vec!["quarantine", "list", toml.as_str(), "--json"],
        vec!["quarantine", "list", toml.as_str()],
    ] {
        let out = rsagg(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("store holds no rsagg collection (never run?)"),
            "{args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }

    // --dry-run: the upstream cannot be planned (exit 1), the store is read, nothing written.
    let out = rsagg(&["run", &toml, "--dry-run", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a dry-run report");
    assert_eq!(report["never_run"], true, "{report:#}");
    let error = report["upstreams"][0]["errors"][0].as_str().unwrap_or("");
    // And the upstream's error says what happened.
    assert!(error.contains("connection refused"), "{report:#}");
    assert!(
        !error.contains("no ResourceSync Capability List"),
        "{report:#}"
    );

    // The OAI-PMH commands: an upstream that is not OAI-PMH, or none of that name, is a
    // usage error (exit 2) said before the store is touched; so is a never-run store.
    for (args, said) in [
        (
            vec!["oai", "windows", toml.as_str()],
            "store holds no rsagg collection",
        ),
        (
            vec!["oai", "windows", toml.as_str(), "--upstream", "nope"],
            "no upstream `nope`",
        ),
        (
            vec![
                "oai",
                "refetch",
                toml.as_str(),
                "--upstream",
                "up",
                "oai:x:1",
            ],
            "is not an OAI-PMH upstream",
        ),
        (
            vec![
                "oai",
                "reharvest",
                toml.as_str(),
                "--upstream",
                "up",
                "--from",
                "2024-13-01",
            ],
            "is not a datestamp",
        ),
    ] {
        let out = rsagg(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }

    let out = rsagg(&["audit", &toml, "--json"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !dir.path().join("store").exists(),
        "a read-only command created the store's directory"
    );
}

#[test]
fn quarantine_help_lists_exit_codes_and_run_help_explains_the_summary() {
    let out = rsagg(&["quarantine", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Exit status:"), "{help}");
    assert!(help.contains("3 fenced out"), "{help}");
    let out = rsagg(&["run", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for word in [
        "unchanged ",
        "replayed ",
        "gone ",
        "quarantined ",
        "superseded ",
    ] {
        assert!(help.contains(&format!("\n  {word}")), "{word}: {help}");
    }
}

#[test]
fn a_first_run_whose_only_upstream_failed_publishes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let toml = pipeline(dir.path(), &store);
    let out = Command::new(env!("CARGO_BIN_EXE_rsagg"))
        .args(["run", &toml, "--once", "--json"])
        .env_remove("RSAGG_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a run report");
    assert_eq!(report["upstreams"][0]["verdict"], "failed", "{report:#}");
    let error = report["upstreams"][0]["error"].as_str().unwrap_or("");
    assert!(error.contains("connection refused"), "{error}");
    // Not an empty collection that Destinations would take for the Source's state.
    assert_eq!(report["publish"], serde_json::Value::Null, "{report:#}");
    for doc in [
        "capabilitylist.xml",
        "resourcelist.xml",
        "sourcedescription.xml",
    ] {
        assert!(!store.join(doc).exists(), "{doc} was published");
    }
    assert!(stderr.contains("not publishing"), "{stderr}");
    // A local store answers at once: no "waiting for the store" line (the default log).
    assert!(!stderr.contains("waiting for the store"), "{stderr}");
}
