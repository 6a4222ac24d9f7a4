//! What the tests of the server commands (`serve`, `hub`) share: starting the real binary on
//! port 0, reading its one `listening` line, and stopping it by PID.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Kills the process if a test fails before stopping it.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts `rsagg ARGS` (which must include `--listen 127.0.0.1:0`) and waits for its
/// `listening http://HOST:PORT` line; returns the process and `HOST:PORT`.
pub fn start(args: &[&str]) -> (Running, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rsagg"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start rsagg");
    let stdout = child.stdout.take().unwrap();
    let running = Running(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let _ = tx.send(lines.next().map(|l| l.unwrap_or_default()));
        // Anything else on stdout is a contract violation; keep reading so it shows.
        for l in lines.map_while(Result::ok) {
            eprintln!("unexpected stdout line: {l}");
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("no `listening` line within 30 s")
        .expect("stdout closed before the `listening` line");
    let addr = line
        .strip_prefix("listening http://")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    assert!(addr.starts_with("127.0.0.1:"), "{line}");
    assert_ne!(addr, "127.0.0.1:0", "the bound port is reported");
    (running, addr)
}

/// Sends SIGTERM to the process by its PID and waits (20 s at most) for it to exit.
pub fn terminate(running: &mut Running) -> ExitStatus {
    let pid = running.0.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(s) = running.0.try_wait().unwrap() {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "still running 20 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
