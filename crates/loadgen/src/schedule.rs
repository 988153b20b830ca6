//! When each request of an open-loop run is due, and which connection sends it.

use std::time::Duration;

/// More requests than one run schedules: a typo in `--rate` or `--duration`, not a run.
pub const MAX_REQUESTS: u64 = 1 << 32;

/// A fixed-rate schedule, as wrk2 keeps one: request `i` is due `i / rate` seconds
/// after the start, for every `i` due before the duration ends, and connection
/// `i % connections` sends it. The schedule never waits for answers: a server that
/// falls behind makes requests wait on their connection, and that wait counts in
/// their latency.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    rate: f64,
    duration: Duration,
    connections: usize,
    count: u64,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ScheduleError {
    #[error("the rate must be a positive number of requests per second, got {0}")]
    Rate(f64),
    #[error("the duration must be longer than zero")]
    Duration,
    #[error("the number of connections must be at least 1")]
    Connections,
    #[error("{rate} requests/s for {seconds} s is more than {MAX_REQUESTS} requests")]
    TooMany { rate: f64, seconds: f64 },
}

impl Schedule {
    pub fn new(rate: f64, duration: Duration, connections: usize) -> Result<Self, ScheduleError> {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(ScheduleError::Rate(rate));
        }
        if duration.is_zero() {
            return Err(ScheduleError::Duration);
        }
        if connections == 0 {
            return Err(ScheduleError::Connections);
        }
        let seconds = duration.as_secs_f64();
        let estimate = (rate * seconds).ceil();
        if estimate > MAX_REQUESTS as f64 {
            return Err(ScheduleError::TooMany { rate, seconds });
        }
        let mut schedule = Schedule {
            rate,
            duration,
            connections,
            count: estimate as u64,
        };
        // The count is the first index not due within the duration, by the same
        // arithmetic as `due`, whichever way `rate * seconds` rounded.
        while schedule.count > 0 && schedule.due(schedule.count - 1) >= duration {
            schedule.count -= 1;
        }
        while schedule.due(schedule.count) < duration {
            schedule.count += 1;
        }
        Ok(schedule)
    }

    /// Requests in the run.
    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    pub fn duration(&self) -> Duration {
        self.duration
    }

    pub fn connections(&self) -> usize {
        self.connections
    }

    /// When request `i` is due, after the start, to the nearest nanosecond. Computed
    /// from `i` alone (not by adding intervals), so it does not drift over a long run.
    pub fn due(&self, i: u64) -> Duration {
        Duration::from_nanos((i as f64 * 1e9 / self.rate).round() as u64)
    }

    /// The connection that sends request `i`.
    pub fn connection_of(&self, i: u64) -> usize {
        (i % self.connections as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn requests_are_due_at_i_over_rate() {
        let s = Schedule::new(1000.0, secs(3.0), 32).unwrap();
        assert_eq!(s.count(), 3000);
        assert_eq!(s.due(0), Duration::ZERO);
        assert_eq!(s.due(1), Duration::from_millis(1));
        assert_eq!(s.due(1500), Duration::from_millis(1500));
        assert_eq!(s.due(2999), Duration::from_millis(2999));
    }

    #[test]
    fn the_count_is_every_request_due_before_the_end() {
        for (rate, seconds, count) in [
            (1000.0, 3.0, 3000),
            (0.5, 3.0, 2),   // due at 0 s and 2 s; 4 s is past the end
            (3.0, 1.0, 3),   // 0, 1/3, 2/3; 1 s is the end itself
            (2.5, 1.0, 3),   // 0, 0.4, 0.8
            (7.0, 0.1, 1),   // only the first
            (33.3, 0.3, 10), // 9.99 rounds up: 0 .. 9/33.3 = 0.27 s
        ] {
            let s = Schedule::new(rate, secs(seconds), 4).unwrap();
            assert_eq!(s.count(), count, "{rate}/s for {seconds} s");
            assert!(s.due(count - 1) < s.duration());
            assert!(s.due(count) >= s.duration());
        }
    }

    #[test]
    fn due_times_increase_and_do_not_drift() {
        let s = Schedule::new(36_789.5, secs(5.0), 32).unwrap();
        let mut last = None;
        for i in 0..s.count() {
            let due = s.due(i);
            assert!(last.is_none_or(|l| due > l), "request {i} not after {i}-1");
            last = Some(due);
        }
        // The last request is within one interval of the end, not pushed out by
        // accumulated rounding.
        let interval = 1.0 / s.rate();
        let end = s.due(s.count() - 1).as_secs_f64();
        assert!(5.0 - end <= interval + 1e-9, "last due at {end} s");
    }

    #[test]
    fn connections_take_requests_round_robin() {
        let s = Schedule::new(100.0, secs(1.0), 3).unwrap();
        let mut per_connection = [0u64; 3];
        for i in 0..s.count() {
            per_connection[s.connection_of(i)] += 1;
        }
        assert_eq!(per_connection, [34, 33, 33]);
        assert_eq!(s.connection_of(0), 0);
        assert_eq!(s.connection_of(4), 1);
        // Each connection's own requests are due `connections / rate` apart.
        assert_eq!(s.due(4) - s.due(1), Duration::from_millis(30));
    }

    #[test]
    fn nonsense_is_refused_by_name() {
        assert_eq!(
            Schedule::new(0.0, secs(1.0), 1),
            Err(ScheduleError::Rate(0.0))
        );
        assert!(matches!(
            Schedule::new(f64::NAN, secs(1.0), 1),
            Err(ScheduleError::Rate(_))
        ));
        assert_eq!(
            Schedule::new(-5.0, secs(1.0), 1),
            Err(ScheduleError::Rate(-5.0))
        );
        assert_eq!(
            Schedule::new(f64::INFINITY, secs(1.0), 1),
            Err(ScheduleError::Rate(f64::INFINITY))
        );
        assert_eq!(
            Schedule::new(10.0, Duration::ZERO, 1),
            Err(ScheduleError::Duration)
        );
        assert_eq!(
            Schedule::new(10.0, secs(1.0), 0),
            Err(ScheduleError::Connections)
        );
        assert!(matches!(
            Schedule::new(1e9, secs(3600.0), 1),
            Err(ScheduleError::TooMany { .. })
        ));
    }
}
