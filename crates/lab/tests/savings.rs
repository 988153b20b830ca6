//! `lab savings` on traces whose answer is known: a hand-built HAR with two pages and
//! a query-URL cluster, a WARC with a revisit, the Common Crawl sample, and a version
//! corpus measured by `lab codecs` too.

use std::path::Path;

use codec::dictionary::{self, DictionaryCoding};
use serde_json::{json, Value};
use wirefold_http::ContentCoding;

mod common;

fn lab(args: &[&str]) -> String {
    common::lab(args).unwrap()
}

fn savings_json(trace: &Path) -> Value {
    serde_json::from_str(&lab(&[
        "savings",
        "--format",
        "json",
        trace.to_str().unwrap(),
    ]))
    .unwrap()
}

/// Markup-like text, different for each seed.
fn page(seed: u64, words: usize) -> String {
    const VOCAB: [&str; 12] = [
        "<p>",
        "</p>",
        "cache",
        "delta",
        "origin",
        "client",
        "<a href=\"/x\">",
        "</a>",
        "the",
        "of",
        "version",
        "page",
    ];
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..words)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            VOCAB[(x % VOCAB.len() as u64) as usize]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn entry(page_id: &str, url: &str, status: u16, text: Option<&str>) -> Value {
    let mut content = json!({"size": 0, "mimeType": "text/html; charset=utf-8"});
    if let Some(t) = text {
        content["text"] = json!(t);
    }
    json!({
        "pageref": page_id,
        "startedDateTime": "2024-01-01T00:00:00.000Z",
        "request": {"method": "GET", "url": url, "headers": []},
        "response": {"status": status, "headers": [], "content": content},
    })
}

struct Bodies {
    x: String,
    y: String,
    z: String,
}

/// page1 and page2 fetch /p?a=1 (X, X), page1 again (Y), page2 /p?a=2 (Z); an entry
/// without a body and a 404 are counted but not analysed.
fn two_page_har(dir: &Path) -> (std::path::PathBuf, Bodies) {
    let x = page(1, 3000);
    let mut y = x.clone();
    y.insert_str(x.len() / 2, &page(2, 40));
    let mut z = y.clone();
    z.push_str(&page(3, 60));
    let entries = vec![
        entry("page1", "http://site.test/p?a=1", 200, Some(&x)),
        entry("page2", "http://site.test/p?a=1", 200, Some(&x)),
        entry("page1", "http://site.test/p?a=1", 200, Some(&y)),
        entry("page2", "http://site.test/p?a=2", 200, Some(&z)),
        entry("page2", "http://site.test/empty", 200, None),
        entry("page1", "http://site.test/missing", 404, Some("not found")),
    ];
    let har = json!({"log": {"version": "1.2", "creator": {"name": "test", "version": "1"}, "pages": [], "entries": entries}});
    let path = dir.join("two-pages.har");
    std::fs::write(&path, serde_json::to_vec(&har).unwrap()).unwrap();
    (path, Bodies { x, y, z })
}

fn counts(v: &Value) -> [u64; 5] {
    [
        "responses",
        "status_200",
        "analysed",
        "delta_eligible",
        "unchanged",
    ]
    .map(|k| v[k].as_u64().unwrap())
}

fn method(v: &Value, population: &str, name: &str) -> [u64; 3] {
    let m = &v[population][name];
    ["responses_improved", "bytes_before", "bytes_after"].map(|k| m[k].as_u64().unwrap())
}

fn len(b: Vec<u8>) -> u64 {
    b.len() as u64
}

