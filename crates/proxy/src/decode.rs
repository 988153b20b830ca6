//! Decoding origin content codings in bounded memory (decompression bombs).
//!
//! A coded body is small; what it decodes to need not be. Every decode here
//! produces output one window at a time ([`WINDOW`]), so no single input chunk can
//! turn into an unbounded allocation:
//! - [`decode_whole`] decodes a body read whole into memory, reserving each window
//!   from the process-wide [`DecodeBudget`] before keeping it. The budget bounds
//!   decodes in progress, where a small coded body can grow without bound; it is
//!   given back when the decode ends, after which the content is an ordinary buffered
//!   body of at most `limits.max_buffered_body` (a slow reader holding it must not
//!   hold the budget: that would stop caching for everyone). A body that does
//!   not fit (the budget is spent, or it decodes past what is buffered) is not kept:
//!   the decode runs on without holding output to learn whether it is within
//!   `limits.max_decoded_body`, and the caller streams it instead. Reservations
//!   never wait, so decodes cannot deadlock on each other's budget.
//! - [`Windows`] yields the decoded output of a stream window by window; a
//!   caller asks for the next window only when it has passed on the last, and
//!   feeds the next input chunk only once the current one is used up, so a slow
//!   reader holds the origin back.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use codec::{DecodeError, Decoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use wirefold_http::ContentCoding;

use crate::metrics::{Metrics, ReasonLabels};

/// The most decoded output produced at once (the codec may overshoot it by one of
/// its own steps, also 64 KiB).
pub const WINDOW: usize = 64 * 1024;

/// Decoded bytes held in memory by whole-body decodes, process wide: a semaphore of
/// bytes whose permits are only ever tried, never waited for.
pub struct DecodeBudget {
    capacity: usize,
    in_use: AtomicUsize,
    in_use_gauge: Gauge,
    peak_gauge: Gauge,
    unheld: Family<ReasonLabels, Counter>,
}

impl DecodeBudget {
    /// `capacity` bytes (`limits.max_decoding_memory`), reported in `metrics`.
    pub fn new(capacity: usize, metrics: &Metrics) -> Arc<Self> {
        Arc::new(DecodeBudget {
            capacity,
            in_use: AtomicUsize::new(0),
            in_use_gauge: metrics.decode_memory.clone(),
            peak_gauge: metrics.decode_memory_peak.clone(),
            unheld: metrics.decodes_unheld.clone(),
        })
    }

    /// An empty reservation, to grow as output is produced.
    fn reservation(self: &Arc<Self>) -> Reservation {
        Reservation {
            budget: self.clone(),
            bytes: 0,
        }
    }

    /// Takes `bytes` of the budget if that many are free.
    fn try_take(&self, bytes: usize) -> bool {
        let taken = self
            .in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&n| n <= self.capacity)
            });
        match taken {
            Ok(before) => {
                let now = (before + bytes) as i64;
                self.in_use_gauge.inc_by(bytes as i64);
                // A gauge has no max-update: raise the peak until it is at least `now`.
                let mut peak = self.peak_gauge.get();
                while peak < now {
                    match self.peak_gauge.inner().compare_exchange(
                        peak,
                        now,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => break,
                        Err(seen) => peak = seen,
                    }
                }
                true
            }
            Err(_) => false,
        }
    }

    fn give_back(&self, bytes: usize) {
        self.in_use.fetch_sub(bytes, Ordering::AcqRel);
        self.in_use_gauge.dec_by(bytes as i64);
    }
}

/// Part of the budget, given back when dropped.
struct Reservation {
    budget: Arc<DecodeBudget>,
    bytes: usize,
}

impl Reservation {
    /// Adds `bytes` to the reservation if the budget has them.
    fn grow(&mut self, bytes: usize) -> bool {
        let grown = self.budget.try_take(bytes);
        if grown {
            self.bytes += bytes;
        }
        grown
    }

    /// Gives back all but `bytes`.
    fn shrink_to(&mut self, bytes: usize) {
        let excess = self.bytes.saturating_sub(bytes);
        self.budget.give_back(excess);
        self.bytes -= excess;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
    }
}

