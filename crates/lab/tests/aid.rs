//! `lab aid` and `lab estimate` end to end: a small site on disk whose round trips are
//! computed by hand, the JSON contract's keys, the corpus pages, and bad inputs.

use std::path::Path;

use clap::Parser;
use serde_json::Value;

mod common;
use common::{lab, Lab};

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&lab(args).unwrap()).unwrap()
}

const SIBLINGS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/corpus/siblings"
);

/// A 10-segment page (MSS 1000) whose only reference, a 500-byte stylesheet on disk,
/// sits in its last segment; plus an image not on disk.
fn site(dir: &Path) {
    let mut page = "<!doctype html><title>t</title>".to_string();
    page.push_str(&"x".repeat(9_500 - page.len()));
    page.push_str("<link rel=stylesheet href=\"css/a.css\">");
    page.push_str(&"y".repeat(10_000 - page.len()));
    assert_eq!(page.len(), 10_000);
    std::fs::create_dir_all(dir.join("css")).unwrap();
    std::fs::write(dir.join("index.html"), page).unwrap();
    std::fs::write(dir.join("css/a.css"), "z".repeat(500)).unwrap();
    std::fs::write(
        dir.join("other.html"),
        "<img src=/missing.png><script src=\"css/a.css\"></script>",
    )
    .unwrap();
}

#[test]
fn hand_computed_site_and_json_contract() {
    let dir = tempfile::tempdir().unwrap();
    site(dir.path());
    let root = dir.path().to_str().unwrap();
    let report = json(&[
        "aid",
        root,
        "--format",
        "json",
        "--initial-window",
        "1",
        "--mss",
        "1000",
        "--connections",
        "1",
        "--default-resource-bytes",
        "3000",
    ]);
    let params = &report["params"];
    assert_eq!(params["initial_window"], 1);
    assert_eq!(params["mss"], 1000);
    assert_eq!(params["connections"], 1);
    assert_eq!(params["default_resource_bytes"], 3000);

    let docs = report["documents"].as_array().unwrap();
    assert_eq!(docs.len(), 2);
    for doc in docs {
        for key in [
            "url",
            "bytes_total",
            "last_ref_offset",
            "rtts_without",
            "rtts_with",
        ] {
            assert!(doc.get(key).is_some(), "{key} missing in {doc}");
        }
    }
    let index = &docs[0];
    assert_eq!(index["url"], "file:///index.html");
    assert_eq!(index["bytes_total"], 10_500);
    assert_eq!(index["last_ref_offset"], 9_500);
    assert_eq!(index["resources_assumed"], 0);
    // Page: flights 1, 2, 4, 3 after the handshake → round 5; the stylesheet is learnt
    // in the last flight and asked for then → 6. With AID: 11 segments, 1, 2, 4, 4 → 5.
    assert_eq!(index["rtts_without"], 6);
    assert_eq!(index["rtts_with"], 5);

    // other.html: 1 segment (round 2, window now 2), then the image (3000 B assumed:
    // flights of 2 and 1 → 4) and the stylesheet (→ 5). With AID, 3555 bytes in 4
    // segments: 1, 2, 1 → 4.
    let other = &docs[1];
    assert_eq!(other["resources_assumed"], 1);
    assert_eq!(other["bytes_total"], 55 + 3000 + 500);
    assert_eq!(other["rtts_without"], 5);
    assert_eq!(other["rtts_with"], 4);
}

