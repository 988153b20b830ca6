//! Per origin host, how long the origin has made us wait: the server proxy sends
//! optimistically only where the wait is long enough for stale bytes to pay.

use std::time::Duration;

use store::memo::Bounded;

/// Hosts remembered at most.
const MAX_HOSTS: usize = 4096;
/// Weight of the newest observation in the moving average.
const NEWEST_WEIGHT: f64 = 0.3;

/// Each host's moving average of waits, in seconds.
pub struct OriginWaits {
    seconds: Bounded<String, f64>,
}

impl Default for OriginWaits {
    fn default() -> Self {
        OriginWaits {
            seconds: Bounded::with_entries(MAX_HOSTS),
        }
    }
}

impl OriginWaits {
    /// Adds one observed wait (request sent to whole response read) for `host`.
    /// Two observations of one host at the same moment may keep only one: harmless
    /// for a moving average.
    pub fn record(&self, host: &str, wait: Duration) {
        let observed = wait.as_secs_f64();
        let average = match self.seconds.get(host) {
            Some(average) => average + NEWEST_WEIGHT * (observed - average),
            None => observed,
        };
        self.seconds.insert(host.to_string(), average);
    }

    /// The expected wait, if `host` has been observed.
    pub fn expected(&self, host: &str) -> Option<Duration> {
        self.seconds.get(host).map(Duration::from_secs_f64)
    }

    /// Whether an optimistic send to `host` can pay: unknown hosts are tried.
    pub fn worth_sending_stale(&self, host: &str, min_wait: Duration) -> bool {
        self.expected(host).is_none_or(|wait| wait >= min_wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_average_follows_the_host_and_decides_optimism() {
        let waits = OriginWaits::default();
        let min = Duration::from_millis(100);
        assert!(
            waits.worth_sending_stale("slow.example", min),
            "unknown hosts are tried"
        );
        waits.record("fast.example", Duration::from_millis(2));
        assert!(!waits.worth_sending_stale("fast.example", min));
        waits.record("slow.example", Duration::from_secs(5));
        assert!(waits.worth_sending_stale("slow.example", min));
        for _ in 0..20 {
            waits.record("slow.example", Duration::from_millis(1));
        }
        assert!(
            !waits.worth_sending_stale("slow.example", min),
            "a host that got fast stops paying"
        );
        assert!(waits.expected("slow.example").unwrap() < min);
    }
}
