//! `rsagg validate` against `docs/contract.md`: exit codes, JSON shape, human output,
//! and the verdict on every specification example in both modes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn rsagg(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rsagg"))
        .args(args)
        .output()
        .expect("run rsagg")
}

fn fixture(rel: &str) -> PathBuf {
    Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"))
        .join("../../tests/fixtures")
        .join(rel)
}

/// Expected verdicts: (file, valid when lenient, valid when strict, why strict disagrees).
/// Every file is valid in lenient mode; strict mode, meant for rsagg's own output, rejects
/// the spec examples that break a rule of the spec itself.
const VERDICTS: &[(&str, bool, bool, &str)] = &[
    (
        "spec-1.1/resourcesync_ex_1.xml",
        true,
        false,
        "walkthrough example (1.3) omits the mandatory `up` link of a Resource List (10.1)",
    ),
    (
        "spec-1.1/resourcesync_ex_2.xml",
        true,
        false,
        "walkthrough example (1.3) omits the mandatory `up` link of a Resource List (10.1)",
    ),
    (
        "spec-1.1/resourcesync_ex_3.xml",
        true,
        false,
        "walkthrough example (1.3) omits the mandatory `up` link of a Change List (12.1)",
    ),
    (
        "spec-1.1/resourcesync_ex_4.xml",
        true,
        false,
        "walkthrough example (1.3) omits the mandatory `up` link of a Resource Dump (11.1)",
    ),
    (
        "spec-1.1/resourcesync_ex_5.xml",
        true,
        false,
        "walkthrough example (1.3) omits the mandatory `up` link of a Resource Dump Manifest (11.2)",
    ),
    ("spec-1.1/resourcesync_ex_6.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_7.xml", true, true, ""),
    (
        "spec-1.1/resourcesync_ex_8.xml",
        true,
        false,
        "walkthrough example (1.3) omits the mandatory `up` link of a Resource List Index (10.2)",
    ),
    ("spec-1.1/resourcesync_ex_12.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_13.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_14.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_15.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_16.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_17.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_18.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_19.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_20.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_21.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_22.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_23.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_24.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_25.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_26.xml", true, true, ""),
    (
        "spec-1.1/resourcesync_ex_27.xml",
        true,
        false,
        "its sha-256 values are placeholders, not 64 hex digits (7)",
    ),
    ("spec-1.1/resourcesync_ex_28.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_29.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_30.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_31.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_32.xml", true, true, ""),
    ("spec-1.1/resourcesync_ex_33.xml", true, true, ""),
    ("notification-1.0.1/cn_ex_1.xml", true, true, ""),
    ("notification-1.0.1/cn_ex_7.xml", true, true, ""),
];

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn every_fixture_gets_its_verdict() {
    // The table covers every fixture file.
    let mut listed = 0;
    for dir in ["spec-1.1", "notification-1.0.1"] {
        listed += std::fs::read_dir(fixture(dir))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "xml")
            })
            .count();
    }
    assert_eq!(listed, VERDICTS.len());
    for &(file, lenient_ok, strict_ok, why) in VERDICTS {
        let path = fixture(file);
        let p = path.to_str().unwrap();
        let out = rsagg(&["validate", "--json", p]);
        assert_eq!(
            out.status.code(),
            Some(if lenient_ok { 0 } else { 1 }),
            "{file} lenient"
        );
        assert_eq!(json_of(&out)["valid"], Value::Bool(lenient_ok), "{file}");
        let out = rsagg(&["validate", "--strict", "--json", p]);
        assert_eq!(
            out.status.code(),
            Some(if strict_ok { 0 } else { 1 }),
            "{file} strict"
        );
        let report = json_of(&out);
        if !strict_ok {
            // The strict report names the rule the spec's example breaks, with its section.
            let problems = report["problems"].as_array().unwrap();
            let errors: Vec<_> = problems
                .iter()
                .filter(|p| p["severity"] == "error")
                .collect();
            assert!(!errors.is_empty(), "{file}");
            let expected_code = if why.contains("`up`") {
                "up-link-missing"
            } else {
                "hash-syntax"
            };
            for e in errors {
                assert_eq!(e["code"], expected_code, "{file}: {e}");
                let section = e["section"].as_str().unwrap();
                assert!(
                    why.contains(&format!("({section})")),
                    "{file}: section {section} vs reason {why}"
                );
            }
        }
    }
}

