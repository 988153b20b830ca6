//! The byte layout of a delta file (RFC 3284 §4): the file header and window framing.
//! Parsing distinguishes "needs more input" (`Ok(None)`) from malformed input (`Err`).

use super::error::VcdiffError;
use super::varint::{varint_len, write_varint, Reader};

/// 'V' 'C' 'D' with their high bits set, then version 0.
const MAGIC: [u8; 3] = [0xD6, 0xC3, 0xC4];
const VERSION: u8 = 0;

const HDR_DECOMPRESS: u8 = 0x01;
const HDR_CODETABLE: u8 = 0x02;
/// Not in the RFC: xdelta3's application header (it holds file names); skipped.
const HDR_APPHEADER: u8 = 0x04;

const WIN_SOURCE: u8 = 0x01;
const WIN_TARGET: u8 = 0x02;
/// Not in the RFC: xdelta3 stores the window's Adler-32 after the section lengths.
const WIN_ADLER32: u8 = 0x04;

/// xdelta3 app headers are a few file names; anything bigger is hostile.
const MAX_APP_HEADER: u64 = 64 * 1024;
/// A window cannot need more than this many delta bytes per target byte (one data byte plus
/// an opcode, a size and a 64-bit address for every byte produced), plus fixed overhead. It
/// stops a hostile length from making a streaming decoder buffer without bound.
const MAX_DELTA_BYTES_PER_TARGET_BYTE: u64 = 16;
const MAX_WINDOW_OVERHEAD: u64 = 64;

/// Where a window's source segment comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SegmentOrigin {
    /// The source (dictionary) file.
    Source,
    /// Target bytes produced by earlier windows.
    EarlierTarget,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Segment {
    pub origin: SegmentOrigin,
    pub position: u64,
    pub length: u64,
}

/// One complete window: its header fields and its three sections.
pub(crate) struct Window<'a> {
    pub segment: Option<Segment>,
    pub target_len: usize,
    pub adler32: Option<u32>,
    pub data: &'a [u8],
    pub instructions: &'a [u8],
    pub addresses: &'a [u8],
    /// Bytes of input this window occupied, header included.
    pub encoded_len: usize,
}

pub(crate) fn write_file_header(out: &mut Vec<u8>) {
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(0); // No secondary compressor, default code table.
}

