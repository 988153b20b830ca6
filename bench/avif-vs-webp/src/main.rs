//! AVIF (ravif over rav1e) against WebP (libwebp, the `webp` crate wirefold uses) on
//! the pixels a variant ladder encodes: each image is decoded once, downscaled to at
//! most `--max-width` (1600) px with fast_image_resize's Lanczos3 as
//! `crates/fidelity/src/image.rs` resizes rungs, then encoded by both over a quality
//! sweep. Per encode: bytes, the encoding thread's CPU time (user + system,
//! `getrusage(RUSAGE_THREAD)`; both encoders run on the calling thread: libwebp's
//! `encode_simple` is single-threaded, ravif is built without `threading` and asked
//! for 1 thread), wall time, and the decoded result's SSIMULACRA2 score (90: not
//! told apart at 1:1, 70: high, 50: medium, 30: low quality), luma SSIM
//! (image-compare's MSSIM, 8×8 windows) and RGB PSNR against the pixels encoded. AVIF is decoded by
//! `avifdec` (Debian's libavif-bin, over dav1d/libaom): no AVIF decoder crate is in
//! this tree.
//!
//! The "original" a ladder's byte targets are shares of is the downscaled image
//! re-encoded as it would be served: JPEG quality 90 for JPEG inputs (what
//! `--example ladder` does for photographs), PNG (`CompressionType::Default`) for PNG.
//!
//! Output: one CSV row per encode on stdout. `summarize.py` turns it into the tables.
//!
//!   avif-vs-webp [--max-width N] [--speeds 10,8,6] [--avif-qualities 90,80,…]
//!                [--webp-qualities 90,85,…] FILES… > results.csv

use std::io::Write;
use std::process::Command;
use std::time::Instant;

use fast_image_resize::images::Image as ResizeImage;
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::{CompressionType, FilterType as PngFilter, PngEncoder};
use image::{ExtendedColorType, ImageEncoder, RgbImage};

struct Args {
    max_width: u32,
    speeds: Vec<u8>,
    avif_qualities: Vec<u8>,
    webp_qualities: Vec<u8>,
    files: Vec<String>,
}

fn list(value: &str) -> Vec<u8> {
    value
        .split(',')
        .map(|v| v.trim().parse().expect("a number list, e.g. 90,80,70"))
        .collect()
}

fn args() -> Args {
    let mut args = Args {
        max_width: 1600,
        speeds: vec![10, 8, 6],
        avif_qualities: [95].into_iter().chain((1..=9).rev().map(|q| q * 10)).collect(),
        webp_qualities: (2..=18).rev().map(|q| q * 5).collect(),
        files: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().expect("option needs a value");
        match arg.as_str() {
            "--max-width" => args.max_width = value().parse().expect("a width"),
            "--speeds" => args.speeds = list(&value()),
            "--avif-qualities" => args.avif_qualities = list(&value()),
            "--webp-qualities" => args.webp_qualities = list(&value()),
            _ => args.files.push(arg),
        }
    }
    args
}

/// CPU seconds (user + system) of the calling thread so far.
fn thread_cpu() -> f64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Runs `f` and returns its result, its thread CPU seconds and its wall seconds.
fn measured<T>(f: impl FnOnce() -> T) -> (T, f64, f64) {
    let cpu = thread_cpu();
    let wall = Instant::now();
    let out = f();
    (out, thread_cpu() - cpu, wall.elapsed().as_secs_f64())
}

/// Lanczos3, as `crates/fidelity/src/image.rs` resizes a rung.
fn downscale(rgb: RgbImage, max_width: u32) -> RgbImage {
    let (w, h) = rgb.dimensions();
    if w <= max_width {
        return rgb;
    }
    let nw = max_width;
    let nh = ((f64::from(h) * f64::from(nw) / f64::from(w)).round() as u32).max(1);
    let source = ResizeImage::from_vec_u8(w, h, rgb.into_raw(), PixelType::U8x3).unwrap();
    let mut target = ResizeImage::new(nw, nh, PixelType::U8x3);
    let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Lanczos3));
    Resizer::new().resize(&source, &mut target, &options).unwrap();
    RgbImage::from_raw(nw, nh, target.into_vec()).unwrap()
}

fn psnr(a: &RgbImage, b: &RgbImage) -> f64 {
    let se: f64 = a
        .as_raw()
        .iter()
        .zip(b.as_raw())
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
        .sum();
    let mse = se / a.as_raw().len() as f64;
    if mse == 0.0 { 99.0 } else { 10.0 * (255.0f64 * 255.0 / mse).log10() }
}

fn ssim(a: &RgbImage, b: &RgbImage) -> f64 {
    let ga = image::DynamicImage::ImageRgb8(a.clone()).to_luma8();
    let gb = image::DynamicImage::ImageRgb8(b.clone()).to_luma8();
    image_compare::gray_similarity_structure(&image_compare::Algorithm::MSSIMSimple, &ga, &gb)
        .expect("same dimensions")
        .score
}