/// What a whole-body decode produced.
pub enum WholeDecode {
    /// The decoded content (its budget already given back).
    Held(Bytes),
    /// The body decodes correctly within the size limit but was not kept: stream it.
    Unheld(Unheld),
}

/// Why a correct body was not kept in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unheld {
    /// The decode budget had no room for it.
    Budget,
    /// It decodes to more than is buffered (`limits.max_buffered_body`).
    Size,
}

impl Unheld {
    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Unheld::Budget => "budget",
            Unheld::Size => "size",
        }
    }
}

/// Bounds of one whole-body decode.
#[derive(Clone, Copy)]
pub struct WholeLimits {
    /// The most decoded bytes kept in memory for one body.
    pub hold: usize,
    /// The most a body may decode to at all: more is a decoding error.
    pub total: usize,
}

/// Decodes `coded` in windows, keeping the output only while the budget and
/// `limits.hold` allow (see the module). Runs on the blocking pool: it is CPU work.
pub fn decode_whole(
    budget: &Arc<DecodeBudget>,
    coding: ContentCoding,
    coded: &[u8],
    limits: WholeLimits,
) -> Result<WholeDecode, DecodeError> {
    let mut windows = Windows::new(coding, limits.total);
    let mut keeper = Keeper {
        reservation: budget.reservation(),
        kept: Vec::new(),
        kept_len: 0,
        hold: limits.hold,
        unheld: None,
    };
    let mut input = coded;
    while let Some(window) = windows.next(&mut input)? {
        keeper.keep(window);
    }
    keeper.keep(windows.finish()?);
    // One contiguous copy of the windows: reserved too, since both exist until the
    // windows are dropped.
    if keeper.unheld.is_none() && !keeper.reservation.grow(keeper.kept_len) {
        keeper.stop_keeping(Unheld::Budget);
    }
    let Keeper {
        reservation,
        kept,
        unheld,
        ..
    } = keeper;
    if let Some(reason) = unheld {
        return Ok(WholeDecode::Unheld(reason));
    }
    let content = kept.concat();
    drop(kept);
    drop(reservation);
    Ok(WholeDecode::Held(Bytes::from(content)))
}

/// The windows of a whole-body decode kept so far, and their reservation.
struct Keeper {
    reservation: Reservation,
    kept: Vec<Vec<u8>>,
    kept_len: usize,
    hold: usize,
    /// Set once the output stops being kept; the decode then only checks the body.
    unheld: Option<Unheld>,
}

impl Keeper {
    fn keep(&mut self, window: Vec<u8>) {
        if self.unheld.is_some() || window.is_empty() {
            return;
        }
        self.kept_len += window.len();
        if self.kept_len > self.hold {
            self.stop_keeping(Unheld::Size);
        } else if !self.reservation.grow(window.capacity()) {
            self.stop_keeping(Unheld::Budget);
        } else {
            self.kept.push(window);
        }
    }

    /// Drops what was kept and gives its budget back; the decode goes on checking.
    fn stop_keeping(&mut self, reason: Unheld) {
        let labels = ReasonLabels {
            reason: reason.label(),
        };
        self.reservation.budget.unheld.get_or_create(&labels).inc();
        self.unheld = Some(reason);
        self.kept = Vec::new();
        self.reservation.shrink_to(0);
    }
}

/// A streaming decoder that yields its output at most a window at a time.
pub struct Windows {
    decoder: Decoder,
    /// The last window was full: the codec may hold more for the current input.
    pending: bool,
}

impl Windows {
    /// Fails past `limit` decoded bytes in total.
    pub fn new(coding: ContentCoding, limit: usize) -> Self {
        Windows {
            decoder: Decoder::new(coding, limit),
            pending: false,
        }
    }

