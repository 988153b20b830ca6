//! Encoding: the target is cut into windows; each window is matched against a source segment
//! (chosen to cover where the window's content sits in the source) and against itself.

use std::ops::Range;

use super::checksum::adler32;
use super::format::write_file_header;
use super::instruction_writer::InstructionWriter;
use super::matcher::{Match, SearchLimits, SearchSpace, ShortChains, SourceIndex, MIN_MATCH};

/// xdelta3 3.0.11 refuses target windows over 16 MiB (`XD3_HARDMAXWINSIZE`).
const MAX_WINDOW_SIZE: usize = 16 << 20;
const MIN_WINDOW_SIZE: usize = 4 << 10;
/// A source segment spans this many window sizes, so content that moved by up to about half
/// a window either way is still found.
const SEGMENT_WINDOWS: usize = 2;
/// A RUN (opcode, size, one data byte) beats a COPY for a repeated byte at least this long.
const MIN_RUN: usize = 8;
/// Window positions covered by a COPY or RUN are indexed this sparsely.
const COVERED_INDEX_STEP: usize = 4;
/// A COPY must save at least this many bytes: splitting a literal run costs another ADD.
const MIN_GAIN: isize = 2;

/// Encoder settings. The defaults suit web responses of up to a few MiB.
#[derive(Clone, Debug)]
pub struct EncodeOptions {
    /// Target bytes per window, clamped to 4 KiB ..= 16 MiB. The index takes about 4 bytes
    /// per window byte plus 5 per source segment byte (the segment is the whole source, or
    /// twice the window when the source is larger).
    pub window_size: usize,
    /// Whether COPY may read earlier bytes of the target window itself (repeats within the
    /// new version); without it only the source is matched.
    pub target_copies: bool,
    /// Match search effort, 1 (fastest) ..= 9 (smallest output).
    pub effort: u8,
    /// Store each window's Adler-32 with xdelta3's `VCD_ADLER32` extension, so decoders
    /// that know it (ours, xdelta3) detect a corrupted delta. Off by default: the output is
    /// then plain RFC 3284, which decoders without the extension also accept.
    pub checksum: bool,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        Self {
            window_size: 4 << 20,
            target_copies: true,
            effort: 5,
            checksum: false,
        }
    }
}

impl EncodeOptions {
    fn search_limits(&self) -> (SearchLimits, bool) {
        let effort = self.effort.clamp(1, 9) as usize;
        let max_chain = 1 << (effort + 1);
        let good_enough = 32 << effort;
        // Deferring a match by one byte to see whether the next one is better costs a search
        // per match; worth it from moderate effort on.
        let lazy = effort >= 3;
        (
            SearchLimits {
                max_chain,
                good_enough,
            },
            lazy,
        )
    }
}

/// Encodes `target` as a delta against `source` with default options.
pub fn encode(source: &[u8], target: &[u8]) -> Vec<u8> {
    encode_with(source, target, &EncodeOptions::default())
}

/// Encodes `target` as a delta against `source`.
pub fn encode_with(source: &[u8], target: &[u8], options: &EncodeOptions) -> Vec<u8> {
    let window_size = options.window_size.clamp(MIN_WINDOW_SIZE, MAX_WINDOW_SIZE);
    let (limits, lazy) = options.search_limits();
    let mut out = Vec::with_capacity(target.len() / 8 + 64);
    write_file_header(&mut out);
    let mut writer = InstructionWriter::new();
    let mut indexed_segment: Option<(Range<usize>, SourceIndex)> = None;
    // Source position minus target position of the latest source COPY: where the source
    // counterpart of the next window probably starts.
    let mut alignment: isize = 0;
    // xdelta3 rejects a delta without windows ("nothing to output"), so an empty target
    // still gets one, empty, window.
    let window_count = target.len().div_ceil(window_size).max(1);
    for index in 0..window_count {
        let window_pos = index * window_size;
        let window = &target[window_pos..(window_pos + window_size).min(target.len())];
        let segment_range = choose_segment(source.len(), window_pos, window_size, alignment);
        if indexed_segment
            .as_ref()
            .is_some_and(|(range, _)| *range != segment_range)
        {
            indexed_segment = None;
        }
        let (_, segment_index) = indexed_segment.get_or_insert_with(|| {
            (
                segment_range.clone(),
                SourceIndex::build(&source[segment_range.clone()]),
            )
        });
        let mut encoder = WindowEncoder {
            segment: &source[segment_range.clone()],
            segment_index,
            window,
            window_chains: options
                .target_copies
                .then(|| ShortChains::new(window.len())),
            writer: &mut writer,
            limits,
            lazy,
            indexed: 0,
            source_offset: (window_pos as isize + alignment) - segment_range.start as isize,
            last_source_end: None,
        };
        encoder.encode();
        alignment = segment_range.start as isize + encoder.source_offset - window_pos as isize;
        let segment = (!segment_range.is_empty())
            .then(|| (segment_range.start as u64, segment_range.len() as u64));
        let checksum = options.checksum.then(|| adler32(window));
        writer.finish_window(&mut out, segment, window.len(), checksum);
    }
    out
}

/// The part of the source a window at `window_pos` is matched against: all of it when it
/// fits, else a slice centred on where `alignment` says the window's content sits.
fn choose_segment(
    source_len: usize,
    window_pos: usize,
    window_size: usize,
    alignment: isize,
) -> Range<usize> {
    let segment_len = window_size * SEGMENT_WINDOWS;
    if source_len <= segment_len {
        return 0..source_len;
    }
    let expected = window_pos as isize + alignment;
    let start = (expected - ((segment_len - window_size) / 2) as isize)
        .clamp(0, (source_len - segment_len) as isize);
    start as usize..start as usize + segment_len
}