fn linear(rgb: &RgbImage) -> ssimulacra2::Rgb {
    let data = rgb
        .as_raw()
        .chunks_exact(3)
        .map(|p| [p[0], p[1], p[2]].map(|c| f32::from(c) / 255.0))
        .collect();
    ssimulacra2::Rgb::new(
        data,
        rgb.width() as usize,
        rgb.height() as usize,
        ssimulacra2::TransferCharacteristic::SRGB,
        ssimulacra2::ColorPrimaries::BT709,
    )
    .unwrap()
}

/// SSIMULACRA2, SSIM and PSNR of `back` against `source`, as CSV fields.
fn quality(source: &RgbImage, back: &RgbImage) -> String {
    let s2 = ssimulacra2::compute_frame_ssimulacra2(linear(source), linear(back)).unwrap();
    format!("{s2:.2},{:.5},{:.3}", ssim(source, back), psnr(source, back))
}

fn decode_avif(bytes: &[u8], tmp: &std::path::Path) -> RgbImage {
    let avif = tmp.join("x.avif");
    let png = tmp.join("x.png");
    std::fs::write(&avif, bytes).unwrap();
    let status = Command::new("avifdec")
        .args(["-d", "8"])
        .arg(&avif)
        .arg(&png)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("avifdec (apt-get install libavif-bin)");
    assert!(status.success(), "avifdec failed");
    image::open(&png).unwrap().into_rgb8()
}

fn main() {
    let args = args();
    let tmp = std::env::temp_dir().join(format!("avif-vs-webp-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(
        out,
        "image,width,height,original_format,original_bytes,decode_ms,codec,speed,quality,bytes,cpu_ms,wall_ms,ssimulacra2,ssim,psnr"
    )
    .unwrap();
    for file in &args.files {
        let name = std::path::Path::new(file).file_name().unwrap().to_string_lossy().into_owned();
        let input = std::fs::read(file).unwrap();
        let (decoded, decode_cpu, _) = measured(|| image::load_from_memory(&input).unwrap());
        let is_jpeg = input.starts_with(&[0xFF, 0xD8]);
        let rgb = downscale(decoded.into_rgb8(), args.max_width);
        let (w, h) = rgb.dimensions();
        // The original as a page would carry it at this size.
        let mut original = Vec::new();
        if is_jpeg {
            JpegEncoder::new_with_quality(&mut original, 90)
                .encode(rgb.as_raw(), w, h, ExtendedColorType::Rgb8)
                .unwrap();
        } else {
            PngEncoder::new_with_quality(&mut original, CompressionType::Default, PngFilter::Adaptive)
                .write_image(rgb.as_raw(), w, h, ExtendedColorType::Rgb8)
                .unwrap();
        }
        let prefix = format!(
            "{name},{w},{h},{},{},{:.1}",
            if is_jpeg { "jpeg" } else { "png" },
            original.len(),
            decode_cpu * 1e3
        );
        eprintln!("{name}: {w}×{h}, original {} B", original.len());

        for &q in &args.webp_qualities {
            let (bytes, cpu, wall) = measured(|| {
                webp::Encoder::from_rgb(rgb.as_raw(), w, h)
                    .encode_simple(false, f32::from(q))
                    .unwrap()
                    .to_vec()
            });
            let back = webp::Decoder::new(&bytes).decode().unwrap();
            let back = RgbImage::from_raw(w, h, back.to_vec()).expect("RGB back");
            writeln!(
                out,
                "{prefix},webp,,{q},{},{:.1},{:.1},{}",
                bytes.len(),
                cpu * 1e3,
                wall * 1e3,
                quality(&rgb, &back)
            )
            .unwrap();
        }
        out.flush().unwrap();

        let pixels: Vec<ravif::RGB8> = rgb
            .as_raw()
            .chunks_exact(3)
            .map(|p| ravif::RGB8::new(p[0], p[1], p[2]))
            .collect();
        for &speed in &args.speeds {
            for &q in &args.avif_qualities {
                let encoder = ravif::Encoder::new()
                    .with_quality(f32::from(q))
                    .with_speed(speed)
                    .with_num_threads(Some(1));
                let (encoded, cpu, wall) = measured(|| {
                    encoder
                        .encode_rgb(ravif::Img::new(&pixels[..], w as usize, h as usize))
                        .unwrap()
                });
                let bytes = encoded.avif_file;
                let back = decode_avif(&bytes, &tmp);
                writeln!(
                    out,
                    "{prefix},avif,{speed},{q},{},{:.1},{:.1},{}",
                    bytes.len(),
                    cpu * 1e3,
                    wall * 1e3,
                    quality(&rgb, &back)
                )
                .unwrap();
                eprintln!("  avif s{speed} q{q}: {} B, {:.0} ms CPU", bytes.len(), cpu * 1e3);
            }
            out.flush().unwrap();
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
