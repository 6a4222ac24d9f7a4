//! The README's quick start: the demo (`scripts/demo.sh`, its sample upstream
//! `scripts/demo_upstream.py`) and the operator commands it prints, run as printed, and what
//! the README says before anything else (its two commands, what they take the first time,
//! the minimum Rust version, links that resolve).
//!
//! These run the real scripts with `bash` and `python3` (both needed by the README's two
//! commands anyway) and the `rsagg` binary cargo built for this test: the demo's own
//! `cargo build --release` is answered by a stand-in `cargo` on `PATH` that builds nothing,
//! with `$CARGO_TARGET_DIR/release/rsagg` a link to that binary.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Kills the processes (by PID) a failing test would leave behind.
struct Reap(Vec<u32>);

impl Drop for Reap {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// `GET path HTTP/1.0` to `addr` (`HOST:PORT`): the status code, the head and the body.
fn get(addr: &str, path: &str) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let end = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(&all)));
    let head = String::from_utf8_lossy(&all[..end]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, head, all[end + 4..].to_vec())
}

/// Starts `python3 scripts/demo_upstream.py DIR ARGS` and waits (10 s at most) for its
/// `listening http://HOST:PORT` line; `None` when it exits (or closes stdout) first.
fn start_upstream(dir: &Path, args: &[&str]) -> (Child, Option<String>) {
    let mut child = Command::new("python3")
        .arg(root().join("scripts/demo_upstream.py"))
        .arg(dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 scripts/demo_upstream.py");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let _ = tx.send(lines.next().and_then(Result::ok));
        for _ in lines {}
    });
    let line = rx.recv_timeout(Duration::from_secs(10)).ok().flatten();
    let addr = line.and_then(|l| l.strip_prefix("listening http://").map(str::to_owned));
    (child, addr)
}

/// The demo prints a command that starts the sample upstream again on the port it had. The
/// connections the first one closed are in TIME_WAIT for a minute, and a server binding
/// without SO_REUSEADDR fails then with `Address already in use`.
#[test]
fn the_sample_upstream_starts_again_on_its_port_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (mut first, addr) = start_upstream(dir.path(), &[]);
    let _reap = Reap(vec![first.id()]);
    let addr = addr.expect("the sample upstream did not start");
    // The server closes each connection after its answer (HTTP/1.0): its side of the
    // connection is the one left in TIME_WAIT.
    let (status, _, body) = get(&addr, "/.well-known/resourcesync");
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains("capability=\"description\""));
    first.kill().unwrap();
    first.wait().unwrap();

    let port = addr.rsplit(':').next().unwrap();
    let (mut again, addr_again) = start_upstream(dir.path(), &["--port", port]);
    let _reap_again = Reap(vec![again.id()]);
    let Some(addr_again) = addr_again else {
        let _ = again.kill();
        let mut err = String::new();
        again
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        panic!("started again on port {port}, it did not listen: {err}");
    };
    assert_eq!(addr_again, addr);
    let (status, _, _) = get(&addr, "/res/1.txt");
    assert_eq!(status, 200);
    again.kill().unwrap();
    again.wait().unwrap();
}

/// The PIDs of the processes whose parent is `parent` (Linux `/proc`).
fn children(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may hold spaces, so read after its `)`.
        let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
        if after.split_whitespace().nth(1) == Some(&parent.to_string()) {
            out.push(pid);
        }
    }
    out
}

/// Whether `pid` still runs (a zombie does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
        after.split_whitespace().next() != Some("Z")
    })
}

/// A shell the printed commands are typed into, one line at a time.
struct Shell {
    child: Child,
    lines: mpsc::Receiver<String>,
    transcript: String,
}

impl Shell {
    fn start() -> Shell {
        let mut child = Command::new("bash")
            .current_dir(std::env::temp_dir())
            .env_remove("RSAGG_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("bash");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Shell {
            child,
            lines,
            transcript: String::new(),
        }
    }

    fn type_line(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Reads stdout until a line `pred` accepts (120 s at most); the lines before it go to
    /// the transcript.
    fn until(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if pred(&l) => return l,
                Ok(l) => {
                    self.transcript.push_str(&l);
                    self.transcript.push('\n');
                }
                Err(_) => panic!("no {what} within 120 s; so far:\n{}", self.transcript),
            }
        }
    }

    /// The exit status of the command typed last.
    fn status(&mut self) -> i32 {
        self.type_line("echo \"__status $?\"");
        let l = self.until("exit status", |l| l.starts_with("__status "));
        l["__status ".len()..].parse().unwrap()
    }
}

