//! The threads that serve client connections: each runs its own single-threaded
//! tokio runtime (event loop, timers, blocking pool), and a connection stays on the
//! one it was handed to for its life, as an nginx worker keeps its connections.
//!
//! On one work-stealing runtime, a connection's task is woken by whichever worker
//! polled the socket's readiness, and idle workers are woken to steal: a futex and
//! often a context switch per request (0.4–0.6 per request with two workers under
//! wrk, docs/benchmarks.md, "Connections on threads of their own"). The accept loop,
//! the admin listener and the parked connections' watcher stay on the main runtime;
//! a connection is handed over as its bare socket and registered with its shard's
//! event loop there.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The connection threads of one server. [`Shards::stop`] (or dropping it) ends them:
/// each thread's runtime then drops the tasks it still has.
pub struct Shards {
    handles: Vec<Handle>,
    next: AtomicUsize,
    /// Each thread's signal to end, with how long it may wait for its blocking work;
    /// dropped with `Shards`, it ends the thread without waiting.
    ends: Vec<oneshot::Sender<Duration>>,
    /// Each thread's word that its runtime, and all it held, is gone.
    gone: Vec<oneshot::Receiver<()>>,
}

impl Shards {
    /// Starts `threads` connection threads (0: one per CPU the process may use).
    pub fn start(threads: usize) -> std::io::Result<Shards> {
        let threads = match threads {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n,
        };
        let mut handles = Vec::with_capacity(threads);
        let mut ends = Vec::with_capacity(threads);
        let mut gone = Vec::with_capacity(threads);
        for index in 0..threads {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (end, ended) = oneshot::channel::<Duration>();
            let (went, thread_gone) = oneshot::channel::<()>();
            handles.push(runtime.handle().clone());
            std::thread::Builder::new()
                .name(format!("wirefold-conn-{index}"))
                .spawn(move || {
                    // Runs the thread's tasks until `Shards` ends it, then drops what
                    // is left (here, not in an async context). A dropped runtime would
                    // wait for its blocking work however long it runs (a large
                    // body's encoding): that wait is bounded by the shutdown's grace.
                    let wait = runtime.block_on(ended).unwrap_or(Duration::ZERO);
                    runtime.shutdown_timeout(wait);
                    let _ = went.send(());
                })?;
            ends.push(end);
            gone.push(thread_gone);
        }
        Ok(Shards {
            handles,
            next: AtomicUsize::new(0),
            ends,
            gone,
        })
    }

    /// Ends the threads and waits until each has dropped what it still ran (the
    /// connections past the shutdown's grace, and with them what they held: the
    /// store, for one) and its blocking work has ended, or `wait` has passed: work
    /// still running then (an encoding, a store write, each written to be cut off
    /// safely) is left to finish on its own or to end with the process.
    pub async fn stop(self, wait: Duration) {
        let Shards { ends, gone, .. } = self;
        for end in ends {
            let _ = end.send(wait);
        }
        for thread in gone {
            let _ = thread.await;
        }
    }

    /// Runs `task` on the next thread in turn. It is polled there only: a socket it
    /// registers (`TcpStream::from_std`) is watched by that thread's event loop.
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let turn = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        drop(self.handles[turn].spawn(task));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tasks_go_to_the_threads_in_turn_and_are_dropped_when_they_stop() {
        let shards = Shards::start(2).unwrap();
        let mut names = Vec::new();
        for _ in 0..4 {
            let (sent, name) = oneshot::channel();
            shards.spawn(async move {
                let _ = sent.send(std::thread::current().name().map(str::to_owned));
            });
            names.push(name.await.unwrap().unwrap());
        }
        assert_eq!(
            names,
            [
                "wirefold-conn-0",
                "wirefold-conn-1",
                "wirefold-conn-0",
                "wirefold-conn-1"
            ]
        );
        // A task still running when the threads stop is dropped before `stop` returns.
        let (held, mut dropped) = oneshot::channel::<()>();
        shards.spawn(async move {
            let _held = held;
            std::future::pending::<()>().await;
        });
        shards.stop(Duration::from_secs(30)).await;
        assert_eq!(
            dropped.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        );
    }

    #[tokio::test]
    async fn stopping_waits_for_blocking_work_no_longer_than_it_is_told() {
        let shards = Shards::start(1).unwrap();
        let (started, running) = oneshot::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        shards.spawn(async move {
            let _ = tokio::task::spawn_blocking(move || {
                let _ = started.send(());
                // Blocks until the test lets it go, after `stop` has returned.
                let _ = released.recv();
            })
            .await;
        });
        running.await.unwrap();
        // Before: the runtime's drop waited for the blocking work, so `stop` never
        // returned while it ran.
        let stopped = tokio::time::timeout(
            Duration::from_secs(30),
            shards.stop(Duration::from_millis(50)),
        )
        .await;
        let _ = release.send(());
        assert!(stopped.is_ok(), "stop waited for the blocking work");
    }
}