#[test]
fn json_output_has_the_contract_shape() {
    let p = fixture("spec-1.1/resourcesync_ex_27.xml");
    let out = rsagg(&["validate", "--strict", "--json", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let v = json_of(&out);
    assert_eq!(v["valid"], false);
    assert_eq!(v["document"]["root"], "urlset");
    assert_eq!(v["document"]["capability"], "changelist");
    assert_eq!(v["document"]["entries"], 2);
    let first = &v["problems"][0];
    for key in ["severity", "line", "column", "section", "code", "message"] {
        assert!(!first[key].is_null(), "missing {key}: {first}");
    }
    assert_eq!(first["line"], 10);
    assert_eq!(first["column"], 7);
    assert_eq!(first["section"], "7");
    assert_eq!(first["code"], "hash-syntax");
    // Lenient: the same document is valid, the problems are warnings.
    let out = rsagg(&["validate", "--json", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let v = json_of(&out);
    assert_eq!(v["valid"], true);
    assert!(
        v["problems"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["severity"] == "warning")
    );
}

#[test]
fn human_output_lists_each_problem() {
    let p = fixture("spec-1.1/resourcesync_ex_27.xml");
    let out = rsagg(&["validate", "--strict", p.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(
        lines[0].ends_with("resourcesync_ex_27.xml:10:7: error[hash-syntax]: sha-256 digest `f4OxZX_x_DFGFDgghgdfb6rtSx-iosjf6735432nklj` is not 64 hexadecimal digits (section 7)"),
        "{}",
        lines[0]
    );
    assert!(
        lines[4].contains("INVALID Change List, 2 entries, 4 errors, 0 warnings (strict mode)"),
        "{}",
        lines[4]
    );
}

#[test]
fn malformed_xml_is_invalid_with_a_position() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.xml");
    std::fs::write(&f, "<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\">\n<url><loc>a</url>\n</urlset>").unwrap();
    let out = rsagg(&["validate", "--json", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let v = json_of(&out);
    assert_eq!(v["valid"], false);
    let problems = v["problems"].as_array().unwrap();
    let syntax = problems
        .iter()
        .find(|p| p["code"] == "xml-syntax")
        .expect("xml-syntax problem");
    assert_eq!(syntax["severity"], "error");
    assert_eq!(syntax["line"], 2);
}

#[test]
fn usage_and_io_errors_exit_2() {
    let out = rsagg(&["validate", "/nonexistent/file.xml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/file.xml"));
    assert_eq!(rsagg(&["validate"]).status.code(), Some(2));
    assert_eq!(rsagg(&["validate", "--bogus", "x"]).status.code(), Some(2));
    // Nothing listens on the discard port on loopback: connection refused.
    assert_eq!(
        rsagg(&["validate", "http://127.0.0.1:9/none.xml"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn reads_stdin_and_gzip() {
    use std::io::Write;
    let xml = std::fs::read(fixture("spec-1.1/resourcesync_ex_14.xml")).unwrap();
    let gz = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(async {
            use tokio::io::AsyncWriteExt;
            let mut enc = async_compression::tokio::write::GzipEncoder::new(Vec::new());
            enc.write_all(&xml).await.unwrap();
            enc.shutdown().await.unwrap();
            enc.into_inner()
        });
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("resourcelist.xml.gz");
    std::fs::write(&f, &gz).unwrap();
    let out = rsagg(&["validate", "--strict", "--json", f.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(json_of(&out)["document"]["entries"], 2);
    let mut child = Command::new(env!("CARGO_BIN_EXE_rsagg"))
        .args(["validate", "--json", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&xml).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json_of(&out)["document"]["capability"], "resourcelist");
}

/// A real HTTP server on loopback serving one fixture.
#[test]
fn validates_a_url() {
    use std::io::{Read, Write};
    let body = std::fs::read(fixture("spec-1.1/resourcesync_ex_20.xml")).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut req = [0u8; 4096];
        let _ = s.read(&mut req).unwrap();
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(&body).unwrap();
        String::from_utf8_lossy(&req).into_owned()
    });
    let url = format!("http://{addr}/changelist.xml");
    let out = rsagg(&["validate", "--json", "--strict", &url]);
    let request = server.join().unwrap();
    assert!(
        request.starts_with("GET /changelist.xml HTTP/1.1"),
        "{request}"
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json_of(&out);
    assert_eq!(v["document"]["root"], "sitemapindex");
    assert_eq!(v["document"]["entries"], 3);
}

/// `--source`: a loopback Source without `--allow-private` is refused before anything is
/// read (exit 2, naming the flag); the walk's options need `--source` (usage, exit 2).
#[test]
fn source_walks_refuse_private_addresses_and_need_source() {
    let out = rsagg(&[
        "validate",
        "--source",
        "http://127.0.0.1:9/.well-known/resourcesync",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--allow-private"), "{err}");
    assert!(out.stdout.is_empty());
    let f = fixture("spec-1.1/resourcesync_ex_1.xml");
    let out = rsagg(&["validate", "--sample", "3", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = rsagg(&["validate"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
