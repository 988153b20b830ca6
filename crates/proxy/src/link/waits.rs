//! Per origin host, how long the origin has made us wait: the server proxy sends
//! optimistically only where the wait is long enough for stale bytes to pay.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Hosts remembered; beyond it the table starts afresh.
const MAX_HOSTS: usize = 4096;
/// Weight of the newest observation in the moving average.
const NEWEST_WEIGHT: f64 = 0.3;

#[derive(Default)]
pub struct OriginWaits {
    seconds: Mutex<HashMap<String, f64>>,
}

impl OriginWaits {
    /// Adds one observed wait (request sent to whole response read) for `host`.
    pub fn record(&self, host: &str, wait: Duration) {
        let mut table = self.seconds.lock().expect("origin waits lock");
        if table.len() >= MAX_HOSTS && !table.contains_key(host) {
            table.clear();
        }
        let observed = wait.as_secs_f64();
        table
            .entry(host.to_string())
            .and_modify(|avg| *avg += NEWEST_WEIGHT * (observed - *avg))
            .or_insert(observed);
    }

    /// The expected wait, if `host` has been observed.
    pub fn expected(&self, host: &str) -> Option<Duration> {
        let table = self.seconds.lock().expect("origin waits lock");
        table.get(host).map(|s| Duration::from_secs_f64(*s))
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
