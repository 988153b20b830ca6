//! `wirefold lab series-origin` on loopback, fetched with curl: the version sequence,
//! HEAD, the delay (a lower bound only), compression negotiation and 304.
//! Skipped, saying so, when curl is missing.
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

use std::path::{Path, PathBuf};
use std::process::Command;

use wirefold_testbed::series_origin::{SeriesOrigin, SeriesOriginArgs};

/// A series of `n` versions in `<root>/owner__repo/page-html/NNN.html`, each different
/// and long enough that compression pays.
fn series(root: &Path, n: usize) -> (PathBuf, Vec<Vec<u8>>) {
    let dir = root.join("owner__repo/page-html");
    std::fs::create_dir_all(&dir).unwrap();
    let versions: Vec<Vec<u8>> = (1..=n)
        .map(|v| {
            let rows: String = (0..200)
                .map(|row| {
                    format!(
                        "<tr><td>row {row}</td><td>edited in version {}</td></tr>\n",
                        v * (row % 7)
                    )
                })
                .collect();
            format!("<!doctype html><title>version {v}</title><table>\n{rows}</table>\n")
                .into_bytes()
        })
        .collect();
    for (i, body) in versions.iter().enumerate() {
        std::fs::write(dir.join(format!("{:03}.html", i + 1)), body).unwrap();
    }
    std::fs::write(dir.join("MANIFEST.tsv"), "not a version\n").unwrap();
    (dir, versions)
}

fn start(dir: &Path, delay_ms: u64) -> SeriesOrigin {
    SeriesOrigin::start(&SeriesOriginArgs {
        listen: "127.0.0.1:0".parse().unwrap(),
        delay_ms,
        versions: 10,
        series: vec![dir.to_path_buf()],
    })
    .expect("origin starts")
}

fn have_curl() -> bool {
    let ok = Command::new("curl")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED: curl is not installed; these tests fetch with it");
    }
    ok
}

struct Fetched {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    seconds: f64,
}

