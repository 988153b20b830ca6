//! The cost model that chooses representations: a body costs the CPU time to make it
//! plus its bytes over the client's bandwidth. Encodings already made (cached) cost
//! only their bytes.
//!
//! The throughput constants are single-thread input MiB/s measured on this project's
//! machine (2-core x86-64) with `wirefold lab codecs` on the shared corpus and the
//! VCDIFF / dictionary benchmarks; `docs/cost-model.md` has the measurements.

/// Work whose cost the model estimates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    Compress {
        coding: wirefold_http::ContentCoding,
        level: u32,
    },
    Dictionary {
        coding: crate::dictionary::DictionaryCoding,
        level: u32,
    },
    Vcdiff,
}

/// Input MiB per CPU-second.
fn throughput_mib_s(work: Work) -> f64 {
    use crate::dictionary::DictionaryCoding::{Dcb, Dcz};
    use wirefold_http::ContentCoding::{Br, Deflate, Gzip, Zstd};
    match work {
        Work::Compress {
            coding: Gzip | Deflate,
            level,
        } => match level {
            0..=3 => 80.0,
            4..=6 => 35.0,
            _ => 12.0,
        },
        Work::Compress { coding: Br, level } => match level {
            0..=4 => 70.0,
            5..=6 => 25.0,
            7..=9 => 8.0,
            _ => 0.8,
        },
        Work::Compress {
            coding: Zstd,
            level,
        } => match level {
            0..=3 => 200.0,
            4..=9 => 50.0,
            10..=15 => 15.0,
            _ => 3.0,
        },
        Work::Dictionary { coding: Dcz, level } => match level {
            0..=3 => 150.0,
            4..=9 => 40.0,
            _ => 4.0,
        },
        Work::Dictionary { coding: Dcb, level } => match level {
            0..=5 => 20.0,
            6..=9 => 6.0,
            _ => 0.7,
        },
        Work::Vcdiff => 8.0,
    }
}

/// Estimated CPU seconds for `work` over `input_bytes` (for dictionary codings and
/// deltas, count the dictionary or base too: the matcher indexes it).
pub fn cpu_seconds(work: Work, input_bytes: u64) -> f64 {
    input_bytes as f64 / (throughput_mib_s(work) * 1024.0 * 1024.0)
}

/// The network path to the client as the cost model sees it: its bandwidth.
#[derive(Clone, Copy, Debug)]
pub struct NetworkPath {
    pub bytes_per_second: f64,
}

impl NetworkPath {
    pub fn from_bits_per_second(bps: u64) -> NetworkPath {
        NetworkPath {
            bytes_per_second: (bps.max(1) as f64) / 8.0,
        }
    }

    pub fn transfer_seconds(&self, bytes: u64) -> f64 {
        bytes as f64 / self.bytes_per_second
    }

    /// The cost of sending `bytes` after spending `cpu_seconds` making them.
    pub fn cost(&self, cpu_seconds: f64, bytes: u64) -> f64 {
        cpu_seconds + self.transfer_seconds(bytes)
    }

    /// Whether making `work` now can pay: at best it saves the whole transfer time of
    /// the best body already available, so it must cost less CPU than that.
    pub fn worth_computing(&self, work: Work, input_bytes: u64, best_available_bytes: u64) -> bool {
        cpu_seconds(work, input_bytes) < self.transfer_seconds(best_available_bytes)
    }

    /// The level of a dictionary coding to answer with now, while the `kept` level is
    /// made in the background: the strongest level from `kept` down to `quick` whose
    /// estimated CPU time on `input_bytes` (dictionary included) stays below the
    /// transfer time of `plain_bytes`, the body the delta replaces, so the delta costs
    /// less in all than the plain body even though its own bytes are few; `quick`
    /// when no stronger level does. A delta against a dictionary of the same resource
    /// is small and cheap to make well: on small inputs and slow links this is the
    /// kept level itself.
    pub fn dictionary_level_now(
        &self,
        coding: crate::dictionary::DictionaryCoding,
        quick: u32,
        kept: u32,
        input_bytes: u64,
        plain_bytes: u64,
    ) -> u32 {
        let budget = self.transfer_seconds(plain_bytes);
        (quick..=kept)
            .rev()
            .find(|&level| cpu_seconds(Work::Dictionary { coding, level }, input_bytes) < budget)
            .unwrap_or(quick)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirefold_http::ContentCoding;

    #[test]
    fn slow_paths_justify_more_work() {
        let slow = NetworkPath::from_bits_per_second(1_000_000);
        let fast = NetworkPath::from_bits_per_second(10_000_000_000);
        let heavy = Work::Compress {
            coding: ContentCoding::Br,
            level: 11,
        };
        assert!(slow.worth_computing(heavy, 100_000, 20_000));
        assert!(!fast.worth_computing(heavy, 100_000, 20_000));
        assert!(fast.cost(0.0, 1000) < slow.cost(0.0, 1000));
        assert!(cpu_seconds(Work::Vcdiff, 1 << 20) > cpu_seconds(Work::Vcdiff, 1 << 10));
    }

    #[test]
    fn the_level_answered_now_grows_with_the_time_the_delta_saves() {
        use crate::dictionary::DictionaryCoding::Dcz;
        let path = NetworkPath::from_bits_per_second(10_000_000);
        // A small asset on a 10 Mbit/s link: the kept level fits.
        assert_eq!(path.dictionary_level_now(Dcz, 3, 19, 2 * 1024, 1024), 19);
        // A large page whose plain body sends fast: only the quick level fits.
        assert_eq!(path.dictionary_level_now(Dcz, 3, 19, 64 << 20, 1024), 3);
        let fast = NetworkPath::from_bits_per_second(10_000_000_000);
        let slow = NetworkPath::from_bits_per_second(1_000_000);
        let (input, plain) = (300 * 1024, 22 * 1024);
        assert!(
            fast.dictionary_level_now(Dcz, 3, 19, input, plain)
                <= slow.dictionary_level_now(Dcz, 3, 19, input, plain)
        );
    }
}
