//! Image variants: a ladder of smaller renditions of one image, each about
//! [`STEP_RATIO`] of the bytes of the one before (Seshan, Stemm & Katz: 70%, 49%,
//! 34.3%, …), lowering quality first and dimensions where quality alone cannot
//! reach the step.
//!
//! Hostile input is the normal case here: an image's header is read and its
//! dimensions checked against [`ImageLimits`] before a single pixel is decoded, so
//! a 20,000 × 20,000 PNG of 1 KB is refused without allocating its 1.6 GB; the
//! decoder runs under the same limits (and a memory cap) in case the header lied.
//! Animated images are refused: a still variant would lose their meaning.
//!
//! AVIF (feature `avif`: ravif over rav1e, at rav1e's default speed 6) carries the
//! same quality as WebP in under half of its bytes but costs ~13× its CPU per
//! ladder (docs/fidelity.md), so its ladder is one of the [`LATER_FORMATS`]: made
//! after the others are kept and served.

use std::io::Cursor;

use fast_image_resize::images::Image as ResizeImage;
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::{CompressionType, FilterType as PngFilter, PngEncoder};
use image::{AnimationDecoder, ExtendedColorType, ImageEncoder, ImageReader, Limits};
use wirefold_http::fidelity::ImageFormat;

/// Each rung is at most this share of the bytes of the rung above it.
pub const STEP_RATIO: f64 = 0.7;

/// Qualities tried for lossy formats, best first: each step walks down from where
/// the step before stopped, so fidelity falls monotonically along the ladder.
const QUALITIES: [u8; 6] = [85, 75, 65, 55, 45, 35];

/// Encodes tried per output format, at most: bounds the CPU one image may cost.
const MAX_ENCODES: usize = 24;

/// A rendition narrower or lower than this is no use to anyone.
const MIN_SIDE: u32 = 16;

/// libwebp's largest side.
pub const WEBP_MAX_SIDE: u32 = 16_383;

/// Formats whose ladders are made in a second pass, after the ladders of
/// [`ladder_formats`] are kept and served: they cost an order of magnitude more CPU
/// (AVIF, in a build with the `avif` feature).
#[cfg(feature = "avif")]
pub const LATER_FORMATS: &[ImageFormat] = &[ImageFormat::Avif];
#[cfg(not(feature = "avif"))]
pub const LATER_FORMATS: &[ImageFormat] = &[];

/// rav1e's speed preset for AVIF rungs: its default, the measured best trade of
/// bytes for CPU (speed 8 saves a tenth of the CPU for 13% larger files).
#[cfg(feature = "avif")]
const AVIF_SPEED: u8 = 6;

/// What an image may be before wirefold decodes it.
#[derive(Clone, Copy, Debug)]
pub struct ImageLimits {
    /// Largest width or height, in pixels.
    pub max_side: u32,
    /// Largest width × height.
    pub max_pixels: u64,
    /// Largest encoded input, in bytes.
    pub max_input_bytes: usize,
}

#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ImageError {
    #[error("{len} bytes is more than the {max} an image may have for variants")]
    InputTooLarge { len: usize, max: usize },
    #[error("not a JPEG, PNG, GIF or WebP image")]
    UnknownFormat,
    #[error("the content is {found:?}, not the {declared:?} its Content-Type names")]
    FormatMismatch {
        declared: ImageFormat,
        found: ImageFormat,
    },
    #[error(
        "{width} × {height} pixels exceed the limits ({max_side} per side, {max_pixels} in all)"
    )]
    TooManyPixels {
        width: u32,
        height: u32,
        max_side: u32,
        max_pixels: u64,
    },
    #[error("animated images keep their original")]
    Animated,
    #[error("the image ends before its end marker (truncated)")]
    Truncated,
    #[error("not decodable: {0}")]
    Decode(String),
}

/// What an image's header says, read without decoding it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub format: ImageFormat,
    pub width: u32,
    pub height: u32,
}

