//! Decoding: a one-shot `decode` and a streaming `VcdiffDecoder` that emits one window at a time.

use super::address_cache::AddressCache;
use super::checksum::adler32;
use super::code_table::{InstKind, DEFAULT_CODE_TABLE};
use super::error::VcdiffError;
use super::format::{parse_file_header, parse_window, SegmentOrigin, Window};
use super::varint::Reader;

/// How much earlier output the streaming decoder keeps for `VCD_TARGET` windows. The RFC
/// lets such a window reach back anywhere, but keeping all output would defeat bounded
/// memory; encoders in practice (xdelta3 cannot even decode them) reach back a window or so.
const STREAMING_TARGET_HISTORY: usize = 8 << 20;

/// Output space reserved ahead of decoding a window.
const MAX_RESERVE: usize = 1 << 20;

/// A delta without windows is taken as cut short after its header: every encoder writes at
/// least one (xdelta3 refuses to decode one without).
const NO_WINDOW: VcdiffError = VcdiffError::Truncated {
    what: "first window",
};

/// Decodes a whole delta against `source`, producing at most `limit` bytes.
pub fn decode(source: &[u8], delta: &[u8], limit: usize) -> Result<Vec<u8>, VcdiffError> {
    let mut pos = parse_file_header(delta)?.ok_or(VcdiffError::Truncated {
        what: "file header",
    })?;
    let mut out = Vec::new();
    let mut state = WindowState::new();
    while pos < delta.len() {
        let window = parse_window(&delta[pos..], limit - out.len(), limit)?.ok_or(
            VcdiffError::Truncated {
                what: "last window",
            },
        )?;
        // All earlier output is at hand, so VCD_TARGET may reach back to its very start.
        state.decode_window(&window, source, &mut out, 0)?;
        pos += window.encoded_len;
    }
    if state.windows_decoded == 0 {
        return Err(NO_WINDOW);
    }
    Ok(out)
}

/// A streaming decoder: feed the delta in chunks of any size with [`VcdiffDecoder::write`], which
/// returns the target bytes of every window completed so far, then call [`VcdiffDecoder::finish`].
///
/// Memory is bounded by one window's delta and output plus a fixed `VCD_TARGET` history.
/// After any error the decoder is poisoned; discard everything it emitted.
pub struct VcdiffDecoder<'s> {
    source: &'s [u8],
    limit: usize,
    /// Received input not yet decoded: the file header or a partial window.
    pending: Vec<u8>,
    header_done: bool,
    produced: usize,
    /// The most recent output, for VCD_TARGET windows; `history[0]` is at `history_start`.
    history: Vec<u8>,
    history_start: u64,
    state: WindowState,
    failed: bool,
}

impl<'s> VcdiffDecoder<'s> {
    pub fn new(source: &'s [u8], limit: usize) -> Self {
        Self {
            source,
            limit,
            pending: Vec::new(),
            header_done: false,
            produced: 0,
            history: Vec::new(),
            history_start: 0,
            state: WindowState::new(),
            failed: false,
        }
    }

    /// Accepts the next chunk of the delta and returns the target bytes of the windows it
    /// completed (possibly none).
    pub fn write(&mut self, chunk: &[u8]) -> Result<Vec<u8>, VcdiffError> {
        if self.failed {
            return Err(VcdiffError::Poisoned);
        }
        self.pending.extend_from_slice(chunk);
        let result = self.decode_pending();
        if result.is_err() {
            self.failed = true;
            self.pending = Vec::new();
            self.history = Vec::new();
        }
        result
    }

    /// Checks that the delta ended at a window boundary.
    pub fn finish(self) -> Result<(), VcdiffError> {
        if self.failed {
            Err(VcdiffError::Poisoned)
        } else if !self.header_done {
            Err(VcdiffError::Truncated {
                what: "file header",
            })
        } else if !self.pending.is_empty() {
            Err(VcdiffError::Truncated {
                what: "last window",
            })
        } else if self.state.windows_decoded == 0 {
            Err(NO_WINDOW)
        } else {
            Ok(())
        }
    }

    fn decode_pending(&mut self) -> Result<Vec<u8>, VcdiffError> {
        let mut emitted = Vec::new();
        let mut consumed = 0;
        if !self.header_done {
            match parse_file_header(&self.pending)? {
                Some(len) => {
                    consumed = len;
                    self.header_done = true;
                }
                None => return Ok(emitted),
            }
        }
        while let Some(window) = parse_window(
            &self.pending[consumed..],
            self.limit - self.produced,
            self.limit,
        )? {
            let window_start = self.history.len();
            self.state.decode_window(
                &window,
                self.source,
                &mut self.history,
                self.history_start,
            )?;
            emitted.extend_from_slice(&self.history[window_start..]);
            self.produced += self.history.len() - window_start;
            consumed += window.encoded_len;
            // Trim only when twice over, so the memmove is amortised over many windows.
            if self.history.len() > 2 * STREAMING_TARGET_HISTORY {
                let excess = self.history.len() - STREAMING_TARGET_HISTORY;
                self.history.drain(..excess);
                self.history_start += excess as u64;
            }
        }
        self.pending.drain(..consumed);
        Ok(emitted)
    }
}