    /// The next window decoded from `input`, advancing it past what was consumed;
    /// `None` once `input` is used up and the codec holds nothing more for it. Feed
    /// the next chunk of the body only then.
    pub fn next(&mut self, input: &mut &[u8]) -> Result<Option<Vec<u8>>, DecodeError> {
        if input.is_empty() && !self.pending {
            return Ok(None);
        }
        let consumed = self.decoder.write_bounded(input, WINDOW)?;
        *input = &input[consumed..];
        let window = self.decoder.take_output();
        // Below a window, the input was used up and the codec holds nothing more.
        self.pending = window.len() >= WINDOW;
        Ok((!window.is_empty()).then_some(window))
    }

    /// Whether the current input may yield more output: feed the next chunk only
    /// when this is false.
    pub fn has_pending(&self) -> bool {
        self.pending
    }

    /// Ends the stream once [`Windows::next`] has returned `None` for the last
    /// chunk, failing if it was cut short; returns what the codec still held
    /// (nothing, for the codecs wirefold has).
    pub fn finish(self) -> Result<Vec<u8>, DecodeError> {
        self.decoder.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gzip(content: &[u8]) -> Vec<u8> {
        codec::compress(ContentCoding::Gzip, 6, content)
    }

    fn limits(hold: usize) -> WholeLimits {
        WholeLimits {
            hold,
            total: 64 << 20,
        }
    }

    #[test]
    fn a_decoded_body_gives_its_budget_back_when_the_decode_ends() {
        let metrics = Metrics::new();
        let budget = DecodeBudget::new(4 << 20, &metrics);
        let content = vec![7u8; 1 << 20];
        let WholeDecode::Held(bytes) = decode_whole(
            &budget,
            ContentCoding::Gzip,
            &gzip(&content),
            limits(8 << 20),
        )
        .unwrap() else {
            panic!("a body within the budget is held")
        };
        assert_eq!(bytes, content);
        assert_eq!(
            metrics.decode_memory.get(),
            0,
            "held by a reader, not the budget"
        );
        let peak = metrics.decode_memory_peak.get();
        assert!(
            (2 << 20..=4 << 20).contains(&peak),
            "windows and their copy: {peak}"
        );
    }

    #[test]
    fn a_body_without_room_is_checked_but_not_held() {
        let metrics = Metrics::new();
        let budget = DecodeBudget::new(1 << 20, &metrics);
        let coded = gzip(&vec![0u8; 3 << 20]);
        let decoded = decode_whole(&budget, ContentCoding::Gzip, &coded, limits(8 << 20));
        assert!(matches!(decoded, Ok(WholeDecode::Unheld(Unheld::Budget))));
        let roomy = DecodeBudget::new(64 << 20, &metrics);
        let decoded = decode_whole(&roomy, ContentCoding::Gzip, &coded, limits(2 << 20));
        assert!(matches!(decoded, Ok(WholeDecode::Unheld(Unheld::Size))));
        // Not held, yet still decoded to the end: a bomb or a corrupt body fails.
        let bomb = decode_whole(
            &budget,
            ContentCoding::Gzip,
            &coded,
            WholeLimits {
                hold: 8 << 20,
                total: 2 << 20,
            },
        );
        assert!(matches!(bomb, Err(DecodeError::TooLarge { .. })));
        let truncated = decode_whole(
            &budget,
            ContentCoding::Gzip,
            &coded[..coded.len() - 4],
            limits(8 << 20),
        );
        assert!(matches!(truncated, Err(DecodeError::Truncated { .. })));
        assert_eq!(metrics.decode_memory.get(), 0);
        assert!(metrics.decode_memory_peak.get() <= 2 << 20);
    }

    #[test]
    fn windows_never_exceed_a_window_and_a_codec_step() {
        let coded = gzip(&vec![0u8; 4 << 20]);
        let mut windows = Windows::new(ContentCoding::Gzip, usize::MAX);
        let (mut input, mut total) = (&coded[..], 0);
        while let Some(window) = windows.next(&mut input).unwrap() {
            assert!(window.len() <= 2 * WINDOW, "a window of {}", window.len());
            total += window.len();
        }
        assert!(input.is_empty());
        total += windows.finish().unwrap().len();
        assert_eq!(total, 4 << 20);
    }
}
