//! How many client connections the main listener holds open at once
//! (`limits.max_connections`). Each takes a file descriptor, and so do the origin
//! connections, the store's files and the directory watches: a client that opens
//! connections until the process runs out would break those too. At the limit a new
//! connection makes idle keep-alive connections close to make room, and waits
//! (unserved, the listener accepting no more) until one has closed, as nginx does at
//! `worker_connections`.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The connections the listener may hold open.
pub struct Slots {
    free: Arc<Semaphore>,
    open: Gauge,
    waits: Counter,
    /// When the limit was last warned of.
    warned: Mutex<Option<Instant>>,
}

/// How often room is asked for again while a new connection waits for a place.
const ROOM_ASKED_EVERY: Duration = Duration::from_secs(1);

/// The limit is warned of at most this often (under pressure it is reached again
/// and again).
const WARN_EVERY: Duration = Duration::from_secs(60);

/// A place waited for before accepting: not counted open until a connection takes it.
pub struct Free(OwnedSemaphorePermit);

/// One open connection's place, held wherever the connection is (served, parked,
/// upgraded) until it closes.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    open: Gauge,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.dec();
    }
}

impl Slots {
    /// `max` connections (at least one); `open` counts those held, `waits` the times
    /// the listener found none free.
    pub fn new(max: usize, open: Gauge, waits: Counter) -> Slots {
        Slots {
            free: Arc::new(Semaphore::new(max.clamp(1, Semaphore::MAX_PERMITS))),
            open,
            waits,
            warned: Mutex::new(None),
        }
    }

    /// A free place, once there is one. None free at once, the wait is counted and
    /// `make_room` called (it may close idle connections), and again every
    /// [`ROOM_ASKED_EVERY`] while none frees (connections idle now were busy then).
    pub async fn free(&self, mut make_room: impl FnMut()) -> Free {
        if let Ok(permit) = self.free.clone().try_acquire_owned() {
            return Free(permit);
        }
        self.warn_of_the_limit();
        self.waits.inc();
        let acquire = self.free.clone().acquire_owned();
        let mut acquire = std::pin::pin!(acquire);
        loop {
            make_room();
            tokio::select! {
                acquired = acquire.as_mut() => match acquired {
                    Ok(permit) => return Free(permit),
                    // The semaphore is never closed.
                    Err(_) => std::future::pending().await,
                },
                () = tokio::time::sleep(ROOM_ASKED_EVERY) => {}
            }
        }
    }

    fn warn_of_the_limit(&self) {
        let mut warned = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
        if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            *warned = Some(Instant::now());
            tracing::warn!(
                "connection limit reached (limits.max_connections): idle connections closed \
                 to make room; a new connection waits until one has closed"
            );
        }
    }

    /// `free` taken by a connection just accepted.
    pub fn take(&self, free: Free) -> Slot {
        self.open.inc();
        Slot {
            _permit: free.0,
            open: self.open.clone(),
        }
    }
}

/// The connections `limits.max_connections = 0` allows: three quarters of the file
/// descriptors the process may open (after [`raise_open_files_limit`]), the rest
/// left for the origin, the store and the watches.
pub fn default_max(open_files: u64) -> usize {
    usize::try_from(open_files / 4 * 3)
        .unwrap_or(usize::MAX)
        .max(1)
}

/// Raises the process's soft limit on open files to its hard limit, as far as the
/// kernel lets it, and returns the soft limit in force.
#[allow(unsafe_code)] // std has no getrlimit/setrlimit
pub fn raise_open_files_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit for the call to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: `raised` is a valid rlimit; the soft limit asked is the hard one.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return raised.rlim_cur;
        }
    }
    limit.rlim_cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_leaves_a_quarter_of_the_descriptors() {
        assert_eq!(default_max(1024), 768);
        assert_eq!(default_max(1), 1);
        assert_eq!(default_max(1 << 20), 786_432);
    }

    #[tokio::test]
    async fn a_slot_is_free_again_once_its_connection_closes() {
        let slots = Slots::new(2, Gauge::default(), Counter::default());
        let below_the_limit = || panic!("room made below the limit");
        let first = slots.take(slots.free(below_the_limit).await);
        let second = slots.free(below_the_limit).await;
        assert_eq!(
            slots.open.get(),
            1,
            "a place waited for is not a connection"
        );
        let _second = slots.take(second);
        assert_eq!(slots.open.get(), 2);
        let asked = std::cell::Cell::new(false);
        let mut third = Box::pin(slots.free(|| asked.set(true)));
        assert!(
            futures_poll_once(third.as_mut()).is_none(),
            "a third beyond the limit"
        );
        assert_eq!(slots.waits.get(), 1);
        assert!(asked.get(), "asked to make room");
        drop(first);
        assert_eq!(slots.open.get(), 1);
        let _third = slots.take(third.await);
        assert_eq!(slots.open.get(), 2);
    }

    #[tokio::test]
    async fn room_made_at_the_limit_is_taken_at_once() {
        let slots = Slots::new(1, Gauge::default(), Counter::default());
        let idle = std::cell::Cell::new(Some(slots.take(slots.free(|| {}).await)));
        let mut next = Box::pin(slots.free(|| drop(idle.take())));
        let next = futures_poll_once(next.as_mut()).expect("the place made is taken at once");
        assert_eq!(slots.waits.get(), 1, "the limit was reached");
        let _next = slots.take(next);
        assert_eq!(slots.open.get(), 1);
    }

    fn futures_poll_once<F: std::future::Future>(
        future: std::pin::Pin<&mut F>,
    ) -> Option<F::Output> {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match future.poll(&mut cx) {
            std::task::Poll::Ready(output) => Some(output),
            std::task::Poll::Pending => None,
        }
    }
}
