//! How much compression the link affords: the link connection's own delivery rate
//! (the kernel's TCP_INFO estimate, passive: [`LinkSample::measure`], which the
//! request's record carries to the status page) put through the cost model.

use codec::cost::{cpu_seconds, NetworkPath, Work};
use codec::dictionary::DictionaryCoding;
use proxy::record::LinkSample;
use wirefold_http::ContentCoding;

/// Stream codings tried, best ratio first (`wirefold lab codecs` on the corpus).
const STREAM_CODINGS: [(ContentCoding, u32); 6] = [
    (ContentCoding::Br, 11),
    (ContentCoding::Zstd, 19),
    (ContentCoding::Zstd, 15),
    (ContentCoding::Zstd, 9),
    (ContentCoding::Zstd, 6),
    (ContentCoding::Zstd, 3),
];
/// `dcz` levels tried, best ratio first.
const DELTA_LEVELS: [u32; 5] = [19, 15, 9, 6, 3];
/// A text body's typical compressed share (HTML and CSS under zstd: 0.15–0.2).
const TYPICAL_RATIO: f64 = 0.2;
/// Compression may take at most this share of the time its output spends on the link.
const CPU_SHARE: f64 = 0.25;

/// The codings for one response's link bodies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Levels {
    /// Stale and full streams.
    pub stream: (ContentCoding, u32),
    /// Deltas (`dcz`), whose matcher also reads the base.
    pub delta: u32,
}

/// The best levels whose CPU time stays within a quarter of the time the compressed
/// body of `len` bytes takes on `link`.
pub fn levels(link: NetworkPath, len: u64) -> Levels {
    let budget = CPU_SHARE * link.transfer_seconds((len as f64 * TYPICAL_RATIO) as u64);
    let affordable = |work: Work, input: u64| cpu_seconds(work, input) <= budget;
    let stream = STREAM_CODINGS
        .into_iter()
        .find(|&(coding, level)| affordable(Work::Compress { coding, level }, len))
        .unwrap_or(STREAM_CODINGS[STREAM_CODINGS.len() - 1]);
    let delta = DELTA_LEVELS
        .into_iter()
        .find(|&level| {
            affordable(
                Work::Dictionary {
                    coding: DictionaryCoding::Dcz,
                    level,
                },
                2 * len,
            )
        })
        .unwrap_or(DELTA_LEVELS[DELTA_LEVELS.len() - 1]);
    Levels { stream, delta }
}

/// The link's rate: the delivery rate the kernel measured ([`LinkSample::measure`]), else
/// `assumed_bps`.
pub fn link_for(measured: Option<LinkSample>, assumed_bps: u64) -> NetworkPath {
    match measured.and_then(|m| m.delivery_rate) {
        Some(bytes_per_second) if bytes_per_second > 0 => NetworkPath {
            bytes_per_second: bytes_per_second as f64,
        },
        _ => NetworkPath::from_bits_per_second(assumed_bps),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_links_get_the_strongest_levels_and_fast_ones_cheaper() {
        let modem = levels(NetworkPath::from_bits_per_second(28_800), 100_000);
        let best = Levels {
            stream: (ContentCoding::Br, 11),
            delta: 19,
        };
        assert_eq!(modem, best);
        let mobile = levels(NetworkPath::from_bits_per_second(1_600_000), 100_000);
        assert_eq!(mobile.stream.0, ContentCoding::Zstd, "{mobile:?}");
        assert!(mobile.delta < 19, "{mobile:?}");
        let lan = levels(NetworkPath::from_bits_per_second(10_000_000_000), 100_000);
        let cheapest = Levels {
            stream: (ContentCoding::Zstd, 3),
            delta: 3,
        };
        assert_eq!(lan, cheapest);
    }
}