/// Reads the format and dimensions from the header and checks them against
/// `limits`. Decodes nothing.
pub fn probe(bytes: &[u8], limits: &ImageLimits) -> Result<Probe, ImageError> {
    if bytes.len() > limits.max_input_bytes {
        return Err(ImageError::InputTooLarge {
            len: bytes.len(),
            max: limits.max_input_bytes,
        });
    }
    let reader = reader(bytes)?;
    let format = match reader.format() {
        Some(image::ImageFormat::Jpeg) => ImageFormat::Jpeg,
        Some(image::ImageFormat::Png) => ImageFormat::Png,
        Some(image::ImageFormat::Gif) => ImageFormat::Gif,
        Some(image::ImageFormat::WebP) => ImageFormat::Webp,
        // AVIF originals keep their original: no AVIF decoder is built in.
        _ => return Err(ImageError::UnknownFormat),
    };
    let (width, height) = reader
        .into_dimensions()
        .map_err(|e| ImageError::Decode(e.to_string()))?;
    let too_many = width == 0
        || height == 0
        || width > limits.max_side
        || height > limits.max_side
        || u64::from(width) * u64::from(height) > limits.max_pixels;
    if too_many {
        return Err(ImageError::TooManyPixels {
            width,
            height,
            max_side: limits.max_side,
            max_pixels: limits.max_pixels,
        });
    }
    Ok(Probe {
        format,
        width,
        height,
    })
}

fn reader(bytes: &[u8]) -> Result<ImageReader<Cursor<&[u8]>>, ImageError> {
    ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| ImageError::Decode(e.to_string()))
}

/// Decoded pixels, 8-bit RGBA, and whether every pixel is opaque.
pub struct Pixels {
    pub width: u32,
    pub height: u32,
    rgba: Vec<u8>,
    opaque: bool,
}

impl Pixels {
    /// Pixels from 8-bit RGBA rows; `None` unless `rgba` holds exactly
    /// `width` × `height` pixels.
    pub fn from_rgba(width: u32, height: u32, rgba: Vec<u8>) -> Option<Pixels> {
        let expected = (width as usize)
            .checked_mul(height as usize)?
            .checked_mul(4)?;
        if rgba.len() != expected {
            return None;
        }
        let opaque = rgba.chunks_exact(4).all(|p| p[3] == u8::MAX);
        Some(Pixels {
            width,
            height,
            rgba,
            opaque,
        })
    }
}

/// Decodes an image [`probe`] accepted, under the same limits. `declared` is the
/// format the response's `Content-Type` names: content that is something else is
/// refused (serving a variant of what the browser would not have shown is wrong).
pub fn decode(
    bytes: &[u8],
    declared: ImageFormat,
    limits: &ImageLimits,
) -> Result<Pixels, ImageError> {
    let probe = probe(bytes, limits)?;
    if probe.format != declared {
        return Err(ImageError::FormatMismatch {
            declared,
            found: probe.format,
        });
    }
    if !is_complete(bytes, probe.format) {
        return Err(ImageError::Truncated);
    }
    if is_animated(bytes, probe.format)? {
        return Err(ImageError::Animated);
    }
    let mut reader = reader(bytes)?;
    let mut decoder_limits = Limits::default();
    decoder_limits.max_image_width = Some(limits.max_side);
    decoder_limits.max_image_height = Some(limits.max_side);
    // The output (RGBA) and as much again for the decoder's own buffers.
    decoder_limits.max_alloc = Some(limits.max_pixels.saturating_mul(8));
    reader.limits(decoder_limits);
    let decoded = reader
        .decode()
        .map_err(|e| ImageError::Decode(e.to_string()))?;
    let opaque = !decoded.color().has_alpha();
    let rgba = decoded.into_rgba8();
    let opaque = opaque || rgba.pixels().all(|p| p.0[3] == u8::MAX);
    Ok(Pixels {
        width: rgba.width(),
        height: rgba.height(),
        rgba: rgba.into_raw(),
        opaque,
    })
}

/// Whether the image's container reaches its end marker. Decoders fill what a
/// truncated image lacks with grey; a browser shows it partly drawn. Neither makes a
/// variant worth sending instead of the original. Bytes after the marker are
/// tolerated (some cameras append them), within the last few KiB.
fn is_complete(bytes: &[u8], format: ImageFormat) -> bool {
    const TAIL: usize = 4096;
    let tail = &bytes[bytes.len().saturating_sub(TAIL)..];
    match format {
        ImageFormat::Jpeg => tail.windows(2).any(|w| w == [0xFF, 0xD9]),
        ImageFormat::Png => tail.windows(4).any(|w| w == b"IEND"),
        ImageFormat::Gif => tail.contains(&0x3B),
        // RIFF's size field counts the bytes after its first 8.
        ImageFormat::Webp => bytes
            .get(4..8)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .is_some_and(|size| (size as usize).saturating_add(8) <= bytes.len()),
        // `probe` never admits one.
        ImageFormat::Avif => false,
    }
}