/// What persists from one window to the next.
struct WindowState {
    cache: AddressCache,
    windows_decoded: u64,
}

impl WindowState {
    fn new() -> Self {
        Self {
            cache: AddressCache::new(),
            windows_decoded: 0,
        }
    }

    /// Appends the window's target bytes to `out`, whose existing bytes are earlier output
    /// starting at absolute target offset `out_start`. On error `out` holds garbage.
    fn decode_window(
        &mut self,
        window: &Window,
        source: &[u8],
        out: &mut Vec<u8>,
        out_start: u64,
    ) -> Result<(), VcdiffError> {
        let index = self.windows_decoded;
        self.windows_decoded += 1;
        let earlier_target;
        let segment: &[u8] = match window.segment {
            None => &[],
            Some(seg) => {
                let (origin, available, base, start) = match seg.origin {
                    SegmentOrigin::Source => ("source", source, 0, 0),
                    SegmentOrigin::EarlierTarget => {
                        ("earlier target output", &out[..], out_start, out_start)
                    }
                };
                let out_of_range = || VcdiffError::SegmentOutOfRange {
                    origin,
                    position: seg.position,
                    length: seg.length,
                    available: start + available.len() as u64,
                };
                let from = seg.position.checked_sub(base).ok_or_else(out_of_range)?;
                let to = from.checked_add(seg.length).ok_or_else(out_of_range)?;
                if to > available.len() as u64 {
                    return Err(out_of_range());
                }
                match seg.origin {
                    SegmentOrigin::Source => &source[from as usize..to as usize],
                    // Copied out because the window's own output is appended to `out`.
                    SegmentOrigin::EarlierTarget => {
                        earlier_target = out[from as usize..to as usize].to_vec();
                        &earlier_target
                    }
                }
            }
        };

        let window_start = out.len();
        // The declared size is within the limit but may be a lie; let a huge window grow.
        out.reserve(window.target_len.min(MAX_RESERVE));
        self.cache.reset();
        let mut data = Reader::new(window.data, "data section");
        let mut instructions = Reader::new(window.instructions, "instruction section");
        let mut addresses = Reader::new(window.addresses, "address section");
        let overrun = |e: VcdiffError| match e {
            VcdiffError::Truncated { what } => VcdiffError::SectionOverrun { section: what },
            other => other,
        };
        while !instructions.is_empty() {
            let opcode = instructions.byte().map_err(overrun)?;
            for half in DEFAULT_CODE_TABLE[opcode as usize] {
                if half.kind == InstKind::Noop {
                    continue;
                }
                let size = match half.size {
                    0 => instructions.size().map_err(overrun)?,
                    size => size as usize,
                };
                let produced = out.len() - window_start;
                if size > window.target_len - produced {
                    return Err(VcdiffError::BadInstruction(
                        "instruction overruns the target window size",
                    ));
                }
                match half.kind {
                    InstKind::Add => out.extend_from_slice(data.take(size).map_err(overrun)?),
                    InstKind::Run => {
                        let byte = data.byte().map_err(overrun)?;
                        out.resize(out.len() + size, byte);
                    }
                    InstKind::Copy => {
                        let here = (segment.len() + produced) as u64;
                        let address = self
                            .cache
                            .decode(half.mode, here, &mut addresses)
                            .map_err(overrun)?;
                        copy_from_superstring(segment, out, window_start, address as usize, size);
                    }
                    InstKind::Noop => unreachable!(),
                }
            }
        }

        let produced = out.len() - window_start;
        for (what, declared, actual) in [
            ("target window", window.target_len, produced),
            ("data section", window.data.len(), data.position()),
            (
                "address section",
                window.addresses.len(),
                addresses.position(),
            ),
        ] {
            if declared != actual {
                return Err(VcdiffError::SizeMismatch {
                    what,
                    declared: declared as u64,
                    actual: actual as u64,
                });
            }
        }
        if let Some(expected) = window.adler32 {
            let actual = adler32(&out[window_start..]);
            if actual != expected {
                return Err(VcdiffError::ChecksumMismatch {
                    window: index,
                    expected,
                    actual,
                });
            }
        }
        Ok(())
    }
}

/// COPY from U = segment ++ target window (RFC 3284 §3). `address` precedes the current
/// position, so every byte read exists by the time it is read; a copy may run from the
/// segment into the window, and overlap its own output (which repeats a period).
fn copy_from_superstring(
    segment: &[u8],
    out: &mut Vec<u8>,
    window_start: usize,
    mut address: usize,
    mut size: usize,
) {
    if address < segment.len() {
        let n = size.min(segment.len() - address);
        out.extend_from_slice(&segment[address..address + n]);
        address += n;
        size -= n;
    }
    if size == 0 {
        return;
    }
    let from = window_start + (address - segment.len());
    // Copying out[from..out.len()] keeps out.len() - from a multiple of the period, so each
    // round may copy everything written so far: the chunk doubles instead of crawling.
    while size > 0 {
        let chunk = size.min(out.len() - from);
        out.extend_from_within(from..from + chunk);
        size -= chunk;
    }
}
