//! `lab deltas` on a tiny generated corpus: every body it counts decodes back to the new
//! version with an independent decoder (the CLIs where one exists), the JSON has the
//! documented keys and consistent numbers, and a missing peer tool is reported, not fatal.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod common;
use common::lab;

/// Text that compresses like markup: words from a small vocabulary in pseudo-random order.
fn words(seed: u64, n: usize) -> String {
    const VOCAB: [&str; 24] = [
        "<div class=\"note\">",
        "</div>",
        "<p>",
        "</p>",
        "request",
        "response",
        "header",
        "cache",
        "delta",
        "dictionary",
        "origin",
        "client",
        "version",
        "<a href=\"/spec\">",
        "</a>",
        "function",
        "return",
        "const",
        "let",
        "the",
        "of",
        "and",
        "{",
        "}",
    ];
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut s = String::new();
    for i in 0..n {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        s.push_str(VOCAB[(x >> 33) as usize % VOCAB.len()]);
        s.push(if i % 12 == 11 { '\n' } else { ' ' });
    }
    s
}

/// Three versions: each edits a few places of the previous one.
fn versions(seed: u64) -> Vec<String> {
    let mut v = vec![words(seed, 4000)];
    for k in 1..3u64 {
        let prev = v.last().unwrap().clone();
        let cut = prev.len() * k as usize / 4;
        let next = format!(
            "{}{}{}{}",
            &prev[..cut],
            words(seed + 100 * k, 40),
            &prev[cut + 200..prev.len() - 300],
            words(seed + 1000 * k, 30)
        );
        v.push(next);
    }
    v
}

/// 2 series × 3 versions, one per corpus layout.
fn corpus(dir: &Path) -> PathBuf {
    let root = dir.join("corpus");
    let html = root.join("html/owner__repo/page-html");
    let npm = root.join("npm/pkg/dist_pkg-js");
    std::fs::create_dir_all(&html).unwrap();
    std::fs::create_dir_all(&npm).unwrap();
    for (i, text) in versions(1).iter().enumerate() {
        std::fs::write(html.join(format!("{:03}.html", i + 1)), text).unwrap();
    }
    std::fs::write(html.join("MANIFEST.tsv"), "not a version\n").unwrap();
    for (i, text) in versions(2).iter().enumerate() {
        std::fs::write(npm.join(format!("{:03}-1.{}.0.js", i + 1, i + 8)), text).unwrap();
    }
    root
}

