//! Memory that parked connections freed, given back to the kernel.
//!
//! A connection that parks frees hyper's buffers (16 KiB and more), but glibc's malloc
//! keeps freed memory inside its heaps, and a burst of new connections leaves their
//! buffers interleaved with the small tasks of those parked before: the heap's pages
//! stay resident though mostly free (with 10,000 parked connections, RSS 55 MB of
//! which `malloc_trim` returned 19: docs/benchmarks.md, "Idle connections").
//! `malloc_trim` walks the heaps and holds each one's lock meanwhile, so it runs on
//! the blocking pool, only after [`PARKS_PER_TRIM`] parks and at most once per
//! [`TRIM_INTERVAL`].

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::{watch, Notify};

use crate::metrics::Metrics;

/// Parks between trims: at 16 KiB or more freed by each, 16 MiB or more to give back.
pub const PARKS_PER_TRIM: u32 = 1024;
/// The least time between trims, however many connections park.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(1);

/// Counts parks and trims when enough have freed memory.
#[derive(Default)]
pub struct FreedByParks {
    parks_since_trim: AtomicU32,
    enough: Notify,
}

impl FreedByParks {
    /// A connection parked: its hyper buffers were freed.
    pub fn parked(&self) {
        if self.parks_since_trim.fetch_add(1, Ordering::Relaxed) + 1 == PARKS_PER_TRIM {
            self.enough.notify_one();
        }
    }

    /// Trims each time enough connections have parked, until `stop` turns true.
    pub async fn give_back(&self, metrics: &Metrics, mut stop: watch::Receiver<bool>) {
        let mut stopping = std::pin::pin!(stop.wait_for(|&stopping| stopping));
        loop {
            tokio::select! {
                () = self.enough.notified() => {}
                _ = stopping.as_mut() => return,
            }
            self.parks_since_trim.store(0, Ordering::Relaxed);
            let started = std::time::Instant::now();
            if tokio::task::spawn_blocking(trim).await.is_ok() {
                metrics
                    .memory_trims
                    .observe(started.elapsed().as_secs_f64());
            }
            tokio::select! {
                () = tokio::time::sleep(TRIM_INTERVAL) => {}
                _ = stopping.as_mut() => return,
            }
            // Parks during the pause that made enough: trim again now.
            if self.parks_since_trim.load(Ordering::Relaxed) >= PARKS_PER_TRIM {
                self.enough.notify_one();
            }
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    #[allow(unsafe_code, reason = "FFI: glibc's malloc_trim has no safe binding")]
    // SAFETY: malloc_trim takes an integer, locks malloc's own heaps and gives their
    // free pages back; any thread may call it at any time.
    let _ = unsafe { libc::malloc_trim(0) };
}

/// Other allocators return memory by their own rules.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
