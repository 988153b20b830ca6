//! Shared by the lab's tests: running `wirefold lab …` in process, and hand-built WARCs.
#![allow(dead_code)] // each test binary uses a different part of this module
#![allow(
    clippy::expect_used,
    reason = "test support: a failed expectation fails the test"
)]

use clap::Parser;

#[derive(Parser)]
pub struct Lab {
    #[command(subcommand)]
    pub command: wirefold_lab::LabCommand,
}

/// Runs `wirefold lab ARGS` in process and returns what it printed.
pub fn lab(args: &[&str]) -> Result<String, wirefold_lab::LabError> {
    let mut argv = vec!["lab"];
    argv.extend_from_slice(args);
    let command = Lab::try_parse_from(argv).expect("valid arguments").command;
    let mut out = Vec::new();
    wirefold_lab::run_to(command, &mut out)?;
    Ok(String::from_utf8(out).unwrap())
}

/// A WARC record with `fields` (Content-Length added) and `block`.
fn record(fields: &[(&str, &str)], block: &[u8]) -> Vec<u8> {
    let mut out = b"WARC/1.1\r\n".to_vec();
    for (name, value) in fields {
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", block.len()).as_bytes());
    out.extend_from_slice(block);
    out.extend_from_slice(b"\r\n\r\n");
    out
}

fn chunked(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in body.chunks(7) {
        out.extend_from_slice(format!("{:X}\r\n", chunk.len()).as_bytes());
        out.extend_from_slice(chunk);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

pub const PAGE: &[u8] = b"<html><body>a page that a crawler saw twice</body></html>";

/// A response (chunked and gzip-coded on the wire, its request written after it), an
/// identical-payload revisit of it, and a server-not-modified revisit.
pub fn revisit_warc() -> Vec<u8> {
    let url = "http://example.com/page";
    let gz = codec::compress(wirefold_http::ContentCoding::Gzip, 6, PAGE);
    let mut block = b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    block.extend_from_slice(&chunked(&gz));
    let mut out = record(&[("WARC-Type", "warcinfo")], b"software: hand\r\n");
    out.extend(record(
        &[
            ("WARC-Type", "response"),
            ("WARC-Record-ID", "<urn:uuid:r1>"),
            ("WARC-Target-URI", url),
            ("WARC-Date", "2024-01-01T00:00:00Z"),
        ],
        &block,
    ));
    out.extend(record(
        &[
            ("WARC-Type", "request"),
            ("WARC-Record-ID", "<urn:uuid:q1>"),
            ("WARC-Concurrent-To", "<urn:uuid:r1>"),
            ("WARC-Target-URI", url),
        ],
        b"GET /page HTTP/1.1\r\nHost: example.com\r\n\r\n",
    ));
    out.extend(record(
        &[
            ("WARC-Type", "revisit"),
            ("WARC-Target-URI", url),
            (
                "WARC-Profile",
                "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest",
            ),
            ("WARC-Refers-To-Target-URI", url),
        ],
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n",
    ));
    out.extend(record(
        &[
            ("WARC-Type", "revisit"),
            ("WARC-Target-URI", url),
            (
                "WARC-Profile",
                "http://netpreserve.org/warc/1.1/revisit/server-not-modified",
            ),
        ],
        b"",
    ));
    out
}
