//! Latencies kept as an HDR histogram: 3 significant digits from 1 µs to an hour, in
//! fixed space whatever the number of requests, mergeable across connections.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// The longest latency kept apart from the others; longer ones count as this.
const HIGHEST_US: u64 = 3_600_000_000;

#[derive(Clone, Debug)]
pub struct Latencies(Histogram<u64>);

/// The quantiles a report prints, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    #[serde(rename = "p99.9")]
    pub p99_9: f64,
    pub max: f64,
}

impl Default for Latencies {
    fn default() -> Self {
        // 1 µs to an hour at 3 digits is well inside what the histogram supports
        // (low ≥ 1, high ≥ 2 × low, up to 5 digits), so creating it cannot fail.
        match Histogram::new_with_bounds(1, HIGHEST_US, 3) {
            Ok(histogram) => Latencies(histogram),
            Err(e) => unreachable!("fixed histogram bounds refused: {e}"),
        }
    }
}

impl Latencies {
    /// Counts one latency, to the microsecond (below 1 µs counts as 1 µs, above an
    /// hour as an hour).
    pub fn record(&mut self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.0.saturating_record(us.clamp(1, HIGHEST_US));
    }

    /// Adds another connection's latencies.
    pub fn add(&mut self, other: &Latencies) {
        // Same bounds on both sides: the merge has room for every value.
        let _ = self.0.add(&other.0);
    }

    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// The quantiles; all zero when nothing was recorded.
    pub fn summary(&self) -> Summary {
        if self.0.is_empty() {
            return Summary {
                p50: 0.0,
                p90: 0.0,
                p99: 0.0,
                p99_9: 0.0,
                max: 0.0,
            };
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Summary {
            p50: ms(self.0.value_at_quantile(0.5)),
            p90: ms(self.0.value_at_quantile(0.9)),
            p99: ms(self.0.value_at_quantile(0.99)),
            p99_9: ms(self.0.value_at_quantile(0.999)),
            max: ms(self.0.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: f64, want: f64) -> bool {
        // 3 significant digits: within 1/1000 of the value.
        (got - want).abs() <= want / 1000.0
    }

    #[test]
    fn quantiles_of_a_uniform_spread() {
        let mut l = Latencies::default();
        for us in 1..=10_000u64 {
            l.record(Duration::from_micros(us * 100)); // 0.1 ms .. 1000 ms
        }
        let s = l.summary();
        assert_eq!(l.count(), 10_000);
        for (got, want) in [
            (s.p50, 500.0),
            (s.p90, 900.0),
            (s.p99, 990.0),
            (s.p99_9, 999.0),
            (s.max, 1000.0),
        ] {
            assert!(close(got, want), "{got} ms for {want} ms");
        }
    }

    #[test]
    fn one_slow_request_in_a_thousand_shows_at_p99_9_not_p99() {
        let mut l = Latencies::default();
        for _ in 0..999 {
            l.record(Duration::from_micros(400));
        }
        l.record(Duration::from_millis(250));
        let s = l.summary();
        assert!(close(s.p99, 0.4), "{s:?}");
        assert!(close(s.p99_9, 0.4), "{s:?}");
        assert!(close(s.max, 250.0), "{s:?}");
        l.record(Duration::from_millis(250));
        assert!(close(l.summary().p99_9, 250.0), "{:?}", l.summary());
    }

    #[test]
    fn merged_connections_count_as_one_histogram() {
        let (mut a, mut b, mut both) = (
            Latencies::default(),
            Latencies::default(),
            Latencies::default(),
        );
        for ms in 1..=50u64 {
            a.record(Duration::from_millis(ms));
            both.record(Duration::from_millis(ms));
        }
        for ms in 51..=100u64 {
            b.record(Duration::from_millis(ms));
            both.record(Duration::from_millis(ms));
        }
        a.add(&b);
        assert_eq!(a.count(), 100);
        assert_eq!(a.summary(), both.summary());
        assert!(close(a.summary().p50, 50.0));
    }

    #[test]
    fn extremes_are_clamped_not_lost() {
        let mut l = Latencies::default();
        l.record(Duration::ZERO);
        l.record(Duration::from_secs(100_000));
        assert_eq!(l.count(), 2);
        let s = l.summary();
        assert!(close(s.p50, 0.001), "{s:?}");
        assert!(close(s.max, HIGHEST_US as f64 / 1000.0), "{s:?}");
    }

    #[test]
    fn an_empty_histogram_summarises_to_zero() {
        let s = Latencies::default().summary();
        assert_eq!((s.p50, s.p99, s.max), (0.0, 0.0, 0.0));
    }
}
