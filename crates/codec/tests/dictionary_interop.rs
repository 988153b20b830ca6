//! Our dcb / dcz bodies against the reference tools, both ways.
//!
//! zstd: the `zstd` CLI (Debian's 1.5.4). brotli: a CLI with `-D` (brotli ≥ 1.1,
//! from `$WIREFOLD_BROTLI_CLI` or PATH) when there is one, else Google's C
//! decoder through brotlic-sys; Debian's brotli 1.0.9 cannot take a dictionary.
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

mod dictionary_support;

use std::ffi::OsStr;
use std::path::Path;

use dictionary_support::{brotli_cli_with_dictionary, c_brotli_decode, corpus, html_pair, run};
use wirefold_codec::dictionary::{self, encode, header, DictionaryCoding};

const LIMIT: usize = 64 << 20;

/// Real pairs: an HTML page and a script, each with its previous version.
fn pairs() -> Vec<(Vec<u8>, Vec<u8>)> {
    vec![
        html_pair(),
        (
            corpus("assets/w3c__aria/common_script_aria-js/010.js"),
            corpus("assets/w3c__aria/common_script_aria-js/011.js"),
        ),
    ]
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("writing a scratch file");
    path
}

#[test]
fn zstd_cli_decodes_our_dcz_with_and_without_the_header() {
    let dir = tempfile::tempdir().expect("scratch dir");
    for (dictionary, data) in pairs() {
        let dict = write(dir.path(), "dict", &dictionary);
        for level in [3, 19] {
            let body = encode(DictionaryCoding::Dcz, level, &dictionary, &data);
            // The 40-byte header is a skippable frame: the whole body is a zstd stream.
            let whole = write(dir.path(), "body.dcz", &body);
            let stream = write(dir.path(), "body.zst", &body[40..]);
            for input in [&whole, &stream] {
                let out = run(
                    "zstd",
                    &[
                        OsStr::new("-d"),
                        OsStr::new("-q"),
                        OsStr::new("-c"),
                        OsStr::new("-D"),
                        dict.as_os_str(),
                        input.as_os_str(),
                    ],
                );
                assert!(
                    out == data,
                    "zstd -d -D of {} (level {level})",
                    input.display()
                );
            }
        }
    }
}

#[test]
fn we_decode_zstd_cli_output_wrapped_in_the_header() {
    let dir = tempfile::tempdir().expect("scratch dir");
    for (dictionary, data) in pairs() {
        let dict = write(dir.path(), "dict", &dictionary);
        let input = write(dir.path(), "data", &data);
        let patch_from = format!("--patch-from={}", dict.display());
        let invocations: [Vec<&OsStr>; 2] = [
            vec![OsStr::new("-19"), OsStr::new("-D"), dict.as_os_str()],
            vec![OsStr::new("-19"), OsStr::new(&patch_from)],
        ];
        for args in invocations {
            let mut args = args.clone();
            args.extend([OsStr::new("-q"), OsStr::new("-c"), input.as_os_str()]);
            let mut body = header(DictionaryCoding::Dcz, &dictionary);
            body.extend(run("zstd", &args));
            let decoded = dictionary::decode(DictionaryCoding::Dcz, &dictionary, &body, LIMIT);
            assert!(decoded.as_deref() == Ok(&data[..]), "zstd {args:?}");
        }
    }
}

#[test]
fn a_reference_brotli_decoder_decodes_our_dcb() {
    let cli = brotli_cli_with_dictionary();
    let dir = tempfile::tempdir().expect("scratch dir");
    for (dictionary, data) in pairs() {
        let dict = write(dir.path(), "dict", &dictionary);
        for quality in [5, 9, 11] {
            let body = encode(DictionaryCoding::Dcb, quality, &dictionary, &data);
            let decoded = match &cli {
                Some(cli) => {
                    let stream = write(dir.path(), "body.br", &body[36..]);
                    run(
                        cli,
                        &[
                            OsStr::new("-d"),
                            OsStr::new("-c"),
                            OsStr::new("-D"),
                            dict.as_os_str(),
                            stream.as_os_str(),
                        ],
                    )
                }
                None => c_brotli_decode(&dictionary, &body[36..]).expect("C brotli decoder"),
            };
            assert!(
                decoded == data,
                "q{quality}, decoded by {cli:?} (None: C brotli)"
            );
        }
    }
}

#[test]
fn we_decode_brotli_cli_output_wrapped_in_the_header() {
    let Some(cli) = brotli_cli_with_dictionary() else {
        eprintln!("skipped: no brotli CLI with -D (set WIREFOLD_BROTLI_CLI)");
        return;
    };
    let dir = tempfile::tempdir().expect("scratch dir");
    for (dictionary, data) in pairs() {
        let dict = write(dir.path(), "dict", &dictionary);
        let input = write(dir.path(), "data", &data);
        for (quality, window) in [("5", "18"), ("11", "20"), ("11", "24")] {
            let mut body = header(DictionaryCoding::Dcb, &dictionary);
            body.extend(run(
                &cli,
                &[
                    OsStr::new("-q"),
                    OsStr::new(quality),
                    OsStr::new("-w"),
                    OsStr::new(window),
                    OsStr::new("-c"),
                    OsStr::new("-D"),
                    dict.as_os_str(),
                    input.as_os_str(),
                ],
            ));
            let decoded = dictionary::decode(DictionaryCoding::Dcb, &dictionary, &body, LIMIT);
            assert!(
                decoded.as_deref() == Ok(&data[..]),
                "brotli -q {quality} -w {window} -D"
            );
        }
    }
}
