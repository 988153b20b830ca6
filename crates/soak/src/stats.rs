//! What the workers count: requests and outcomes by route and plan, errors by kind,
//! statuses and codings seen, and latency per minute.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::verify::Verdict;

/// Latencies with 1/32 relative precision, from 1 µs to over a day, in fixed space:
/// values below 64 µs have a bucket each; above, each power of two has 32.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

const SUB_BUCKETS: u64 = 32;
const BUCKETS: usize = 64 + 60 * SUB_BUCKETS as usize;

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
        }
    }
}

impl Histogram {
    pub fn record(&mut self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        let index = Self::bucket(us).min(BUCKETS - 1);
        self.counts[index] += 1;
        self.total += 1;
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    fn bucket(us: u64) -> usize {
        if us < 2 * SUB_BUCKETS {
            return us as usize;
        }
        let exponent = 63 - u64::from(us.leading_zeros()); // at least 6
        let shift = exponent - 5;
        (shift * SUB_BUCKETS + (us >> shift)) as usize
    }

    /// The middle of the bucket at `index`, in µs.
    fn value(index: usize) -> f64 {
        let index = index as u64;
        if index < 2 * SUB_BUCKETS {
            return index as f64;
        }
        let shift = index / SUB_BUCKETS - 1;
        let mantissa = index % SUB_BUCKETS + SUB_BUCKETS;
        ((mantissa << shift) + (1 << shift) / 2) as f64
    }

    /// The `q` quantile (0 < q ≤ 1) in milliseconds; 0 when empty.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (index, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Self::value(index) / 1000.0;
            }
        }
        Self::value(BUCKETS - 1) / 1000.0
    }
}

/// Outcomes of one kind of request.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Outcomes {
    pub requests: u64,
    pub correct: u64,
    /// Hostile requests refused with a 4xx or a closed connection.
    pub refused: u64,
    pub wrong: u64,
    pub failed: u64,
}

/// One minute of requests.
#[derive(Clone, Debug, Default)]
pub struct Minute {
    pub requests: u64,
    pub errors: u64,
    /// Latency of the ordinary (not hostile) requests.
    pub latency: Histogram,
}

/// Everything counted so far.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub requests: u64,
    pub wrong_bodies: u64,
    pub errors: BTreeMap<&'static str, u64>,
    /// By `route.plan` (`direct.delta`, `pair.hostile_raw`, …).
    pub kinds: BTreeMap<String, Outcomes>,
    pub statuses: BTreeMap<u16, u64>,
    /// `Content-Encoding` (or `vcdiff` for a 226) of correct answers with a body.
    pub codings: BTreeMap<String, u64>,
    pub minutes: Vec<Minute>,
    /// The first few details of each error kind.
    pub examples: BTreeMap<&'static str, Vec<String>>,
}

/// Examples kept (and logged) per error kind.
const EXAMPLES: usize = 5;

/// The shared counters.
pub struct Stats {
    started: Instant,
    tally: Mutex<Tally>,
}

/// One finished request, as the stats see it.
pub struct Record<'a> {
    /// `route.plan`.
    pub kind: &'a str,
    pub started: Instant,
    /// The latency to count, for ordinary requests.
    pub latency: Option<Duration>,
    pub status: Option<u16>,
    pub coding: Option<String>,
    pub verdict: &'a Verdict,
    /// What was asked, for error details.
    pub describe: &'a dyn Fn() -> String,
}

impl Stats {
    pub fn new(started: Instant) -> Self {
        Stats {
            started,
            tally: Mutex::new(Tally::default()),
        }
    }

    pub fn started(&self) -> Instant {
        self.started
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tally> {
        // A worker that panicked holding the lock left whole counts behind.
        self.tally
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts one request and its verdict.
    pub fn record(&self, record: Record<'_>) {
        let minute = record.started.duration_since(self.started).as_secs() as usize / 60;
        let error = match record.verdict {
            Verdict::Wrong(detail) => Some(("wrong_body", detail.as_str())),
            Verdict::Failed { kind, detail } => Some((*kind, detail.as_str())),
            Verdict::Correct { .. } | Verdict::Refused => None,
        };
        let mut tally = self.lock();
        tally.requests += 1;
        let outcomes = tally.kinds.entry(record.kind.to_string()).or_default();
        outcomes.requests += 1;
        match record.verdict {
            Verdict::Correct { .. } => outcomes.correct += 1,
            Verdict::Refused => outcomes.refused += 1,
            Verdict::Wrong(_) => outcomes.wrong += 1,
            Verdict::Failed { .. } => outcomes.failed += 1,
        }
        if let Some(status) = record.status {
            *tally.statuses.entry(status).or_default() += 1;
        }
        if let (Some(coding), Verdict::Correct { .. }) = (record.coding, record.verdict) {
            *tally.codings.entry(coding).or_default() += 1;
        }
        if tally.minutes.len() <= minute {
            tally.minutes.resize_with(minute + 1, Minute::default);
        }
        let this_minute = &mut tally.minutes[minute];
        this_minute.requests += 1;
        if let Some(latency) = record.latency {
            this_minute.latency.record(latency);
        }
        if let Some((kind, detail)) = error {
            this_minute.errors += 1;
            if kind == "wrong_body" {
                tally.wrong_bodies += 1;
            }
            *tally.errors.entry(kind).or_default() += 1;
            let examples = tally.examples.entry(kind).or_default();
            if examples.len() < EXAMPLES {
                let example = format!("{}: {detail} [{}]", record.kind, (record.describe)());
                eprintln!("soak: {kind}: {example}");
                examples.push(example);
            }
        }
    }

    /// Counts an error that belongs to no request (a watched process gone).
    pub fn error(&self, kind: &'static str, detail: String) {
        eprintln!("soak: {kind}: {detail}");
        let mut tally = self.lock();
        *tally.errors.entry(kind).or_default() += 1;
        let examples = tally.examples.entry(kind).or_default();
        if examples.len() < EXAMPLES {
            examples.push(detail);
        }
    }

    pub fn snapshot(&self) -> Tally {
        self.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_the_bucket_precision() {
        let mut h = Histogram::default();
        for ms in 1..=1000u64 {
            h.record(Duration::from_micros(ms * 1000));
        }
        for (q, want) in [(0.5, 500.0), (0.99, 990.0), (1.0, 1000.0)] {
            let got = h.quantile_ms(q);
            assert!(
                (got - want).abs() / want < 1.0 / 32.0,
                "q{q}: {got} for {want}"
            );
        }
        let mut small = Histogram::default();
        small.record(Duration::from_micros(7));
        assert_eq!(small.quantile_ms(0.99), 0.007);
        assert_eq!(Histogram::default().quantile_ms(0.5), 0.0);
    }

    #[test]
    fn buckets_are_contiguous_and_ordered() {
        let mut last = 0;
        for us in 0..1_000_000u64 {
            let b = Histogram::bucket(us);
            assert!(b == last || b == last + 1, "{us}: {b} after {last}");
            last = b;
        }
        assert!(Histogram::bucket(u64::MAX) < BUCKETS);
    }
}
