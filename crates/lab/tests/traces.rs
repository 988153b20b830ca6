//! The trace readers on real files from public packages (tests/fixtures/README.md) and
//! on damaged or hand-built WARCs. Expected counts and sizes were taken with independent
//! tools: python's json module on the HAR, warcio 1.8.1 (`warcio index`,
//! `ArchiveIterator.content_stream()`) on the WARCs.

use std::io::Write;
use std::path::{Path, PathBuf};

use wirefold_lab::trace::{self, Exchange, Location, Skipped, TraceLimits};

mod common;
use common::{revisit_warc, PAGE};

const LIMITS: TraceLimits = TraceLimits {
    max_body: 64 << 20,
    max_har: 1 << 30,
};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

const CC_WARC: &str = "CC-MAIN-20140820021334-00006-ip-10-180-136-8.ec2.internal.warc";

fn read(path: &Path) -> (Vec<Exchange>, Vec<Skipped>) {
    let mut exchanges = Vec::new();
    let mut skipped = Vec::new();
    for item in trace::open(path, LIMITS).unwrap() {
        match item {
            Ok(e) => exchanges.push(e),
            Err(s) => skipped.push(s),
        }
    }
    (exchanges, skipped)
}

#[test]
fn har_entries_match_an_independent_json_reading() {
    let (exchanges, skipped) = read(&fixture("http2.github.io.har"));
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(exchanges.len(), 21);
    let statuses: Vec<u16> = exchanges.iter().map(|e| e.status).collect();
    assert_eq!(statuses.iter().filter(|&&s| s == 200).count(), 20);
    assert_eq!(statuses[19], 302);
    // Decoded body sizes (base64 bodies decoded), None where the entry has no text.
    let sizes: Vec<Option<usize>> = exchanges
        .iter()
        .map(|e| e.body.as_ref().map(Vec::len))
        .collect();
    let expected = [
        Some(4606),
        Some(99961),
        Some(290),
        Some(22689),
        Some(84280),
        Some(29110),
        Some(120870),
        Some(14953),
        Some(28057),
        Some(10215),
        Some(43),
        Some(97),
        Some(2188),
        Some(63252),
        Some(0),
        Some(16298),
        Some(45170),
        Some(0),
        Some(43),
        None,
        None,
    ];
    assert_eq!(sizes, expected);
    assert_eq!(exchanges[3].body.as_ref().unwrap()[..4], *b"\x89PNG");
    assert_eq!(
        exchanges
            .iter()
            .filter(|e| e.client.as_deref() == Some("page_1"))
            .count(),
        20
    );
    assert_eq!(exchanges[11].client, None);
    assert_eq!(exchanges[0].url, "https://http2.github.io/");
    assert_eq!(exchanges[0].content_type.as_deref(), Some("text/html"));
    assert_eq!(exchanges[19].method.as_deref(), Some("POST"));
    assert_eq!(
        exchanges[0].time.as_deref(),
        Some("2018-10-20T18:23:35.843Z")
    );
}

/// The four responses of the Common Crawl sample, as warcio decodes them.
fn assert_common_crawl(exchanges: &[Exchange]) {
    let got: Vec<(&str, u16, Option<usize>)> = exchanges
        .iter()
        .map(|e| {
            (
                &e.url[..e.url.len().min(40)],
                e.status,
                e.body.as_ref().map(Vec::len),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("http://0.r.msn.com/?ld=7v7Pf0o6dfvcggjmX", 200, Some(0)),
            ("http://0pointer.de/photos/?gallery=Austr", 200, Some(7204)),
            (
                "http://0pointer.de/photos/?gallery=Thail",
                200,
                Some(222781)
            ),
            // Stored decoded under `Content-Encoding: gzip`; warcio also keeps it as is.
            ("http://0x20.be/Special:WhatLinksHere/Thr", 200, Some(17343)),
        ]
    );
    assert!(exchanges.iter().all(|e| e.method.as_deref() == Some("GET")));
    assert_eq!(exchanges[1].content_type.as_deref(), Some("text/html"));
    assert_eq!(exchanges[1].time.as_deref(), Some("2014-08-21T05:52:58Z"));
    assert!(exchanges[3]
        .body
        .as_ref()
        .unwrap()
        .starts_with(b"<!DOCTYPE html>"));
}

#[test]
fn plain_warc_matches_warcio() {
    let (exchanges, skipped) = read(&fixture(CC_WARC));
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_common_crawl(&exchanges);
}

#[test]
fn gzip_per_record_warc_matches_the_plain_one() {
    let (exchanges, skipped) = read(&fixture(&format!("{CC_WARC}.gz")));
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_common_crawl(&exchanges);
    assert_eq!(exchanges, read(&fixture(CC_WARC)).0);
}

fn copy_with(name: &str, edit: impl FnOnce(&mut Vec<u8>)) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let mut data = std::fs::read(fixture(name)).unwrap();
    edit(&mut data);
    let path = dir.path().join(name);
    std::fs::write(&path, data).unwrap();
    (dir, path)
}

