//! Interoperability with the reference tools on a real page: what we encode, they
//! decode byte for byte; what they encode, we decode.

mod common;

use common::{corpus_html, filter};
use wirefold_codec::{compress, decompress, Encoder};
use wirefold_http::ContentCoding;

/// Decodes zlib data from stdin with Python's zlib module (the reference for `deflate`).
const PY_ZLIB_DECOMPRESS: &str =
    "import sys, zlib; sys.stdout.buffer.write(zlib.decompress(sys.stdin.buffer.read()))";
const PY_ZLIB_COMPRESS_6: &str =
    "import sys, zlib; sys.stdout.buffer.write(zlib.compress(sys.stdin.buffer.read(), 6))";

fn reference_decode(coding: ContentCoding, packed: &[u8]) -> Vec<u8> {
    match coding {
        ContentCoding::Gzip => filter("gzip", &["-d", "-c"], packed),
        ContentCoding::Br => filter("brotli", &["-d", "-c"], packed),
        ContentCoding::Zstd => filter("zstd", &["-d", "-c"], packed),
        ContentCoding::Deflate => filter("python3", &["-c", PY_ZLIB_DECOMPRESS], packed),
    }
}

fn reference_encode(coding: ContentCoding, data: &[u8]) -> Vec<u8> {
    match coding {
        ContentCoding::Gzip => filter("gzip", &["-6", "-c"], data),
        ContentCoding::Br => filter("brotli", &["-q", "5", "-c"], data),
        ContentCoding::Zstd => filter("zstd", &["-3", "-c"], data),
        ContentCoding::Deflate => filter("python3", &["-c", PY_ZLIB_COMPRESS_6], data),
    }
}

#[test]
fn reference_tools_decode_our_one_shot_output() {
    let page = corpus_html();
    for coding in ContentCoding::ALL {
        for level in [*coding.levels().start(), 6, *coding.levels().end()] {
            let packed = compress(coding, level, &page);
            assert!(
                reference_decode(coding, &packed) == page,
                "{coding:?} level {level}"
            );
        }
    }
}

#[test]
fn reference_tools_decode_our_streaming_output() {
    let page = corpus_html();
    for coding in ContentCoding::ALL {
        let mut enc = Encoder::new(coding, 5);
        let mut packed = Vec::new();
        for piece in page.chunks(1500) {
            enc.write(piece);
            packed.extend(enc.take_output());
        }
        packed.extend(enc.finish());
        assert!(reference_decode(coding, &packed) == page, "{coding:?}");
    }
}

#[test]
fn we_decode_the_reference_tools_output() {
    let page = corpus_html();
    for coding in ContentCoding::ALL {
        let packed = reference_encode(coding, &page);
        assert!(
            decompress(coding, &packed, page.len()).unwrap() == page,
            "{coding:?}"
        );
    }
}
