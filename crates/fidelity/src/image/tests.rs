#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

use super::*;
use image::{Rgba, RgbaImage};

const LIMITS: ImageLimits = ImageLimits {
    max_side: 16_383,
    max_pixels: 40_000_000,
    max_input_bytes: 16 << 20,
};

/// A photograph-like picture: smooth gradients with fine texture, which is what
/// makes quality and size trade against each other.
fn photo(width: u32, height: u32, alpha: bool) -> RgbaImage {
    let mut seed = 0x2545_f491_u32;
    RgbaImage::from_fn(width, height, |x, y| {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        let noise = (seed % 24) as f64;
        let fx = f64::from(x) / f64::from(width);
        let fy = f64::from(y) / f64::from(height);
        let r = 40.0 + 160.0 * fx + noise;
        let g = 60.0 + 120.0 * (fx * 7.0).sin().abs() * fy + noise;
        let b = 200.0 - 150.0 * fy + noise;
        let a = if alpha {
            (255.0 * (1.0 - fx * 0.8)) as u8
        } else {
            255
        };
        Rgba([r as u8, g as u8, b as u8, a])
    })
}

fn jpeg(image: &RgbaImage, quality: u8) -> Vec<u8> {
    let rgb = image::DynamicImage::ImageRgba8(image.clone()).into_rgb8();
    let mut out = Vec::new();
    JpegEncoder::new_with_quality(&mut out, quality)
        .encode(&rgb, rgb.width(), rgb.height(), ExtendedColorType::Rgb8)
        .expect("jpeg encodes");
    out
}

fn png(image: &RgbaImage) -> Vec<u8> {
    let mut out = Vec::new();
    PngEncoder::new(&mut out)
        .write_image(
            image,
            image.width(),
            image.height(),
            ExtendedColorType::Rgba8,
        )
        .expect("png encodes");
    out
}

/// Every rung is at most 70% of the one above, decodes, and has the size it claims.
fn check_ladder(original_len: usize, rungs: &[Rendition], format: ImageFormat) {
    let mut previous = original_len as f64;
    for rung in rungs {
        assert_eq!(rung.format, format);
        assert!(
            rung.bytes.len() as f64 <= previous * STEP_RATIO,
            "step {}: {} bytes after {previous}",
            rung.step,
            rung.bytes.len()
        );
        previous = rung.bytes.len() as f64;
        let found = probe(&rung.bytes, &LIMITS).expect("a rung probes");
        assert_eq!(
            (found.format, found.width, found.height),
            (format, rung.width, rung.height)
        );
        decode(&rung.bytes, format, &LIMITS).expect("a rung decodes");
    }
}

#[test]
fn a_photo_gets_a_ladder_in_webp_and_jpeg() {
    let original = jpeg(&photo(480, 320, false), 92);
    let pixels = decode(&original, ImageFormat::Jpeg, &LIMITS).expect("decodes");
    let formats = ladder_formats(ImageFormat::Jpeg, &pixels);
    assert_eq!(formats, [ImageFormat::Webp, ImageFormat::Jpeg]);
    for format in formats {
        let rungs = ladder(&pixels, original.len(), format, 6);
        assert!(rungs.len() >= 4, "{format:?}: {} rungs", rungs.len());
        check_ladder(original.len(), &rungs, format);
        // The smallest rungs got there by shrinking.
        let last = rungs.last().expect("rungs");
        assert!(
            last.width < 480,
            "{format:?} {}x{}",
            last.width,
            last.height
        );
    }
}

#[test]
fn a_translucent_png_gets_webp_and_png_rungs() {
    let original = png(&photo(200, 150, true));
    let pixels = decode(&original, ImageFormat::Png, &LIMITS).expect("decodes");
    assert!(!pixels.opaque);
    let formats = ladder_formats(ImageFormat::Png, &pixels);
    assert_eq!(formats, [ImageFormat::Webp, ImageFormat::Png]);
    let rungs = ladder(&pixels, original.len(), ImageFormat::Png, 3);
    assert!(!rungs.is_empty());
    check_ladder(original.len(), &rungs, ImageFormat::Png);
}

/// An AVIF file as libavif's `avifdec` (dav1d: none of rav1e's code) decodes it,
/// as PNG.
#[cfg(feature = "avif")]
fn avifdec(avif: &[u8]) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (input, output) = (dir.path().join("in.avif"), dir.path().join("out.png"));
    std::fs::write(&input, avif).expect("written");
    let run = std::process::Command::new("avifdec")
        .arg(&input)
        .arg(&output)
        .output()
        .expect("avifdec runs (Debian package libavif-bin)");
    assert!(
        run.status.success(),
        "avifdec: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    std::fs::read(&output).expect("avifdec wrote a PNG")
}

