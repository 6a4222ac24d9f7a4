//! `rsagg-bench scale --quick`, as CI runs it: a small collection, its baseline, one round
//! of updates, creations and deletions, and a no-change run, each a fresh `rsagg run --once`
//! on a `file://` store. The bench itself checks what each run reports (created, updated,
//! deleted, failed); this test checks that it finishes and prints every row with the store
//! requests rsagg counted. Times are printed, never asserted.

use std::process::Command;

#[test]
fn quick_scale_run_reports_every_run_with_its_store_requests() {
    quick(&["--upstream", "files", "--server", "builtin"]);
}

/// The generated upstream (issue 24: documents and bodies computed from the path, no file
/// per resource) gives the same counts.
#[test]
fn quick_scale_run_on_a_generated_upstream() {
    quick(&["--upstream", "generated"]);
}

fn quick(upstream: &[&str]) {
    let rsagg = rsagg_e2e::rsagg_bin().expect("the rsagg binary");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rsagg-bench"))
        .args(["scale", "--quick"])
        .args(upstream)
        .arg("--rsagg")
        .arg(&rsagg)
        .arg("--dir")
        .arg(dir.path())
        .output()
        .expect("running rsagg-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for run in ["baseline", "incremental 1", "no change", "list rebuild"] {
        let row = stdout
            .lines()
            .find(|l| l.starts_with("file") && l.contains(run))
            .unwrap_or_else(|| panic!("no row for {run}:\n{stdout}"));
        // The PUT column: every run writes at least its stats object.
        let cols: Vec<&str> = row.split('|').collect();
        assert_eq!(cols.len(), 3, "{row}");
        let puts: u64 = cols[2].split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(puts > 0, "{row}");
    }
    assert!(
        stdout.contains("bytes stored per byte harvested"),
        "{stdout}"
    );
    // The Resource List on the interval, once due, is rebuilt whole (issue 46).
    assert!(
        stdout.contains("list rebuild: ") && stdout.contains("parts and the index written"),
        "{stdout}"
    );
}