#[test]
fn clustering_and_per_client_bases_on_a_known_trace() {
    let dir = tempfile::tempdir().unwrap();
    let (har, b) = two_page_har(dir.path());
    let v = savings_json(&har);
    // proxy: /p?a=1 X first, X unchanged, Y eligible; /p?a=2 Z first.
    assert_eq!(counts(&v), [6, 5, 4, 1, 1]);
    // proxy, clustered: Z's base is Y (same path).
    assert_eq!(counts(&v["clustered"]), [6, 5, 4, 2, 1]);
    // per client: page1 X first, Y eligible; page2 X first, Z first.
    assert_eq!(counts(&v["per_client"]), [6, 5, 4, 1, 0]);
    // per client, clustered: page2's Z against its own X.
    assert_eq!(counts(&v["per_client"]["clustered"]), [6, 5, 4, 2, 0]);

    let (x, y, z) = (b.x.as_bytes(), b.y.as_bytes(), b.z.as_bytes());
    let gzip = |d: &[u8]| len(codec::compress(ContentCoding::Gzip, 6, d));
    let dcz = |base: &[u8], d: &[u8]| len(dictionary::encode(DictionaryCoding::Dcz, 19, base, d));
    let dcb = |base: &[u8], d: &[u8]| len(dictionary::encode(DictionaryCoding::Dcb, 11, base, d));
    let vcdiff = |base: &[u8], d: &[u8]| len(codec::vcdiff::encode(base, d));
    let n = |s: &[u8]| s.len() as u64;

    assert_eq!(method(&v, "methods", "gzip"), [1, n(y), gzip(y)]);
    assert_eq!(method(&v, "methods", "dcz"), [1, n(y), dcz(x, y)]);
    assert_eq!(method(&v, "methods", "dcb"), [1, n(y), dcb(x, y)]);
    assert_eq!(method(&v, "methods", "vcdiff"), [1, n(y), vcdiff(x, y)]);
    let smallest = ["gzip", "br", "zstd", "dcb", "dcz", "vcdiff"]
        .map(|m| method(&v, "methods", m)[2])
        .into_iter()
        .fold(n(y), u64::min);
    assert_eq!(method(&v, "methods", "best")[2], smallest);
    // Over all responses: the first instances go as they are under a delta method,
    // the unchanged one as a delta against itself.
    assert_eq!(
        method(&v, "methods_all_responses", "dcz"),
        [
            2,
            2 * n(x) + n(y) + n(z),
            n(x) + dcz(x, x) + dcz(x, y) + n(z)
        ]
    );
    assert_eq!(
        method(&v, "methods_all_responses", "gzip")[1..],
        [2 * n(x) + n(y) + n(z), 2 * gzip(x) + gzip(y) + gzip(z)]
    );
    assert_eq!(
        method(&v["clustered"], "methods", "dcz"),
        [2, n(y) + n(z), dcz(x, y) + dcz(y, z)]
    );
    assert_eq!(
        method(&v["per_client"]["clustered"], "methods", "dcz"),
        [2, n(y) + n(z), dcz(x, y) + dcz(x, z)]
    );

    let html = &v["by_content_type"]["text/html"];
    assert_eq!(counts(html), [6, 5, 4, 1, 1]);
    // Every delta-eligible response lands in one histogram bin.
    let bins: u64 = v["histogram"]["counts"]["dcz"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .sum();
    assert_eq!(bins, 1);
}

#[test]
fn json_has_the_documented_keys() {
    let dir = tempfile::tempdir().unwrap();
    let (har, _) = two_page_har(dir.path());
    let v = savings_json(&har);
    let scenario_keys = [
        "responses",
        "status_200",
        "analysed",
        "delta_eligible",
        "unchanged",
        "methods",
        "methods_all_responses",
        "by_content_type",
        "histogram",
    ];
    for scenario in [
        &v,
        &v["clustered"],
        &v["per_client"],
        &v["per_client"]["clustered"],
    ] {
        for k in scenario_keys {
            assert!(scenario.get(k).is_some(), "missing {k}");
        }
        for population in ["methods", "methods_all_responses"] {
            let methods = scenario[population].as_object().unwrap();
            let names: Vec<&str> = methods.keys().map(String::as_str).collect();
            assert_eq!(
                names,
                ["best", "br", "dcb", "dcz", "gzip", "vcdiff", "zstd"]
            );
            for m in methods.values() {
                let keys: Vec<&str> = m.as_object().unwrap().keys().map(String::as_str).collect();
                assert_eq!(keys, ["bytes_after", "bytes_before", "responses_improved"]);
            }
        }
        assert_eq!(scenario["histogram"]["bins"].as_array().unwrap().len(), 11);
    }
    for k in [
        "traces",
        "levels",
        "max_responses",
        "stopped_at_max_responses",
        "skipped",
        "wall_s",
    ] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    assert_eq!(
        v["levels"],
        json!({"br": 11, "dcb": 11, "dcz": 19, "gzip": 6, "zstd": 19})
    );
}

#[test]
fn identical_payload_revisits_count_as_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("revisit.warc");
    std::fs::write(&path, common::revisit_warc()).unwrap();
    let v = savings_json(&path);
    // The response, its identical-payload revisit (analysed, unchanged), a 304 revisit.
    assert_eq!(counts(&v), [3, 2, 2, 0, 1]);
    assert_eq!(
        method(&v, "methods_all_responses", "gzip")[1],
        2 * common::PAGE.len() as u64
    );
}

