//! `wirefold get` end to end: the binary against `wirefold serve --root` on real
//! corpus versions — br, then a 226 VCDIFF delta, then a 304 — and its error contract.
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

mod support;

use std::process::Output;

use support::{corpus_file, get, serve};

const PAGE_V1: &str = "html/w3c__manifest/index-html--recent/028.html";
const PAGE_V2: &str = "html/w3c__manifest/index-html--recent/029.html";

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn get_reports_br_then_a_delta_then_a_304() {
    let (v1, v2) = (corpus_file(PAGE_V1), corpus_file(PAGE_V2));
    let dir = tempfile::tempdir().unwrap();
    let (root, data, cache) = (
        dir.path().join("root"),
        dir.path().join("data"),
        dir.path().join("cache"),
    );
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("spec.html"), &v1).unwrap();
    // A slow assumed client link makes the delta worth computing on the first request.
    let config = dir.path().join("wirefold.toml");
    std::fs::write(&config, "[delta]\nassumed_bandwidth_bps = 1000000\n").unwrap();
    let (_server, base) = serve(&[
        "--root",
        root.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ]);
    let url = format!("{base}/spec.html");
    let cache = cache.to_str().unwrap();

    let first = get(&[&url, "--cache", cache, "--no-dictionary-fetch"]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert_eq!(first.stdout, v1);
    let line = stderr(&first);
    assert!(
        line.starts_with("200 br · wire ") && line.contains("sha-256 verified"),
        "{line}"
    );

    std::fs::write(root.join("spec.html"), &v2).unwrap();
    let body = dir.path().join("body.html");
    let second = get(&[
        &url,
        "--cache",
        cache,
        "--no-dictionary-fetch",
        "--json",
        "-o",
        body.to_str().unwrap(),
    ]);
    assert!(second.status.success(), "{}", stderr(&second));
    assert!(second.stdout.is_empty());
    assert_eq!(std::fs::read(&body).unwrap(), v2);
    let json = stderr(&second);
    assert!(
        json.contains("\"status\":226") && json.contains("\"verified\":true"),
        "{json}"
    );
    assert!(
        json.contains(&format!("\"delivered_bytes\":{}", v2.len())),
        "{json}"
    );

    let third = get(&[&url, "--cache", cache, "--quiet"]);
    assert!(third.status.success());
    assert_eq!(third.stdout, v2);
    assert!(third.stderr.is_empty(), "--quiet: {}", stderr(&third));
}

#[test]
fn get_names_a_bad_url_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let out = get(&[
        "ftp://example.com/x",
        "--cache",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("`ftp://example.com/x`"),
        "{}",
        stderr(&out)
    );
}
