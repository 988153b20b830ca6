//! Running the `wirefold` binary in tests.
#![allow(dead_code)] // each test binary uses a different part of this module
#![allow(
    clippy::expect_used,
    reason = "test support: a failed expectation fails the test"
)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

pub fn wirefold(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wirefold"))
        .args(args)
        .output()
        .expect("wirefold runs")
}

/// Runs `wirefold get ARGS` to the end.
pub fn get(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wirefold"))
        .arg("get")
        .args(args)
        .output()
        .expect("wirefold get runs")
}

/// Starts `wirefold serve ARGS` and returns it with the URL it printed.
pub fn serve(args: &[&str]) -> (Started, String) {
    let mut full = vec!["serve"];
    full.extend_from_slice(args);
    let started = start(&full, "listening on");
    let url = url_in(&started.first_line);
    (started, url)
}

/// A started `wirefold` process; killed on drop if still running.
pub struct Started {
    pub child: Child,
    /// The first line it printed that contained the marker asked for.
    pub first_line: String,
    /// The lines it printed before that one.
    pub earlier: Vec<String>,
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `wirefold ARGS` and waits for a stdout line containing `marker`.
pub fn start(args: &[&str], marker: &str) -> Started {
    start_logging_to(args, marker, Stdio::null())
}

/// [`start`] with its stderr (the log) sent to `log`.
pub fn start_logging_to(args: &[&str], marker: &str, log: impl Into<Stdio>) -> Started {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wirefold"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("wirefold starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut earlier = Vec::new();
    let first_line = loop {
        match lines.next() {
            Some(Ok(line)) if line.contains(marker) => break line,
            Some(Ok(line)) => earlier.push(line),
            _ => panic!("wirefold printed no line containing {marker:?}: {earlier:?}"),
        }
    };
    // Keep draining stdout so the process never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Started {
        child,
        first_line,
        earlier,
    }
}

/// The first `http://` URL in a line, without a trailing slash or parenthesis.
pub fn url_in(line: &str) -> String {
    line.split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("a URL")
        .trim_end_matches(['/', ')'])
        .to_string()
}

pub fn corpus_file(relative: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/corpus")
        .join(relative);
    std::fs::read(&path).unwrap_or_else(|e| panic!("corpus file {}: {e}", path.display()))
}