fn is_animated(bytes: &[u8], format: ImageFormat) -> Result<bool, ImageError> {
    let decode_error = |e: image::ImageError| ImageError::Decode(e.to_string());
    match format {
        ImageFormat::Jpeg | ImageFormat::Avif => Ok(false),
        ImageFormat::Png => image::codecs::png::PngDecoder::new(Cursor::new(bytes))
            .and_then(|d| d.is_apng())
            .map_err(decode_error),
        ImageFormat::Webp => image::codecs::webp::WebPDecoder::new(Cursor::new(bytes))
            .map(|d| d.has_animation())
            .map_err(decode_error),
        ImageFormat::Gif => {
            let frames = image::codecs::gif::GifDecoder::new(Cursor::new(bytes))
                .map_err(decode_error)?
                .into_frames()
                .take(2)
                .count();
            Ok(frames > 1)
        }
    }
}

/// The formats a ladder is made in for an original of `format`: WebP for clients
/// that accept it, and one every client shows — the original's own, except GIF
/// (its encoder quantizes to 256 colours, slowly), whose still frames become PNG.
pub fn ladder_formats(original: ImageFormat, pixels: &Pixels) -> Vec<ImageFormat> {
    let universal = match original {
        ImageFormat::Jpeg if pixels.opaque => ImageFormat::Jpeg,
        ImageFormat::Webp => return vec![ImageFormat::Webp],
        _ => ImageFormat::Png,
    };
    vec![ImageFormat::Webp, universal]
}

/// One rung of a ladder.
#[derive(Clone, Debug)]
pub struct Rendition {
    pub format: ImageFormat,
    /// 1 for the first rung below the original.
    pub step: u8,
    pub width: u32,
    pub height: u32,
    pub bytes: Vec<u8>,
}

/// Makes up to `steps` renditions in `format`, each at most [`STEP_RATIO`] of the
/// bytes of the one before, the first of `original_len`. Stops early when a rung
/// would be smaller than `MIN_SIDE` or after `MAX_ENCODES` encodes.
pub fn ladder(
    pixels: &Pixels,
    original_len: usize,
    format: ImageFormat,
    steps: u8,
) -> Vec<Rendition> {
    let lossy = matches!(
        format,
        ImageFormat::Jpeg | ImageFormat::Webp | ImageFormat::Avif
    );
    let qualities: &[u8] = if lossy { &QUALITIES } else { &[100] };
    let mut rungs = Vec::new();
    let mut quality = 0;
    let mut scale = 1.0_f64;
    let mut resized: Option<(f64, Pixels)> = None;
    let mut previous = original_len as f64;
    let mut encodes = 0;
    for step in 1..=steps {
        let target = previous * STEP_RATIO;
        loop {
            if encodes >= MAX_ENCODES {
                return rungs;
            }
            let width = (f64::from(pixels.width) * scale).round() as u32;
            let height = (f64::from(pixels.height) * scale).round() as u32;
            if width < MIN_SIDE || height < MIN_SIDE {
                return rungs;
            }
            if resized.as_ref().is_none_or(|(s, _)| *s != scale) {
                let Some(smaller) = resize(pixels, width, height) else {
                    return rungs;
                };
                resized = Some((scale, smaller));
            }
            let Some((_, source)) = resized.as_ref() else {
                return rungs;
            };
            let Some(bytes) = encode(source, format, qualities[quality]) else {
                return rungs;
            };
            encodes += 1;
            if (bytes.len() as f64) <= target {
                previous = bytes.len() as f64;
                rungs.push(Rendition {
                    format,
                    step,
                    width,
                    height,
                    bytes,
                });
                break;
            }
            if quality + 1 < qualities.len() {
                quality += 1;
            } else {
                // Quality is at its floor: bytes follow pixels, so shrink the area
                // by the missing share (with a margin), at most halving each side.
                let factor = (target / bytes.len() as f64).sqrt() * 0.97;
                scale *= factor.clamp(0.5, 0.95);
            }
        }
    }
    rungs
}

/// `pixels` at `width` × `height` (Lanczos3, alpha-aware); the same pixels when
/// the size is unchanged.
fn resize(pixels: &Pixels, width: u32, height: u32) -> Option<Pixels> {
    if width == pixels.width && height == pixels.height {
        return Some(Pixels {
            width,
            height,
            rgba: pixels.rgba.clone(),
            opaque: pixels.opaque,
        });
    }
    let source = ResizeImage::from_vec_u8(
        pixels.width,
        pixels.height,
        pixels.rgba.clone(),
        PixelType::U8x4,
    )
    .ok()?;
    let mut target = ResizeImage::new(width, height, PixelType::U8x4);
    let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Lanczos3));
    Resizer::new().resize(&source, &mut target, &options).ok()?;
    Some(Pixels {
        width,
        height,
        rgba: target.into_vec(),
        opaque: pixels.opaque,
    })
}

