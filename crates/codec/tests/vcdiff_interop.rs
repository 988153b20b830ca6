//! VCDIFF interop with the xdelta3 CLI, both ways: our deltas decode with `xdelta3 -d`, and
//! xdelta3's deltas (RFC-pure, `-9`, and with its Adler-32 extension) decode with ours.
//! Skipped, loudly, when `xdelta3` is not installed.

use std::path::{Path, PathBuf};
use std::process::Command;

use wirefold_codec::vcdiff::{self, EncodeOptions, VcdiffDecoder, VcdiffError};

const LIMIT: usize = 64 << 20;

fn xdelta3_available() -> bool {
    let found = Command::new("xdelta3").arg("-V").output().is_ok();
    if !found {
        eprintln!("xdelta3 not installed: skipping interop test");
    }
    found
}

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus")
}

/// Consecutive versions from the corpus: the large CSP spec series, smaller HTML, JS, CSS.
fn corpus_pairs() -> Vec<(String, Vec<u8>, Vec<u8>)> {
    let pairs = [
        (
            "html/w3c__webappsec-csp/index-html--recent",
            "001.html",
            "002.html",
        ),
        ("html/w3c__webappsec-csp/index-html", "003.html", "004.html"),
        ("html/w3c__webappsec-csp/index-html", "006.html", "007.html"),
        (
            "html/httpwg__httpwg.github.io/specs_rfc7230-html",
            "010.html",
            "011.html",
        ),
        ("html/w3c__aria/accname_index-html", "010.html", "011.html"),
        ("assets/w3c__aria/common_script_aria-js", "010.js", "011.js"),
        (
            "assets/whatwg__whatwg.org/resources-whatwg-org_standard-css",
            "005.css",
            "006.css",
        ),
    ];
    let root = corpus();
    if !root.exists() {
        eprintln!(
            "corpus not found at {}: corpus cases skipped",
            root.display()
        );
        return Vec::new();
    }
    pairs
        .iter()
        .map(|(dir, old, new)| {
            let read = |f: &str| std::fs::read(root.join(dir).join(f)).unwrap();
            (format!("{dir}/{new}"), read(old), read(new))
        })
        .collect()
}