impl Fetched {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One curl request; `args` come before the URL. The body is as sent (not decoded).
fn curl(url: &str, args: &[&str]) -> Fetched {
    let tmp = tempfile::tempdir().unwrap();
    let (head, body) = (tmp.path().join("head"), tmp.path().join("body"));
    let out = Command::new("curl")
        .args(["-s", "-S", "-D"])
        .arg(&head)
        .arg("-o")
        .arg(&body)
        .args(["-w", "%{http_code} %{time_total}"])
        .args(args)
        .arg(url)
        .output()
        .expect("run curl");
    assert!(
        out.status.success(),
        "curl {args:?} {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = String::from_utf8(out.stdout).unwrap();
    let (status, seconds) = written.split_once(' ').unwrap();
    let headers = std::fs::read_to_string(&head)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    Fetched {
        status: status.parse().unwrap(),
        headers,
        body: std::fs::read(&body).unwrap_or_default(),
        seconds: seconds.parse().unwrap(),
    }
}

#[test]
fn each_get_returns_the_next_of_ten_evenly_spaced_versions() {
    if !have_curl() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (dir, versions) = series(tmp.path(), 12);
    let origin = start(&dir, 0);
    let urls = origin.urls();
    assert_eq!(
        urls,
        [format!("http://{}/owner__repo/page-html/", origin.addr())]
    );
    let url = &urls[0];

    // 12 versions: ten evenly spaced, first and last included; then the last again.
    let expected = [1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 12];
    for (i, &number) in expected.iter().enumerate() {
        // HEAD names what the next GET returns, and does not advance.
        let head = curl(url, &["-I"]);
        let got = curl(url, &[]);
        assert_eq!(got.status, 200, "GET #{}", i + 1);
        assert_eq!(
            got.body,
            versions[number - 1],
            "GET #{} should be version {number}",
            i + 1
        );
        assert_eq!(
            head.header("etag"),
            got.header("etag"),
            "HEAD before GET #{}",
            i + 1
        );
        assert_eq!(
            got.header("content-encoding"),
            None,
            "no Accept-Encoding: identity"
        );
    }
    assert_eq!(curl(&url.replace("page-html", "other"), &[]).status, 404);
    assert_eq!(curl(url, &["-X", "POST"]).status, 405);
}

#[test]
fn negotiates_br_then_gzip_then_identity() {
    if !have_curl() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (dir, versions) = series(tmp.path(), 3);
    let origin = start(&dir, 0);
    let url = &origin.urls()[0];
    let cases = [
        (
            "gzip, deflate, br, zstd",
            Some(wirefold_http::ContentCoding::Br),
        ),
        ("gzip", Some(wirefold_http::ContentCoding::Gzip)),
        ("identity", None),
    ];
    let mut etags = Vec::new();
    for (i, (accept, coding)) in cases.into_iter().enumerate() {
        let got = curl(url, &["-H", &format!("Accept-Encoding: {accept}")]);
        assert_eq!(got.status, 200);
        assert_eq!(
            got.header("content-encoding"),
            coding.map(|c| c.token()),
            "{accept}"
        );
        assert_eq!(
            got.header("content-length"),
            Some(got.body.len().to_string().as_str())
        );
        assert_eq!(got.header("content-type"), Some("text/html; charset=utf-8"));
        assert_eq!(got.header("cache-control"), Some("no-cache"));
        assert_eq!(got.header("vary"), Some("Accept-Encoding"));
        let decoded = match coding {
            Some(c) => {
                assert!(
                    got.body.len() < versions[i].len() / 3,
                    "{accept}: compressed"
                );
                codec::decompress(c, &got.body, 1 << 20).unwrap()
            }
            None => got.body.clone(),
        };
        assert_eq!(decoded, versions[i], "{accept}");
        let etag = got.header("etag").unwrap().to_string();
        assert!(
            etag.starts_with('"') && etag.ends_with('"'),
            "strong: {etag}"
        );
        etags.push(etag);
    }
    etags.dedup();
    assert_eq!(etags.len(), 3, "each version and coding has its own tag");
}

#[test]
fn if_none_match_of_the_version_it_would_serve_gets_304() {
    if !have_curl() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _) = series(tmp.path(), 2);
    let origin = start(&dir, 0);
    let url = &origin.urls()[0];
    let first = curl(url, &["--compressed"]);
    let first_tag = first.header("etag").unwrap().to_string();
    // A revalidation is a GET: it advances, so version 2 comes back in full.
    let second = curl(
        url,
        &["--compressed", "-H", &format!("If-None-Match: {first_tag}")],
    );
    assert_eq!(second.status, 200);
    let last_tag = second.header("etag").unwrap().to_string();
    assert_ne!(first_tag, last_tag);
    // The series stays on its last version, which the client now holds.
    let third = curl(
        url,
        &["--compressed", "-H", &format!("If-None-Match: {last_tag}")],
    );
    assert_eq!(third.status, 304);
    assert!(third.body.is_empty());
    assert_eq!(third.header("etag"), Some(last_tag.as_str()));
}

#[test]
fn every_response_waits_the_delay() {
    if !have_curl() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _) = series(tmp.path(), 2);
    let origin = start(&dir, 300);
    let url = &origin.urls()[0];
    for args in [&["-I"][..], &[]] {
        let got = curl(url, args);
        assert!(
            got.seconds >= 0.3,
            "{args:?} took {} s, less than the 300 ms delay",
            got.seconds
        );
    }
}

#[test]
fn refuses_a_folder_that_is_not_one_series() {
    let tmp = tempfile::tempdir().unwrap();
    series(tmp.path(), 3);
    let err = SeriesOrigin::start(&SeriesOriginArgs {
        listen: "127.0.0.1:0".parse().unwrap(),
        delay_ms: 0,
        versions: 10,
        series: vec![tmp.path().to_path_buf()],
    })
    .err()
    .expect("a corpus root is not a series");
    assert!(err.to_string().contains("subfolder"), "{err}");
}
