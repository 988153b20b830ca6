//! Helpers shared by the codec integration tests.
#![allow(dead_code)] // each test binary uses its own subset
#![allow(
    clippy::expect_used,
    reason = "test support: a failed expectation fails the test"
)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use wirefold_http::ContentCoding;

pub const CODINGS: [ContentCoding; 4] = ContentCoding::ALL;

/// The shared corpus (../shared/corpus beside the repository).
pub fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus")
}

/// A real HTML page no one on the team wrote.
pub fn corpus_html() -> Vec<u8> {
    let path = corpus_dir().join("html/w3c__manifest/index-html/001.html");
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Runs `program args` with `input` on stdin and returns stdout, failing on a non-zero exit.
pub fn filter(program: &str, args: &[&str], input: &[u8]) -> Vec<u8> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {program}: {e}"));
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_vec();
    // Writing from another thread: the child may fill stdout before reading all of stdin.
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("waiting for child");
    writer
        .join()
        .expect("stdin writer")
        .expect("writing child stdin");
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
