//! Work that outlives the request that started it (background encodes, encoding
//! writes, stale-while-revalidate refreshes). Shutdown waits for it, so the store is
//! closed only after the last write.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

#[derive(Clone, Default)]
pub struct Background {
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    pending: AtomicUsize,
    idle: Notify,
    /// Pieces of work started plus pieces ended: see [`Background::changes`].
    changes: AtomicU64,
}

/// Marks one piece of work; dropping it (even by a panic) ends that work.
pub struct Pending {
    state: Arc<State>,
    /// Whether the work's start and end count among [`Background::changes`].
    counted: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        // Counted once the work is over, so whatever it published is visible first.
        if self.counted {
            self.state.changes.fetch_add(1, Ordering::AcqRel);
        }
        if self.state.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.state.idle.notify_waiters();
        }
    }
}

impl Background {
    /// Marks work that the caller spawns itself and that holds the mark until it ends.
    /// For a task that must be small: [`Background::spawn`]'s wrapping `async` block
    /// keeps the wrapped future twice over (rustc keeps both the captured future and
    /// the one being awaited).
    pub fn pending(&self) -> Pending {
        self.mark(true)
    }

    fn mark(&self, counted: bool) -> Pending {
        if counted {
            self.state.changes.fetch_add(1, Ordering::AcqRel);
        }
        self.state.pending.fetch_add(1, Ordering::AcqRel);
        Pending {
            state: self.state.clone(),
            counted,
        }
    }

    /// Runs CPU or disk work on the blocking pool.
    pub fn spawn_blocking(&self, work: impl FnOnce() + Send + 'static) {
        self.run_blocking(work, self.pending());
    }

    /// Runs work on the blocking pool that changes nothing a kept answer is made from
    /// (a network's link estimate kept or loaded, which every answer choosing by it
    /// reads again): shutdown waits for it, [`Background::changes`] does not count it.
    pub fn spawn_blocking_unwatched(&self, work: impl FnOnce() + Send + 'static) {
        self.run_blocking(work, self.mark(false));
    }

    fn run_blocking(&self, work: impl FnOnce() + Send + 'static, pending: Pending) {
        tokio::task::spawn_blocking(move || {
            work();
            drop(pending);
        });
    }

    /// Runs an async task.
    pub fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        let pending = self.pending();
        tokio::spawn(async move {
            work.await;
            drop(pending);
        });
    }

    /// Counts every piece of work as it starts and as it ends. Background work is how
    /// state changes after the request that started it (an encoding kept, a variant
    /// made, a manifest replaced, a revalidation stored), so an unchanged count between
    /// two reads says none started or finished meanwhile (the prepared responses).
    pub fn changes(&self) -> u64 {
        self.state.changes.load(Ordering::Acquire)
    }

    /// Resolves once no work is pending.
    pub async fn idle(&self) {
        loop {
            let notified = self.state.idle.notified();
            if self.state.pending.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// The delta engine's derived bodies are made and kept as background work.
impl delta::derived::Spawner for Background {
    fn spawn_blocking(&self, work: Box<dyn FnOnce() + Send>) {
        Background::spawn_blocking(self, work);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn changes_count_each_piece_of_work_as_it_starts_and_as_it_ends() {
        let background = Background::default();
        let before = background.changes();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        let (end_tx, end_rx) = tokio::sync::oneshot::channel::<()>();
        background.spawn(async move {
            let _ = started_tx.send(());
            let _ = end_rx.await;
        });
        started_rx.await.unwrap();
        assert_eq!(background.changes(), before + 1, "started");
        end_tx.send(()).unwrap();
        background.idle().await;
        assert_eq!(background.changes(), before + 2, "ended");
    }

    #[tokio::test]
    async fn unwatched_work_is_waited_for_and_not_counted() {
        let background = Background::default();
        let before = background.changes();
        let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let finished = done.clone();
        background.spawn_blocking_unwatched(move || {
            let _ = end_rx.recv();
            finished.store(true, Ordering::Release);
        });
        let idle = tokio::spawn({
            let background = background.clone();
            async move { background.idle().await }
        });
        tokio::task::yield_now().await;
        assert!(!idle.is_finished(), "idle before the work ended");
        end_tx.send(()).unwrap();
        idle.await.unwrap();
        assert!(done.load(Ordering::Acquire));
        assert_eq!(background.changes(), before);
    }
}