struct WindowEncoder<'a> {
    segment: &'a [u8],
    segment_index: &'a SourceIndex,
    window: &'a [u8],
    window_chains: Option<ShortChains>,
    writer: &'a mut InstructionWriter,
    limits: SearchLimits,
    lazy: bool,
    /// Window positions below this are in `window_chains`.
    indexed: usize,
    /// Segment address minus window position of the latest COPY from the segment (at first,
    /// as predicted from earlier windows): where unchanged content probably continues.
    source_offset: isize,
    /// Segment address just past the latest COPY from the segment: where content probably
    /// continues after an insertion.
    last_source_end: Option<usize>,
}

impl WindowEncoder<'_> {
    fn encode(&mut self) {
        let window = self.window;
        let mut literal_start = 0;
        let mut pos = 0;
        // A match found at `pos - 1`, held back to see whether the one at `pos` is better.
        let mut deferred: Option<Match> = None;
        while pos + MIN_MATCH <= window.len() {
            let found = self.find(pos);
            if deferred.is_none() {
                let run = run_length(&window[pos..]);
                if run >= MIN_RUN && found.is_none_or(|m| m.len <= run) {
                    self.flush_literals(literal_start, pos);
                    self.writer.run(window[pos], run);
                    pos += run;
                    self.index_covered_until(pos);
                    literal_start = pos;
                    continue;
                }
            }
            self.index_until(pos + 1);
            match (deferred.take(), found) {
                (Some(previous), Some(m)) if m.gain > previous.gain => {
                    // The byte at pos - 1 stays a literal; defer the better match in turn.
                    deferred = Some(m);
                    pos += 1;
                }
                (Some(previous), _) => {
                    pos = self.emit_copy(literal_start, pos - 1, previous);
                    literal_start = pos;
                }
                (None, Some(m)) if self.lazy && m.len < self.limits.good_enough => {
                    deferred = Some(m);
                    pos += 1;
                }
                (None, Some(m)) => {
                    pos = self.emit_copy(literal_start, pos, m);
                    literal_start = pos;
                }
                (None, None) => pos += 1,
            }
        }
        if let Some(previous) = deferred {
            literal_start = self.emit_copy(literal_start, pos - 1, previous);
        }
        self.flush_literals(literal_start, window.len());
    }

    fn find(&self, pos: usize) -> Option<Match> {
        let space = SearchSpace {
            segment: self.segment,
            segment_index: self.segment_index,
            window: self.window,
            window_chains: self.window_chains.as_ref(),
        };
        let here = self.segment.len() + pos;
        let writer = &*self.writer;
        let aligned = usize::try_from(pos as isize + self.source_offset).ok();
        let hints = aligned.into_iter().chain(self.last_source_end);
        space
            .best_match(pos, hints, self.limits, |address| {
                writer.address_cost(address, here)
            })
            .filter(|m| m.gain >= MIN_GAIN)
    }

    /// Writes a COPY for `m` found at `pos`, first growing it backwards over pending
    /// literals (the bounded chain walk can miss a match's true start), and returns the
    /// position after it.
    fn emit_copy(&mut self, literal_start: usize, mut pos: usize, mut m: Match) -> usize {
        let lowest_address = if m.address >= self.segment.len() {
            self.segment.len()
        } else {
            0
        };
        while pos > literal_start
            && m.address > lowest_address
            && self.byte_at(m.address - 1) == self.window[pos - 1]
        {
            pos -= 1;
            m.address -= 1;
            m.len += 1;
        }
        self.flush_literals(literal_start, pos);
        self.writer.copy(m.address, self.segment.len() + pos, m.len);
        if m.address < self.segment.len() {
            self.source_offset = m.address as isize - pos as isize;
            self.last_source_end = Some(m.address + m.len);
        }
        let end = pos + m.len;
        self.index_covered_until(end);
        end
    }

    /// Makes window positions below `end` available to later self-copies.
    fn index_until(&mut self, end: usize) {
        if let Some(chains) = self.window_chains.as_mut() {
            for pos in self.indexed..end {
                chains.insert(self.window, pos);
            }
        }
        self.indexed = self.indexed.max(end);
    }

    /// Indexes window positions below `end` sparsely: they are covered by a COPY or RUN, so
    /// a later repeat of them is usually findable where they were copied from, and indexing
    /// every byte of a large unchanged region would dominate the encoding time. The sampled
    /// positions still catch long repeats, which backward extension then completes.
    fn index_covered_until(&mut self, end: usize) {
        if let Some(chains) = self.window_chains.as_mut() {
            for pos in (self.indexed..end).step_by(COVERED_INDEX_STEP) {
                chains.insert(self.window, pos);
            }
        }
        self.indexed = self.indexed.max(end);
    }

    /// Byte `address` of the superstring U = segment ++ window.
    fn byte_at(&self, address: usize) -> u8 {
        match address.checked_sub(self.segment.len()) {
            None => self.segment[address],
            Some(window_pos) => self.window[window_pos],
        }
    }

    fn flush_literals(&mut self, from: usize, to: usize) {
        if from < to {
            self.writer.add(&self.window[from..to]);
        }
    }
}

/// How many bytes at the start of `bytes` equal the first.
fn run_length(bytes: &[u8]) -> usize {
    bytes.iter().take_while(|&&b| b == bytes[0]).count()
}