#[test]
fn query_urls_of_the_common_crawl_sample_cluster() {
    // Two pages of http://0pointer.de/photos/ with different queries.
    let trace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/CC-MAIN-20140820021334-00006-ip-10-180-136-8.ec2.internal.warc.gz");
    let v = savings_json(&trace);
    assert_eq!(counts(&v), [4, 4, 4, 0, 0]);
    assert_eq!(counts(&v["clustered"]), [4, 4, 4, 1, 0]);
    assert_eq!(method(&v["clustered"], "methods", "gzip")[1], 222781);
    assert!(v["skipped"].as_array().unwrap().is_empty());
}

#[test]
fn compression_sizes_are_those_of_lab_codecs() {
    let dir = tempfile::tempdir().unwrap();
    let series = dir.path().join("site/page-html");
    std::fs::create_dir_all(&series).unwrap();
    std::fs::write(series.join("001.html"), page(7, 2000)).unwrap();
    std::fs::write(series.join("002.html"), page(8, 2500)).unwrap();
    let root = dir.path().to_str().unwrap();
    let codecs: Value =
        serde_json::from_str(&lab(&["codecs", "--format", "json", "--runs", "1", root])).unwrap();
    let savings = savings_json(dir.path());
    for (name, level) in [("gzip", 6), ("br", 11), ("zstd", 19)] {
        let row = codecs["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["codec"] == name && r["level"] == level && r["content_type"] == "html")
            .unwrap();
        let ours = method(&savings, "methods_all_responses", name);
        assert_eq!(ours[1], row["input_bytes"].as_u64().unwrap(), "{name}");
        assert_eq!(ours[2], row["output_bytes"].as_u64().unwrap(), "{name}");
    }
    assert_eq!(counts(&savings), [2, 2, 2, 1, 0]);
}

#[test]
fn tables_csv_bounds_and_figure() {
    let dir = tempfile::tempdir().unwrap();
    let (har, _) = two_page_har(dir.path());
    let har = har.to_str().unwrap();
    let table = lab(&["savings", har]);
    for title in [
        "Table 5-1",
        "Table 5-3",
        "Table 5-5",
        "Table 5-6",
        "Tables 5-7/5-8",
        "Figure 5-5",
    ] {
        assert!(table.contains(title), "{title} missing:\n{table}");
    }
    let csv = lab(&["savings", "--format", "csv", har]);
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("bases,content_type,population,method,responses,responses_improved,bytes_before,bytes_after")
    );
    assert!(csv.contains("\nproxy_clustered,text/html,delta_eligible,dcz,2,"));

    let bounded: Value = serde_json::from_str(&lab(&[
        "savings",
        "--format",
        "json",
        "--max-responses",
        "2",
        har,
    ]))
    .unwrap();
    assert_eq!(bounded["responses"], 2);
    assert_eq!(bounded["stopped_at_max_responses"], true);

    let plots = dir.path().join("plots");
    lab(&["savings", "--plot", plots.to_str().unwrap(), har]);
    let svg = std::fs::read_to_string(plots.join("savings-histogram.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("dcz"));
}
