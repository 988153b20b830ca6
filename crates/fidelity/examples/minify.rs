//! Measures the text minifiers on real files: for each HTML, CSS or JavaScript file,
//! the bytes raw, after gzip 9 and after brotli 11, of the original and of its
//! minified variant, the saving after each, and the minifier's CPU time per MB.
//! `docs/fidelity.md` quotes its output.
//!
//!   cargo run -p wirefold-fidelity --features minify --example minify -- FILES

use std::io::Write;
use std::time::Instant;

use fidelity::text::{minify, saving};
use wirefold_http::fidelity::TextKind;

fn gzip(bytes: &[u8]) -> u64 {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(9));
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap().len() as u64
}

fn brotli(bytes: &[u8]) -> u64 {
    let mut out = Vec::new();
    let params = brotli::enc::BrotliEncoderParams {
        quality: 11,
        ..Default::default()
    };
    brotli::BrotliCompress(&mut &bytes[..], &mut out, &params).unwrap();
    out.len() as u64
}

fn main() {
    let mut totals = [[0u64; 3]; 2];
    let (mut seconds, mut input) = (0.0, 0u64);
    println!("file\traw\tminified\tsaving raw\tsaving gzip-9\tsaving br-11\tms/MB");
    for path in std::env::args().skip(1) {
        let kind = match path.rsplit('.').next() {
            Some("html" | "htm") => TextKind::Html,
            Some("css") => TextKind::Css,
            Some("js" | "mjs") => TextKind::Javascript,
            _ => continue,
        };
        let Ok(bytes) = std::fs::read(&path) else {
            eprintln!("{path}: unreadable");
            continue;
        };
        let started = Instant::now();
        let minified = minify(kind, "text/plain; charset=utf-8", &bytes);
        let spent = started.elapsed().as_secs_f64();
        let minified = match minified {
            Ok(m) => m,
            Err(e) => {
                println!("{path}\t{}\trefused: {e}", bytes.len());
                continue;
            }
        };
        seconds += spent;
        input += bytes.len() as u64;
        let original = [bytes.len() as u64, gzip(&bytes), brotli(&bytes)];
        let small = [minified.len() as u64, gzip(&minified), brotli(&minified)];
        for i in 0..3 {
            totals[0][i] += original[i];
            totals[1][i] += small[i];
        }
        println!(
            "{path}\t{}\t{}\t{:.1}%\t{:.1}%\t{:.1}%\t{:.0}",
            original[0],
            small[0],
            100.0 * saving(original[0], small[0]),
            100.0 * saving(original[1], small[1]),
            100.0 * saving(original[2], small[2]),
            spent * 1000.0 / (bytes.len() as f64 / 1e6),
        );
    }
    println!(
        "total\t{}\t{}\t{:.1}%\t{:.1}%\t{:.1}%\t{:.0}",
        totals[0][0],
        totals[1][0],
        100.0 * saving(totals[0][0], totals[1][0]),
        100.0 * saving(totals[0][1], totals[1][1]),
        100.0 * saving(totals[0][2], totals[1][2]),
        seconds * 1000.0 / (input as f64 / 1e6),
    );
}