#[test]
fn a_record_with_a_wrong_length_is_reported_at_its_offset_and_the_rest_read() {
    // The second response starts at byte 3675 (`warcio index`); shorten its
    // Content-Length by one (same number of digits, so no offset moves).
    let (_dir, path) = copy_with(CC_WARC, |data| {
        let at = 3675;
        let header = &data[at..at + 400];
        let i = header
            .windows(16)
            .position(|w| w == b"Content-Length: ")
            .unwrap()
            + 16;
        assert_eq!(&header[i..i + 5], b"7387\r");
        data[at + i + 3] = b'6';
    });
    let (exchanges, skipped) = read(&path);
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].at, Location::Byte(3675));
    assert!(
        skipped[0].reason.contains("Content-Length"),
        "{}",
        skipped[0].reason
    );
    let urls: Vec<&str> = exchanges.iter().map(|e| &e.url[..20]).collect();
    assert_eq!(
        urls,
        [
            "http://0.r.msn.com/?",
            "http://0pointer.de/p",
            "http://0x20.be/Speci"
        ]
    );
    assert_eq!(exchanges[1].body.as_ref().unwrap().len(), 222781);
}

#[test]
fn a_corrupt_gzip_member_is_reported_at_its_offset_and_the_rest_read() {
    // The member of the second response starts at byte 2788 and has 2826 bytes.
    let (_dir, path) = copy_with(&format!("{CC_WARC}.gz"), |data| {
        assert_eq!(data[2788..2791], [0x1f, 0x8b, 0x08]);
        for b in &mut data[2788 + 1000..2788 + 1100] {
            *b ^= 0x5a;
        }
    });
    let (exchanges, skipped) = read(&path);
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].at, Location::Byte(2788));
    assert_eq!(exchanges.len(), 3);
    assert_eq!(exchanges[1].body.as_ref().unwrap().len(), 222781);
}

#[test]
fn revisits_chunked_bodies_and_late_requests() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hand.warc");
    std::fs::File::create(&path)
        .unwrap()
        .write_all(&revisit_warc())
        .unwrap();
    let (exchanges, skipped) = read(&path);
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(exchanges.len(), 3);
    assert_eq!(exchanges[0].body.as_deref(), Some(PAGE));
    assert_eq!(exchanges[0].method.as_deref(), Some("GET"));
    assert_eq!(exchanges[0].content_type.as_deref(), Some("text/html"));
    assert_eq!(exchanges[1].status, 200);
    assert_eq!(exchanges[1].body, None);
    assert_eq!(
        exchanges[1].revisit_of.as_deref(),
        Some("http://example.com/page")
    );
    assert_eq!(exchanges[2].status, 304);
    assert_eq!(exchanges[2].revisit_of, None);
}

#[test]
fn unknown_files_are_refused_with_their_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "hello").unwrap();
    let err = trace::open(&path, LIMITS).err().unwrap().to_string();
    assert!(err.contains("notes.txt") && err.contains("HAR"), "{err}");
    let har = dir.path().join("broken.har");
    std::fs::write(&har, "{\"log\": {\"entries\": [}").unwrap();
    let err = trace::open(&har, LIMITS).err().unwrap().to_string();
    assert!(
        err.contains("broken.har") && err.contains("HAR 1.2"),
        "{err}"
    );
}