fn rgb(pixels: &Pixels) -> Vec<u8> {
    pixels
        .rgba
        .chunks_exact(4)
        .flat_map(|p| [p[0], p[1], p[2]])
        .collect()
}

/// A photograph-like picture (colour gradients under a fine texture of noise drawn
/// from `seed`) as a JPEG at `quality`: what tests and benchmarks feed the ladders
/// when no real photograph is at hand. Its bytes depend only on the arguments.
pub fn sample_photo_jpeg(width: u32, height: u32, seed: u32, quality: u8) -> Option<Vec<u8>> {
    let mut state = seed;
    let mut rgba = Vec::with_capacity(width as usize * height as usize * 4);
    for y in 0..height {
        for x in 0..width {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let noise = f64::from(state % 28);
            let fx = f64::from(x) / f64::from(width);
            let fy = f64::from(y) / f64::from(height);
            rgba.extend_from_slice(&[
                (30.0 + 170.0 * fx + noise) as u8,
                (50.0 + 150.0 * (fx * 9.0).sin().abs() * fy + noise) as u8,
                (210.0 - 160.0 * fy + noise) as u8,
                255,
            ]);
        }
    }
    encode(
        &Pixels::from_rgba(width, height, rgba)?,
        ImageFormat::Jpeg,
        quality,
    )
}

/// `pixels` encoded as `format` at `quality` (lossy formats; PNG is lossless and
/// ignores it). `None` when the encoder fails (a side beyond its range, say).
pub fn encode(pixels: &Pixels, format: ImageFormat, quality: u8) -> Option<Vec<u8>> {
    let (w, h) = (pixels.width, pixels.height);
    let mut out = Vec::new();
    match format {
        ImageFormat::Webp => {
            if w > WEBP_MAX_SIDE || h > WEBP_MAX_SIDE {
                return None;
            }
            let rgb_buffer;
            let encoder = if pixels.opaque {
                rgb_buffer = rgb(pixels);
                webp::Encoder::from_rgb(&rgb_buffer, w, h)
            } else {
                webp::Encoder::from_rgba(&pixels.rgba, w, h)
            };
            let memory = encoder.encode_simple(false, f32::from(quality)).ok()?;
            out.extend_from_slice(&memory);
        }
        ImageFormat::Jpeg => {
            JpegEncoder::new_with_quality(&mut out, quality)
                .encode(&rgb(pixels), w, h, ExtendedColorType::Rgb8)
                .ok()?;
        }
        // Variants are never made as GIF (see `ladder_formats`).
        ImageFormat::Gif => return None,
        ImageFormat::Avif => return encode_avif(pixels, quality),
        ImageFormat::Png => {
            let encoder = PngEncoder::new_with_quality(
                &mut out,
                CompressionType::Default,
                PngFilter::Adaptive,
            );
            if pixels.opaque {
                encoder
                    .write_image(&rgb(pixels), w, h, ExtendedColorType::Rgb8)
                    .ok()?;
            } else {
                encoder
                    .write_image(&pixels.rgba, w, h, ExtendedColorType::Rgba8)
                    .ok()?;
            }
        }
    }
    Some(out)
}

/// `pixels` as AVIF at ravif's `quality`, on the calling thread (the maker's CPU
/// budget counts one).
#[cfg(feature = "avif")]
fn encode_avif(pixels: &Pixels, quality: u8) -> Option<Vec<u8>> {
    let encoder = ravif::Encoder::new()
        .with_quality(f32::from(quality))
        .with_speed(AVIF_SPEED)
        .with_num_threads(Some(1));
    let (w, h) = (pixels.width as usize, pixels.height as usize);
    let encoded = if pixels.opaque {
        let rgb: Vec<ravif::RGB8> = pixels
            .rgba
            .chunks_exact(4)
            .map(|p| ravif::RGB8::new(p[0], p[1], p[2]))
            .collect();
        encoder.encode_rgb(ravif::Img::new(&rgb[..], w, h))
    } else {
        let rgba: Vec<ravif::RGBA8> = pixels
            .rgba
            .chunks_exact(4)
            .map(|p| ravif::RGBA8::new(p[0], p[1], p[2], p[3]))
            .collect();
        encoder.encode_rgba(ravif::Img::new(&rgba[..], w, h))
    };
    encoded.ok().map(|e| e.avif_file)
}

/// A build without the `avif` feature makes no AVIF.
#[cfg(not(feature = "avif"))]
fn encode_avif(_pixels: &Pixels, _quality: u8) -> Option<Vec<u8>> {
    None
}

#[cfg(test)]
mod tests;