#[test]
fn csv_table_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    site(dir.path());
    let root = dir.path().to_str().unwrap();
    let csv = lab(&["aid", root, "--format", "csv"]).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next().unwrap(),
        "url,page_bytes,resources,assumed,bytes_total,last_ref_offset,rtts_without,rtts_with,saved"
    );
    assert_eq!(lines.count(), 2);

    let plots = dir.path().join("plots");
    let table = lab(&["aid", root, "--plot", plots.to_str().unwrap()]).unwrap();
    assert!(
        table.contains("1 of 3 inline resources were not found on disk"),
        "{table}"
    );
    let svg = std::fs::read_to_string(plots.join("aid-rtts-iw10.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("with inline download"));
}

#[test]
fn corpus_siblings() {
    let httpwg = format!("{SIBLINGS}/httpwg__httpwg.github.io");
    let report = json(&["aid", &httpwg, "--format", "json", "--initial-window", "1"]);
    let docs = report["documents"].as_array().unwrap();
    assert_eq!(docs.len(), 58);
    for doc in docs {
        // Five or six references (stylesheets, logo, scripts), none of them on disk.
        let assumed = doc["resources_assumed"].as_u64().unwrap();
        assert!((5..=6).contains(&assumed), "{doc}");
    }
    // The mailing-list pages reference nothing inline: AID changes nothing.
    let whatwg = format!("{SIBLINGS}/whatwg__whatwg.org");
    for doc in json(&["aid", &whatwg, "--format", "json"])["documents"]
        .as_array()
        .unwrap()
    {
        assert_eq!(doc["last_ref_offset"], Value::Null);
        assert_eq!(doc["rtts_without"], doc["rtts_with"]);
    }
}

#[test]
fn har_trace_sizes_resources_from_its_responses() {
    // A Chrome HAR of https://http2.github.io/ (tests/fixtures/README.md). Expected sizes
    // taken with python's json and base64 modules: the 4606-byte page references two
    // stylesheets (99961, 290), a logo (22689 decoded) and two scripts (84280, 29110).
    let har = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/http2.github.io.har"
    );
    let report = json(&["aid", har, "--format", "json"]);
    let docs = report["documents"].as_array().unwrap();
    let page = docs
        .iter()
        .find(|d| d["url"] == "https://http2.github.io/")
        .expect("the page is in the trace");
    assert_eq!(page["page_bytes"], 4606);
    assert_eq!(page["resources"], 5);
    assert_eq!(page["resources_assumed"], 0);
    assert_eq!(
        page["bytes_total"],
        4606 + 99961 + 290 + 22689 + 84280 + 29110
    );
    // Bytes, not characters: the page has non-ASCII text before its last script.
    assert_eq!(page["last_ref_offset"], 4517);
}

#[test]
fn bad_inputs_name_the_path() {
    let missing = "/nonexistent/wirefold-aid-input";
    let err = lab(&["aid", missing]).unwrap_err().to_string();
    assert!(err.contains(missing), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().to_str().unwrap();
    let err = lab(&["aid", empty]).unwrap_err().to_string();
    assert!(err.contains(empty), "{err}");

    let not_a_trace = dir.path().join("trace.bin");
    std::fs::write(&not_a_trace, b"\x00\x01").unwrap();
    let err = lab(&["aid", not_a_trace.to_str().unwrap()])
        .unwrap_err()
        .to_string();
    assert!(err.contains("trace.bin"), "{err}");

    let parse = |args: &[&str]| Lab::try_parse_from([&["lab"], args].concat()).err();
    assert!(parse(&["aid", empty, "--initial-window", "0"]).is_some());
    assert!(parse(&["aid", empty, "--base-url", "not a url"]).is_some());
    assert!(parse(&[
        "estimate",
        "--size",
        "1",
        "--rtt-ms",
        "0",
        "--bandwidth-mbps",
        "1"
    ])
    .is_some());
    assert!(parse(&["estimate", "--rtt-ms", "1", "--bandwidth-mbps", "1"]).is_some());
}

#[test]
fn estimate_calculator_and_folder() {
    let report = json(&[
        "estimate",
        "--size",
        "14600",
        "--rtt-ms",
        "100",
        "--bandwidth-mbps",
        "8",
        "--format",
        "json",
    ]);
    let e = &report["estimates"][0];
    assert_eq!(e["segments"], 10);
    assert_eq!(e["setup_ms"], 150.0);
    let total = e["total_ms"].as_f64().unwrap();
    assert!((total - (150.0 + 100.0 * 11f64.log2() + 14.6)).abs() < 1e-9);

    let dir = tempfile::tempdir().unwrap();
    site(dir.path());
    let report = json(&[
        "estimate",
        "--dir",
        dir.path().to_str().unwrap(),
        "--rtt-ms",
        "50",
        "--bandwidth-mbps",
        "10",
        "--default-resource-bytes",
        "3000",
        "--format",
        "json",
    ]);
    let bytes: Vec<u64> = report["estimates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(bytes, [10_500, 3_555]);
    assert_eq!(report["params"]["default_resource_bytes"], 3000);
}
