//! Work that outlives the request that started it (background encodes, encoding
//! writes, stale-while-revalidate refreshes). Shutdown waits for it, so the store is
//! closed only after the last write.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
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
}

/// Marks one piece of work; dropping it (even by a panic) ends that work.
pub struct Pending(Arc<State>);

impl Drop for Pending {
    fn drop(&mut self) {
        if self.0.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Background {
    /// Marks work that the caller spawns itself and that holds the mark until it ends.
    /// For a task that must be small: [`Background::spawn`]'s wrapping `async` block
    /// keeps the wrapped future twice over (rustc keeps both the captured future and
    /// the one being awaited).
    pub fn pending(&self) -> Pending {
        self.state.pending.fetch_add(1, Ordering::AcqRel);
        Pending(self.state.clone())
    }

    /// Runs CPU or disk work on the blocking pool.
    pub fn spawn_blocking(&self, work: impl FnOnce() + Send + 'static) {
        let pending = self.pending();
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