/// `bash scripts/demo.sh` with `DEMO_EXIT=1`, then every operator command it printed, typed
/// as printed into one shell in the order given: the sample upstream started again on its
/// port, `audit`, `run --dry-run`, `quarantine list`, `gc`, `serve` (stopped with SIGINT,
/// as Ctrl-C does, after its collection's base URL and Capability List answered), and the
/// `kill` of the sample upstream. Each must exit 0, and nothing the demo printed may hold a
/// `/./` (its directory is given as `…/./demo`).
#[test]
fn the_demo_prints_operator_commands_that_work_as_printed() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let cargo = bin.join("cargo");
    std::fs::write(
        &cargo,
        "#!/bin/sh\n# the test's stand-in: nothing to build\nexit 0\n",
    )
    .unwrap();
    let chmod = Command::new("chmod")
        .arg("755")
        .arg(&cargo)
        .status()
        .unwrap();
    assert!(chmod.success());
    let target = tmp.path().join("target");
    std::fs::create_dir_all(target.join("release")).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_rsagg"), target.join("release/rsagg")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let demo_dir = format!("{}/./demo", tmp.path().display());
    let log = tmp.path().join("demo.out");

    let mut demo = Command::new("bash")
        .arg(root().join("scripts/demo.sh"))
        .env("DEMO_EXIT", "1")
        .env("DEMO_DIR", &demo_dir)
        .env("RSAGG_CACHE", tmp.path().join("cache"))
        .env("CARGO_TARGET_DIR", &target)
        .env("PATH", &path)
        .env_remove("RSAGG_LOG")
        .env_remove("RSAGG_DEMO_PORT")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let _reap_demo = Reap(vec![demo.id()]);
    let deadline = Instant::now() + Duration::from_secs(600);
    let status = loop {
        if let Some(s) = demo.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the demo ran 600 s");
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "demo: {status}\n{out}");
    assert!(!out.contains("/./"), "a path with /./ printed:\n{out}");
    let plain_dir = tmp.path().join("demo");
    assert!(
        out.contains(&format!("{}/store/", plain_dir.display())),
        "{out}"
    );
    // The collection's base URL answered while the demo served.
    assert!(
        out.lines()
            .any(|l| l.contains("/demo/ -> 200 text/html; charset=utf-8")),
        "{out}"
    );

    let commands: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("Operator commands on the demo's store"))
        .filter_map(|l| l.strip_prefix("  "))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let words: Vec<&str> = commands
        .iter()
        .map(|c| {
            let mut w = c.split_whitespace();
            match w.next() {
                Some("python3") => "upstream",
                Some("set") => "env",
                Some("kill") => "kill",
                _ => w.next().unwrap_or(""),
            }
        })
        .collect();
    assert_eq!(
        words,
        [
            "env",
            "upstream",
            "audit",
            "run",
            "quarantine",
            "gc",
            "serve",
            "kill"
        ],
        "{commands:#?}"
    );

    let mut shell = Shell::start();
    let mut reap = Reap(vec![shell.child.id()]);
    let mut upstream_pid = None;
    for (command, word) in commands.iter().zip(&words) {
        shell.type_line(command);
        if *word == "serve" {
            let line = shell.until("`listening` line of serve", |l| l.starts_with("listening "));
            let addr = line["listening http://".len()..].to_owned();
            let (code, head, body) = get(&addr, "/demo/");
            assert_eq!(code, 200, "{head}");
            assert!(head.contains("rel=\"resourcesync\""), "{head}");
            assert!(
                String::from_utf8_lossy(&body).contains("/demo/capabilitylist.xml"),
                "{}",
                String::from_utf8_lossy(&body)
            );
            let (code, head, _) = get(&addr, "/demo/capabilitylist.xml");
            assert_eq!(code, 200, "{head}");
            validate_whole_demo(&addr);
            let serve: Vec<u32> = children(shell.child.id())
                .into_iter()
                .filter(|p| {
                    std::fs::read(format!("/proc/{p}/cmdline"))
                        .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == b"serve"))
                })
                .collect();
            assert_eq!(serve.len(), 1, "one serve process: {serve:?}");
            reap.0.push(serve[0]);
            let interrupted = Command::new("kill")
                .args(["-INT", &serve[0].to_string()])
                .status()
                .unwrap();
            assert!(interrupted.success());
        }
        let status = shell.status();
        assert_eq!(
            status, 0,
            "`{command}` exited {status}; output:\n{}",
            shell.transcript
        );
        if *word == "upstream" {
            shell.type_line("echo \"__pid $upstream\"");
            let l = shell.until("the upstream's PID", |l| l.starts_with("__pid "));
            let pid: u32 = l["__pid ".len()..].parse().unwrap();
            reap.0.push(pid);
            upstream_pid = Some(pid);
        }
    }
    shell.type_line("exit");
    let status = shell.child.wait().unwrap();
    assert!(status.success(), "{}", shell.transcript);
    let pid = upstream_pid.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(pid) {
        assert!(Instant::now() < deadline, "the sample upstream still runs");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The demo's Source walked whole by `rsagg validate --source … --strict --json`, as rsagg
/// judges its own output: every document, part, package and manifest without an error or a
/// warning.
fn validate_whole_demo(addr: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_rsagg"))
        .args(["validate", "--source"])
        .arg(format!("http://{addr}/.well-known/resourcesync"))
        .args(["--strict", "--json", "--allow-private"])
        .output()
        .expect("run rsagg validate --source");
    let text = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}\n{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let summary = &v["summary"];
    assert_eq!(summary["errors"], 0, "{text}");
    assert_eq!(summary["warnings"], 0, "{text}");
    assert_eq!(summary["truncated"], serde_json::Value::Null, "{text}");
    for kind in [
        "Source Description",
        "Capability List",
        "Resource List",
        "Resource Dump",
    ] {
        assert!(
            summary["documents"][kind].as_u64() >= Some(1),
            "no {kind}: {text}"
        );
    }
}

/// GitHub's anchor for a Markdown heading: lower case, punctuation but `-` and `_` dropped,
/// spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown document: its headings' and its `<a id="…">`s.
fn anchors(markdown: &str) -> HashSet<String> {
    let mut fenced = false;
    let mut out = HashSet::new();
    for l in markdown.lines() {
        if l.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && l.starts_with('#') {
            out.insert(slug(l.trim_start_matches('#')));
        }
    }
    for (i, _) in markdown.match_indices("<a id=\"") {
        let rest = &markdown[i + "<a id=\"".len()..];
        if let Some(end) = rest.find('"') {
            out.insert(rest[..end].to_owned());
        }
    }
    out
}

/// The README is a quick start: its first block is exactly the two commands, followed by
/// what each takes the first time and the minimum Rust version (the workspace's
/// `rust-version`); no dated figures or issue numbers (those are the benchmark docs' and
/// git's); the figures are linked; every relative link resolves, anchors included.
#[test]
fn the_readme_is_a_quick_start() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let block: Vec<&str> = readme
        .lines()
        .skip_while(|l| !l.starts_with("```sh"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .collect();
    let commands: Vec<&str> = block
        .iter()
        .map(|l| l.split('#').next().unwrap().trim())
        .collect();
    assert_eq!(commands, ["bash scripts/demo.sh", "bash scripts/test.sh"]);

    let cargo = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let msrv = cargo
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("the workspace's rust-version")
        .trim_matches('"');
    // What comes before the first section: what the two commands take.
    let intro = &readme[..readme.find("\n## ").expect("sections")];
    assert!(
        intro.contains(&format!("Rust {msrv}")),
        "the minimum Rust version {msrv} is not stated before the first section"
    );
    for (what, word) in [("demo", "demo"), ("tests", "test")] {
        assert!(
            intro
                .split(". ")
                .flat_map(|s| s.split(';'))
                .any(|s| s.contains(word) && s.contains("minutes")),
            "the README does not say how many minutes the first {what} take(s)"
        );
    }

    for (n, l) in readme.lines().enumerate() {
        let dated = l.as_bytes().windows(10).any(|w| {
            w.iter().enumerate().all(|(i, b)| match i {
                4 | 7 => *b == b'-',
                _ => b.is_ascii_digit(),
            })
        });
        assert!(!dated, "README.md:{}: a dated figure: {l}", n + 1);
        let lower = l.to_lowercase();
        assert!(
            !lower.contains("issue ") && !lower.contains("issue-"),
            "README.md:{}: an issue reference: {l}",
            n + 1
        );
    }
    assert!(readme.contains("](crates/bench/README.md"));

    let mut checked = 0;
    for (i, _) in readme.match_indices("](") {
        let rest = &readme[i + 2..];
        let target = &rest[..rest.find(')').unwrap()];
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
        let path = if file.is_empty() {
            root.join("README.md")
        } else {
            root.join(file)
        };
        assert!(path.exists(), "README.md links to {target}: no such file");
        if !anchor.is_empty() {
            let doc = std::fs::read_to_string(&path).unwrap();
            assert!(
                anchors(&doc).contains(anchor),
                "README.md links to {target}: no such heading"
            );
        }
        checked += 1;
    }
    assert!(checked > 5, "only {checked} links");
}