/// AVIF rungs (the later pass): ISO-BMFF files of brand `avif`, each at most 70% of
/// the one above, which a decoder other than ours shows at the rung's size, with
/// the original's transparency.
#[cfg(feature = "avif")]
#[test]
fn avif_rungs_decode_in_libavif_at_their_size() {
    assert_eq!(LATER_FORMATS, [ImageFormat::Avif]);
    for (original, format, alpha) in [
        (jpeg(&photo(480, 320, false), 92), ImageFormat::Jpeg, false),
        (png(&photo(200, 150, true)), ImageFormat::Png, true),
    ] {
        let pixels = decode(&original, format, &LIMITS).expect("decodes");
        let rungs = ladder(&pixels, original.len(), ImageFormat::Avif, 6);
        assert!(rungs.len() >= 3, "{format:?}: {} rungs", rungs.len());
        let mut previous = original.len() as f64;
        for rung in &rungs {
            assert_eq!(rung.format, ImageFormat::Avif);
            assert_eq!(
                &rung.bytes[4..12],
                b"ftypavif",
                "{format:?} step {}",
                rung.step
            );
            assert!(rung.bytes.len() as f64 <= previous * STEP_RATIO);
            previous = rung.bytes.len() as f64;
            let shown = avifdec(&rung.bytes);
            let back = decode(&shown, ImageFormat::Png, &LIMITS).expect("a PNG");
            assert_eq!((back.width, back.height), (rung.width, rung.height));
            assert_eq!(back.opaque, !alpha, "{format:?} step {}", rung.step);
        }
    }
}

/// A PNG signature and an IHDR chunk naming `width` × `height`, with a valid CRC,
/// then an IDAT of a few bytes: what a decompression bomb looks like from outside.
fn png_header(width: u32, height: u32) -> Vec<u8> {
    fn crc32(data: &[u8]) -> u32 {
        let mut crc = flate2::Crc::new();
        crc.update(data);
        crc.sum()
    }
    let chunk = |out: &mut Vec<u8>, kind: &[u8], data: &[u8]| {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut body = kind.to_vec();
        body.extend_from_slice(data);
        out.extend_from_slice(&body);
        out.extend_from_slice(&crc32(&body).to_be_bytes());
    };
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = width.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(
        &mut out,
        b"IDAT",
        &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    );
    chunk(&mut out, b"IEND", &[]);
    out
}

#[test]
fn a_bomb_is_refused_from_its_header() {
    let bomb = png_header(20_000, 20_000);
    assert!(bomb.len() < 1024);
    let refused = ImageError::TooManyPixels {
        width: 20_000,
        height: 20_000,
        max_side: LIMITS.max_side,
        max_pixels: LIMITS.max_pixels,
    };
    assert_eq!(probe(&bomb, &LIMITS), Err(refused.clone()));
    assert!(matches!(decode(&bomb, ImageFormat::Png, &LIMITS), Err(e) if e == refused));
    // Within the side limit but over the area: 16,000 × 16,000 is 256 Mpx.
    let wide = png_header(16_000, 16_000);
    assert!(matches!(
        probe(&wide, &LIMITS),
        Err(ImageError::TooManyPixels { .. })
    ));
    // A GIF's logical screen says 65,535 × 65,535 in ten bytes.
    let mut gif = b"GIF89a".to_vec();
    gif.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x3b]);
    assert!(probe(&gif, &LIMITS).is_err());
}

#[test]
fn broken_images_are_errors_never_panics() {
    let original = jpeg(&photo(64, 64, false), 80);
    for cut in [10, original.len() / 3, original.len() - 2] {
        assert!(
            decode(&original[..cut], ImageFormat::Jpeg, &LIMITS).is_err(),
            "cut at {cut}"
        );
    }
    let png_bytes = png(&photo(40, 40, true));
    assert_eq!(
        decode(
            &png_bytes[..png_bytes.len() - 12],
            ImageFormat::Png,
            &LIMITS
        )
        .err(),
        Some(ImageError::Truncated)
    );
    assert_eq!(
        probe(b"not an image at all", &LIMITS),
        Err(ImageError::UnknownFormat)
    );
    assert_eq!(probe(&[], &LIMITS), Err(ImageError::UnknownFormat));
    let mut garbage = b"\x89PNG\r\n\x1a\n".to_vec();
    garbage.extend((0..200u32).map(|i| (i * 37 % 251) as u8));
    assert!(decode(&garbage, ImageFormat::Png, &LIMITS).is_err());
    let png = png(&photo(32, 32, false));
    assert_eq!(
        decode(&png, ImageFormat::Jpeg, &LIMITS).err(),
        Some(ImageError::FormatMismatch {
            declared: ImageFormat::Jpeg,
            found: ImageFormat::Png
        })
    );
    let small = ImageLimits {
        max_input_bytes: 100,
        ..LIMITS
    };
    assert!(matches!(
        probe(&png, &small),
        Err(ImageError::InputTooLarge { .. })
    ));
}

#[test]
fn animated_gifs_keep_their_original() {
    let mut out = Vec::new();
    {
        let mut encoder = image::codecs::gif::GifEncoder::new(&mut out);
        let frames = (0..2)
            .map(|i| image::Frame::new(RgbaImage::from_pixel(8, 8, Rgba([i * 100, 0, 0, 255]))));
        encoder.encode_frames(frames).expect("gif encodes");
    }
    assert_eq!(
        decode(&out, ImageFormat::Gif, &LIMITS).err(),
        Some(ImageError::Animated)
    );
}