/// Returns the header's length once all of it is in `buf`.
pub(crate) fn parse_file_header(buf: &[u8]) -> Result<Option<usize>, VcdiffError> {
    let available = buf.len().min(MAGIC.len());
    if buf[..available] != MAGIC[..available] {
        return Err(VcdiffError::BadMagic);
    }
    let mut r = Reader::new(buf, "file header");
    match parse_file_header_fields(&mut r) {
        Ok(()) => Ok(Some(r.position())),
        Err(VcdiffError::Truncated { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

fn parse_file_header_fields(r: &mut Reader) -> Result<(), VcdiffError> {
    r.take(MAGIC.len())?;
    let version = r.byte()?;
    if version != VERSION {
        return Err(VcdiffError::UnsupportedVersion(version));
    }
    let indicator = r.byte()?;
    let unknown = indicator & !(HDR_DECOMPRESS | HDR_CODETABLE | HDR_APPHEADER);
    if unknown != 0 {
        return Err(VcdiffError::UnsupportedHeaderFlags(unknown));
    }
    if indicator & HDR_DECOMPRESS != 0 {
        return Err(VcdiffError::UnsupportedSecondaryCompressor(r.byte()?));
    }
    if indicator & HDR_CODETABLE != 0 {
        return Err(VcdiffError::UnsupportedCodeTable);
    }
    if indicator & HDR_APPHEADER != 0 {
        let len = r.varint()?;
        if len > MAX_APP_HEADER {
            return Err(VcdiffError::OversizedField {
                what: "application header",
                len,
            });
        }
        r.take(len as usize)?;
    }
    Ok(())
}

/// Appends one window whose three sections (data, instructions, addresses) are encoded.
pub(crate) fn write_window(
    out: &mut Vec<u8>,
    source_segment: Option<(u64, u64)>,
    target_len: usize,
    adler32: Option<u32>,
    sections: [&[u8]; 3],
) {
    let checksum_flag = if adler32.is_some() { WIN_ADLER32 } else { 0 };
    match source_segment {
        Some((position, length)) => {
            out.push(WIN_SOURCE | checksum_flag);
            write_varint(out, length);
            write_varint(out, position);
        }
        None => out.push(checksum_flag),
    }
    let delta_len = varint_len(target_len as u64)
        + 1
        + if adler32.is_some() { 4 } else { 0 }
        + sections
            .iter()
            .map(|s| varint_len(s.len() as u64) + s.len())
            .sum::<usize>();
    write_varint(out, delta_len as u64);
    write_varint(out, target_len as u64);
    out.push(0); // Delta indicator: no section is compressed.
    for section in sections {
        write_varint(out, section.len() as u64);
    }
    if let Some(checksum) = adler32 {
        out.extend_from_slice(&checksum.to_be_bytes());
    }
    for section in sections {
        out.extend_from_slice(section);
    }
}

/// Parses the window at the start of `buf`, or `Ok(None)` if `buf` holds only part of it.
/// A declared target size over `output_budget` fails as soon as it is read, before the rest
/// of the window is buffered.
pub(crate) fn parse_window(
    buf: &[u8],
    output_budget: usize,
    limit: usize,
) -> Result<Option<Window<'_>>, VcdiffError> {
    let mut r = Reader::new(buf, "window header");
    let framing = match parse_window_framing(&mut r) {
        Ok(framing) => framing,
        Err(VcdiffError::Truncated { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let body_start = framing.body_start;
    let complete = buf.len() - body_start >= framing.delta_len;
    let body = &buf[body_start..body_start.saturating_add(framing.delta_len).min(buf.len())];
    match parse_delta_encoding(body, framing, output_budget, limit) {
        Ok(window) if complete => Ok(Some(window)),
        Ok(_) => Ok(None),
        Err(VcdiffError::Truncated { .. }) if !complete => Ok(None),
        Err(e) => Err(e),
    }
}

#[derive(Clone, Copy)]
struct Framing {
    indicator: u8,
    segment: Option<Segment>,
    /// Offset of the delta encoding within the window.
    body_start: usize,
    delta_len: usize,
}

fn parse_window_framing(r: &mut Reader) -> Result<Framing, VcdiffError> {
    let indicator = r.byte()?;
    let unknown = indicator & !(WIN_SOURCE | WIN_TARGET | WIN_ADLER32);
    if unknown != 0 {
        return Err(VcdiffError::UnsupportedWindowFlags(unknown));
    }
    let origin = match indicator & (WIN_SOURCE | WIN_TARGET) {
        0 => None,
        WIN_SOURCE => Some(SegmentOrigin::Source),
        WIN_TARGET => Some(SegmentOrigin::EarlierTarget),
        _ => return Err(VcdiffError::ConflictingWindowFlags(indicator)),
    };
    let segment = match origin {
        Some(origin) => {
            let length = r.varint()?;
            let position = r.varint()?;
            Some(Segment {
                origin,
                position,
                length,
            })
        }
        None => None,
    };
    let delta_len = r.size()?;
    Ok(Framing {
        indicator,
        segment,
        body_start: r.position(),
        delta_len,
    })
}

fn parse_delta_encoding<'a>(
    body: &'a [u8],
    framing: Framing,
    output_budget: usize,
    limit: usize,
) -> Result<Window<'a>, VcdiffError> {
    let mut r = Reader::new(body, "window's delta encoding");
    let target_len = r.varint()?;
    if target_len > output_budget as u64 {
        return Err(VcdiffError::LimitExceeded { limit });
    }
    if framing.delta_len as u64
        > target_len
            .saturating_mul(MAX_DELTA_BYTES_PER_TARGET_BYTE)
            .saturating_add(MAX_WINDOW_OVERHEAD)
    {
        return Err(VcdiffError::OversizedField {
            what: "window delta encoding",
            len: framing.delta_len as u64,
        });
    }
    let delta_indicator = r.byte()?;
    if delta_indicator != 0 {
        return Err(VcdiffError::UnsupportedCompressedSections(delta_indicator));
    }
    let data_len = r.varint()?;
    let inst_len = r.varint()?;
    let addr_len = r.varint()?;
    let adler32 = if framing.indicator & WIN_ADLER32 != 0 {
        let b = r.take(4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    } else {
        None
    };
    let declared = data_len.saturating_add(inst_len).saturating_add(addr_len);
    let actual = (framing.delta_len - r.position()) as u64;
    if declared != actual {
        return Err(VcdiffError::SizeMismatch {
            what: "window's section lengths",
            declared,
            actual,
        });
    }
    // Each length is at most `actual`, which came from a usize.
    Ok(Window {
        segment: framing.segment,
        target_len: target_len as usize,
        adler32,
        data: r.take(data_len as usize)?,
        instructions: r.take(inst_len as usize)?,
        addresses: r.take(addr_len as usize)?,
        encoded_len: framing.body_start.saturating_add(framing.delta_len),
    })
}
