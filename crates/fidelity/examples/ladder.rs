//! Measures image ladders on real files: for each image (and the same pixels as a
//! JPEG at quality 90), the bytes of each rung per output format (the later pass's
//! AVIF too, with `--features avif`) and the time the decode and each ladder took.
//! `docs/fidelity.md` quotes its output.
//!
//!   scripts/fetch-fidelity-images.sh /tmp/images
//!   cargo run --release -p wirefold-fidelity --features avif --example ladder -- /tmp/images/*

use std::time::Instant;

use fidelity::image::{decode, encode, ladder, ladder_formats, probe, Pixels, LATER_FORMATS};
use fidelity::FidelityConfig;

fn main() {
    let limits = FidelityConfig::default().image_limits();
    for path in std::env::args().skip(1) {
        let Ok(bytes) = std::fs::read(&path) else {
            eprintln!("{path}: unreadable");
            continue;
        };
        let name = path.rsplit('/').next().unwrap_or(&path).to_string();
        let Ok(found) = probe(&bytes, &limits) else {
            eprintln!("{name}: refused");
            continue;
        };
        let started = Instant::now();
        let Ok(pixels) = decode(&bytes, found.format, &limits) else {
            eprintln!("{name}: undecodable");
            continue;
        };
        let decoded = started.elapsed();
        measure(&name, &bytes, found.format, &pixels, decoded.as_secs_f64());
        // The same picture as the JPEG a photograph would be on the web.
        if let Some(jpeg) = encode(&pixels, wirefold_http::fidelity::ImageFormat::Jpeg, 90) {
            let again = decode(&jpeg, wirefold_http::fidelity::ImageFormat::Jpeg, &limits);
            if let Ok(pixels) = again {
                let jpeg_name = format!("{name} as JPEG q90");
                let format = wirefold_http::fidelity::ImageFormat::Jpeg;
                measure(&jpeg_name, &jpeg, format, &pixels, f64::NAN);
            }
        }
    }
}

fn measure(
    name: &str,
    bytes: &[u8],
    format: wirefold_http::fidelity::ImageFormat,
    pixels: &Pixels,
    decode_seconds: f64,
) {
    println!(
        "{name}: {} bytes, {}x{}, decode {decode_seconds:.3} s",
        bytes.len(),
        pixels.width,
        pixels.height
    );
    let formats = ladder_formats(format, pixels);
    for out in formats.into_iter().chain(LATER_FORMATS.iter().copied()) {
        let started = Instant::now();
        let rungs = ladder(pixels, bytes.len(), out, 6);
        let seconds = started.elapsed().as_secs_f64();
        let steps: Vec<String> = rungs
            .iter()
            .map(|r| {
                format!(
                    "{}:{:.1}%@{}px",
                    r.step,
                    100.0 * r.bytes.len() as f64 / bytes.len() as f64,
                    r.width
                )
            })
            .collect();
        println!(
            "  {:?}: {seconds:.2} s for {} rungs: {}",
            out,
            rungs.len(),
            steps.join(" ")
        );
    }
}