/// Synthetic edge cases: (name, source, target).
fn edge_cases() -> Vec<(&'static str, Vec<u8>, Vec<u8>)> {
    let text: Vec<u8> = (0..40_000u32)
        .flat_map(|i| format!("line {i} of some text\n").into_bytes())
        .collect();
    let mut edited = text.clone();
    edited.splice(5_000..5_100, b"an inserted paragraph".iter().copied());
    edited.drain(200_000..230_000);
    let noise: Vec<u8> = (0..50_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    vec![
        ("empty source", Vec::new(), text[..20_000].to_vec()),
        ("empty target", text[..20_000].to_vec(), Vec::new()),
        ("both empty", Vec::new(), Vec::new()),
        (
            "identical",
            text[..100_000].to_vec(),
            text[..100_000].to_vec(),
        ),
        ("no overlap", noise.clone(), text[..50_000].to_vec()),
        ("edited, several windows", text.clone(), edited),
        (
            "runs",
            b"header".to_vec(),
            [
                vec![b' '; 3000],
                b"x".to_vec(),
                vec![0u8; 70_000],
                b"tail".to_vec(),
            ]
            .concat(),
        ),
    ]
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Runs `xdelta3 -d -s SOURCE DELTA OUT` and returns OUT.
fn xdelta3_decode(dir: &Path, source: &[u8], delta: &[u8]) -> Vec<u8> {
    let (s, d, o) = (
        write(dir, "source", source),
        write(dir, "delta", delta),
        dir.join("out"),
    );
    let status = Command::new("xdelta3")
        .args(["-d", "-f", "-s"])
        .args([&s, &d, &o])
        .status()
        .unwrap();
    assert!(status.success(), "xdelta3 -d failed");
    std::fs::read(o).unwrap()
}

/// Runs `xdelta3 -e FLAGS -s SOURCE TARGET OUT` and returns OUT.
fn xdelta3_encode(dir: &Path, flags: &[&str], source: &[u8], target: &[u8]) -> Vec<u8> {
    let (s, t, o) = (
        write(dir, "source", source),
        write(dir, "target", target),
        dir.join("delta"),
    );
    let status = Command::new("xdelta3")
        .args(["-e", "-f"])
        .args(flags)
        .arg("-s")
        .args([&s, &t, &o])
        .status()
        .unwrap();
    assert!(status.success(), "xdelta3 -e {flags:?} failed");
    std::fs::read(o).unwrap()
}

fn all_cases() -> Vec<(String, Vec<u8>, Vec<u8>)> {
    let mut cases = corpus_pairs();
    cases.extend(
        edge_cases()
            .into_iter()
            .map(|(n, s, t)| (n.to_string(), s, t)),
    );
    cases
}

#[test]
fn xdelta3_decodes_our_deltas() {
    if !xdelta3_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let small_windows = EncodeOptions {
        window_size: 16 << 10,
        ..EncodeOptions::default()
    };
    let no_self_copies = EncodeOptions {
        target_copies: false,
        ..EncodeOptions::default()
    };
    for (name, source, target) in all_cases() {
        for (label, options) in [
            ("default", EncodeOptions::default()),
            ("16 KiB windows", small_windows.clone()),
            ("no self-copies", no_self_copies.clone()),
        ] {
            let delta = vcdiff::encode_with(&source, &target, &options);
            assert!(
                xdelta3_decode(dir.path(), &source, &delta) == target,
                "{name} ({label}): xdelta3 decoded a different body"
            );
        }
    }
}

#[test]
fn we_decode_xdelta3_deltas() {
    if !xdelta3_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let flag_sets: [&[&str]; 5] = [
        &["-n", "-S", "none", "-A"],
        &["-9", "-n", "-S", "none", "-A"],
        // Without -n: per-window Adler-32 (VCD_ADLER32), which we verify.
        &["-S", "none", "-A"],
        // Without -A: an application header, which we skip.
        &["-9", "-S", "none"],
        // Many windows, each with its own source segment.
        &["-S", "none", "-A", "-W", "16384", "-B", "524288"],
    ];
    for (name, source, target) in all_cases() {
        for flags in flag_sets {
            let delta = xdelta3_encode(dir.path(), flags, &source, &target);
            let decoded = vcdiff::decode(&source, &delta, LIMIT)
                .unwrap_or_else(|e| panic!("{name} {flags:?}: {e}"));
            assert!(decoded == target, "{name} {flags:?}: wrong body");
            // The streaming decoder, fed in awkward chunk sizes, agrees.
            let mut decoder = VcdiffDecoder::new(&source, LIMIT);
            let mut streamed = Vec::new();
            for chunk in delta.chunks(977) {
                streamed.extend(decoder.write(chunk).unwrap());
            }
            decoder.finish().unwrap();
            assert!(
                streamed == target,
                "{name} {flags:?}: streaming decoder gave a wrong body"
            );
        }
    }
}

#[test]
fn xdelta3_checksum_mismatch_is_detected() {
    if !xdelta3_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let source = b"the quick brown fox jumps over the lazy dog".repeat(50);
    let target = [&source[..900], b"CHANGED", &source[900..]].concat();
    let mut delta = xdelta3_encode(dir.path(), &["-S", "none", "-A"], &source, &target);
    // The literal "CHANGED" sits in the data section; altering it keeps the delta
    // well-formed, so only the checksum can catch it.
    let at = delta
        .windows(7)
        .position(|w| w == b"CHANGED")
        .expect("literal in the data section");
    delta[at] = b'X';
    assert!(matches!(
        vcdiff::decode(&source, &delta, LIMIT),
        Err(VcdiffError::ChecksumMismatch { .. })
    ));
}

#[test]
fn secondary_compression_is_rejected_clearly() {
    if !xdelta3_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let source = b"some source text, repeated. ".repeat(100);
    let target = [&source[..], b"and an addition"].concat();
    let delta = xdelta3_encode(dir.path(), &["-9"], &source, &target);
    let err = vcdiff::decode(&source, &delta, LIMIT).unwrap_err();
    assert_eq!(
        err,
        VcdiffError::UnsupportedSecondaryCompressor(2),
        "xdelta3's default is LZMA (id 2)"
    );
    assert!(
        err.to_string().contains("-S none"),
        "the message says how to avoid it: {err}"
    );
}

#[test]
fn runs_are_coded_as_run_instructions() {
    if !xdelta3_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let target = [&b"header"[..], &[b' '; 3000], b"x", &[0; 70_000], b"tail"].concat();
    let delta = vcdiff::encode(b"header", &target);
    let listing = Command::new("xdelta3")
        .arg("printdelta")
        .arg(write(dir.path(), "delta", &delta))
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert_eq!(listing.matches(" RUN ").count(), 2, "{listing}");
    assert_eq!(xdelta3_decode(dir.path(), b"header", &delta), target);
}
