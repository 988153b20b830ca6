//! Timing codec runs by the CPU time of the calling thread: on a shared machine this
//! counts the work itself, not the time other processes held the core.

use std::time::Duration;

/// The calling thread's CPU clock.
#[allow(unsafe_code)] // std has no per-thread CPU clock
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "CLOCK_THREAD_CPUTIME_ID is available on Linux");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// How often to repeat one measurement.
#[derive(Clone, Copy, Debug)]
pub struct Repeats {
    /// At most this many runs.
    pub max_runs: u32,
    /// No new run once the runs so far took this much CPU time.
    pub budget: Duration,
}

/// Runs `work` at least once and at most `max_runs` times, stopping early once the
/// runs used up the budget. Returns the last result and the median CPU time.
pub fn median_cpu_time<T>(repeats: Repeats, mut work: impl FnMut() -> T) -> (T, Duration) {
    let mut times = Vec::with_capacity(repeats.max_runs as usize);
    let mut spent = Duration::ZERO;
    loop {
        let start = thread_cpu_time();
        let result = work();
        let took = thread_cpu_time() - start;
        times.push(took);
        spent += took;
        if times.len() >= repeats.max_runs as usize || spent >= repeats.budget {
            times.sort_unstable();
            return (result, times[times.len() / 2]);
        }
    }
}