fn have(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// What `program args…` writes on stdout; panics unless it succeeds.
fn decode_with(program: &str, args: &[&str], body: &Path) -> Vec<u8> {
    let out = Command::new(program)
        .args(args)
        .arg(body)
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} {}: {}",
        body.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

const DOCUMENTED_KEYS: [&str; 10] = [
    "corpora",
    "params",
    "timing_method",
    "methods",
    "tools",
    "pairs",
    "groups",
    "series",
    "failures",
    "wall_s",
];

#[test]
fn every_body_decodes_back_and_the_numbers_agree() {
    let peers = have("xdelta3", "-V") && have("zstd", "-V");
    let dir = tempfile::tempdir().unwrap();
    let root = corpus(dir.path());
    let keep = dir.path().join("kept");
    let json = lab(&[
        "deltas",
        root.to_str().unwrap(),
        "--format",
        "json",
        "--runs",
        "1",
        "--keep-deltas",
        keep.to_str().unwrap(),
    ])
    .unwrap();
    let doc: Value = serde_json::from_str(&json).unwrap();
    for key in DOCUMENTED_KEYS {
        assert!(doc.get(key).is_some(), "missing key {key}");
    }
    assert_eq!(
        doc["failures"].as_array().unwrap().len(),
        0,
        "{}",
        doc["failures"]
    );
    let pairs = doc["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 4, "2 series × 2 consecutive pairs");

    let mut methods_checked = std::collections::BTreeSet::new();
    for pair in pairs {
        for key in [
            "corpus",
            "series",
            "content_type",
            "old",
            "new",
            "old_bytes",
            "new_bytes",
            "bytes",
            "time_ms",
        ] {
            assert!(pair.get(key).is_some(), "pair lacks {key}");
        }
        let series = pair["series"].as_str().unwrap();
        let series_dir = root.join(series);
        let old_path = series_dir.join(pair["old"].as_str().unwrap());
        let new_path = series_dir.join(pair["new"].as_str().unwrap());
        let old = std::fs::read(&old_path).unwrap();
        let new = std::fs::read(&new_path).unwrap();
        assert_eq!(pair["new_bytes"].as_u64().unwrap(), new.len() as u64);
        let stem = |p: &Path| p.file_stem().unwrap().to_str().unwrap().to_string();
        let bytes = pair["bytes"].as_object().unwrap();
        assert_eq!(bytes["identity"].as_u64().unwrap(), new.len() as u64);
        let old_arg = old_path.to_str().unwrap();
        for (method, size) in bytes {
            if method == "identity" {
                continue;
            }
            let body_path = keep.join("corpus").join(series).join(format!(
                "{}_{}.{method}",
                stem(&old_path),
                stem(&new_path)
            ));
            let body = std::fs::read(&body_path)
                .unwrap_or_else(|e| panic!("{}: {e}", body_path.display()));
            assert_eq!(body.len() as u64, size.as_u64().unwrap(), "{method} size");
            let patch_from = format!("--patch-from={old_arg}");
            let decoded = match method.as_str() {
                "gzip_6" => decode_with("gzip", &["-d", "-c"], &body_path),
                "br_11" => decode_with("brotli", &["-d", "-c"], &body_path),
                "zstd_19" => decode_with("zstd", &["-d", "-q", "-c"], &body_path),
                // The RFC 9842 header is a zstd skippable frame: the CLI decodes the body whole.
                "dcz_19" => decode_with("zstd", &["-d", "-q", "-c", "-D", old_arg], &body_path),
                "dcb_11" => {
                    // brotli 1.0.9's CLI has no dictionary option: check the header by
                    // hand and decode the stream with the codec crate.
                    assert_eq!(&body[..4], &[0xff, 0x44, 0x43, 0x42]);
                    assert_eq!(&body[4..36], &codec_sha256(&old)[..]);
                    codec::dictionary::decode(
                        codec::dictionary::DictionaryCoding::Dcb,
                        &old,
                        &body,
                        new.len(),
                    )
                    .unwrap()
                }
                "vcdiff" | "xdelta3_9" | "xdelta3_9_default" => {
                    decode_with("xdelta3", &["-d", "-c", "-s", old_arg], &body_path)
                }
                "zstd_19_patch_from" => decode_with(
                    "zstd",
                    &["-d", "-q", "-c", "--long=27", &patch_from],
                    &body_path,
                ),
                other => panic!("undocumented method {other}"),
            };
            assert!(decoded == new, "{method} {series} did not decode back");
            methods_checked.insert(method.clone());
        }
        // Deltas beat plain compression on near-identical versions.
        let b = |k: &str| bytes[k].as_u64().unwrap();
        assert!(b("dcz_19") < b("zstd_19") && b("zstd_19") < b("identity"));
        assert!(b("dcb_11") < b("br_11"));
        assert!(b("vcdiff") < b("gzip_6"));
        let t = pair["time_ms"].as_object().unwrap();
        for key in [
            "vcdiff_encode",
            "vcdiff_decode",
            "dcz_19_encode",
            "dcz_19_decode",
        ] {
            assert!(t[key].as_f64().unwrap() >= 0.0, "{key}");
        }
    }
    let mut expected = vec!["br_11", "dcb_11", "dcz_19", "gzip_6", "vcdiff", "zstd_19"];
    if peers {
        expected.extend(["xdelta3_9", "xdelta3_9_default", "zstd_19_patch_from"]);
    }
    expected.sort();
    assert_eq!(
        methods_checked
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        expected
    );

    // Groups: one per content type plus "all"; totals are the sums of the pairs.
    let groups = doc["groups"].as_array().unwrap();
    let types: Vec<&str> = groups
        .iter()
        .map(|g| g["content_type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["html", "js", "all"]);
    for g in groups {
        for key in [
            "corpus",
            "content_type",
            "pairs",
            "total_bytes",
            "median_bytes",
            "smaller_than_br_11_pct",
            "speed",
            "targets",
        ] {
            assert!(g.get(key).is_some(), "group lacks {key}");
        }
        let ty = g["content_type"].as_str().unwrap();
        let members: Vec<&Value> = pairs
            .iter()
            .filter(|p| ty == "all" || p["content_type"] == ty)
            .collect();
        assert_eq!(g["pairs"].as_u64().unwrap(), members.len() as u64);
        for (method, total) in g["total_bytes"].as_object().unwrap() {
            let sum: u64 = members
                .iter()
                .map(|p| p["bytes"][method].as_u64().unwrap())
                .sum();
            assert_eq!(total.as_u64().unwrap(), sum, "{ty} {method}");
        }
        let total = |m: &str| g["total_bytes"][m].as_u64().unwrap() as f64;
        let saving = g["smaller_than_br_11_pct"]["dcz_19"]["total"]
            .as_f64()
            .unwrap();
        assert!((saving - 100.0 * (1.0 - total("dcz_19") / total("br_11"))).abs() < 1e-9);
        let median = g["smaller_than_br_11_pct"]["dcz_19"]["median_pair"]
            .as_f64()
            .unwrap();
        assert!(median > 0.0 && median <= 100.0);
        let met = g["targets"]["dcz_19_total_ge_90pct"].as_bool().unwrap();
        assert_eq!(met, saving >= 90.0);
        if peers {
            for key in [
                "vcdiff_vs_xdelta3_encode",
                "vcdiff_vs_xdelta3_decode",
                "dcz_vs_zstd_patch_encode",
                "dcz_vs_zstd_patch_decode",
            ] {
                let s = &g["speed"][key];
                assert!(s["median_ratio"].as_f64().unwrap() > 0.0, "{key}");
                assert!(s["peer_cpu_median_ms"].as_f64().unwrap() > 0.0, "{key}");
            }
            assert!(g["vcdiff_vs_xdelta3_size"]["total"].as_f64().unwrap() > 0.0);
        }
    }
    assert_eq!(doc["series"].as_array().unwrap().len(), 2);
}

fn codec_sha256(data: &[u8]) -> [u8; 32] {
    codec::dictionary::sha256(data)
}

#[test]
fn a_missing_xdelta3_is_reported_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let root = corpus(dir.path());
    let root = root.to_str().unwrap();
    let missing = dir.path().join("no-such-dir/xdelta3");
    let missing = missing.to_str().unwrap();
    let json = lab(&[
        "deltas",
        root,
        "--format",
        "json",
        "--runs",
        "1",
        "--max-pairs-per-series",
        "1",
        "--xdelta3",
        missing,
    ])
    .unwrap();
    let doc: Value = serde_json::from_str(&json).unwrap();
    let tools = doc["tools"].as_array().unwrap();
    let xdelta3 = tools.iter().find(|t| t["name"] == "xdelta3").unwrap();
    assert_eq!(xdelta3["available"], false);
    assert!(xdelta3["missing"].as_str().unwrap().contains("no-such-dir"));
    let methods = doc["methods"].as_array().unwrap();
    for m in methods {
        let name = m["name"].as_str().unwrap();
        if name.starts_with("xdelta3") {
            assert_eq!(m["measured"], false, "{name}");
        }
    }
    let pairs = doc["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 2, "one pair per series");
    for p in pairs {
        assert!(p["bytes"].get("xdelta3_9").is_none());
        assert!(p["bytes"].get("vcdiff").is_some());
    }
    for g in doc["groups"].as_array().unwrap() {
        assert!(g["speed"].get("vcdiff_vs_xdelta3_encode").is_none());
        assert!(g["total_bytes"].get("dcz_19").is_some());
    }

    let table = lab(&[
        "deltas",
        root,
        "--runs",
        "1",
        "--max-pairs-per-series",
        "1",
        "--xdelta3",
        missing,
    ])
    .unwrap();
    assert!(table.contains("xdelta3: NOT AVAILABLE"), "{table}");
    assert!(
        !table.contains("xdelta3_9"),
        "skipped columns are left out:\n{table}"
    );
    assert!(table.contains("dcz_19"));
}

#[test]
fn csv_has_a_header_per_table() {
    let dir = tempfile::tempdir().unwrap();
    let root = corpus(dir.path());
    let csv = lab(&[
        "deltas",
        root.to_str().unwrap(),
        "--format",
        "csv",
        "--runs",
        "1",
        "--max-pairs-per-series",
        "1",
    ])
    .unwrap();
    let headers: Vec<&str> = csv.lines().filter(|l| l.starts_with("corpus,")).collect();
    assert!(headers.len() >= 3, "{csv}");
    for line in csv.lines().filter(|l| !l.is_empty()) {
        let cols = line.split(',').count();
        assert!(cols >= 4, "{line}");
    }
}
