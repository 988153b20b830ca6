//! Idle keep-alive connections: open many, send one request on each and read its whole
//! answer, then keep them all open and silent, so that a server's memory per idle
//! connection can be read while they are held.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;

use crate::client::{self, Answer};
use crate::target::Target;

/// Descriptors the loader needs besides its connections (stdio, the runtime's own).
const SPARE_DESCRIPTORS: u64 = 64;

pub struct IdleOptions {
    pub target: Target,
    pub connections: usize,
    pub hold: Duration,
    /// Connections being opened at once: more than a listen backlog takes (nginx's
    /// is 511) would only see refused or retried SYNs.
    pub open_at_once: usize,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum IdleError {
    #[error("{connections} connections need {needed} file descriptors, and the limit (ulimit -n) is {limit}: raise it")]
    Descriptors {
        connections: usize,
        needed: u64,
        limit: u64,
    },
    #[error("--connections and --open-at-once must be at least 1")]
    Zero,
}

/// The connections once every one has been tried.
#[derive(Clone, Debug, Default)]
pub struct Opened {
    /// Answered (any status) and kept open.
    pub established: usize,
    pub failed: usize,
    pub non_2xx: usize,
    pub body_bytes: u64,
    pub took: Duration,
    pub first_error: Option<String>,
}

#[derive(Clone, Debug)]
pub struct IdleReport {
    pub connections: usize,
    pub hold: Duration,
    pub opened: Opened,
    /// Established connections the server closed before the hold ended.
    pub closed_by_server: usize,
}

/// Opens the connections, calls `announce` once all are established (or failed), holds
/// them for `hold`, and reports.
pub async fn run(
    options: IdleOptions,
    announce: impl FnOnce(&Opened),
) -> Result<IdleReport, IdleError> {
    let IdleOptions {
        target,
        connections,
        hold,
        open_at_once,
    } = options;
    if connections == 0 || open_at_once == 0 {
        return Err(IdleError::Zero);
    }
    check_descriptors(connections, descriptor_limit())?;

    let target = Arc::new(target);
    let permits = Arc::new(Semaphore::new(open_at_once));
    let closed = Arc::new(AtomicUsize::new(0));
    let (release, released) = watch::channel(false);
    let (results, mut outcomes) = mpsc::unbounded_channel();
    let started = Instant::now();
    let mut held = JoinSet::new();
    for _ in 0..connections {
        held.spawn(open_and_hold(
            target.clone(),
            permits.clone(),
            results.clone(),
            released.clone(),
            closed.clone(),
        ));
    }
    drop(results);

    let mut opened = Opened::default();
    while let Some(outcome) = outcomes.recv().await {
        match outcome {
            Ok(answer) => {
                opened.established += 1;
                opened.body_bytes += answer.body_bytes;
                if !answer.status.is_success() {
                    opened.non_2xx += 1;
                }
            }
            Err(e) => {
                opened.failed += 1;
                opened.first_error.get_or_insert(e);
            }
        }
    }
    opened.took = started.elapsed();
    announce(&opened);

    tokio::time::sleep(hold).await;
    let closed_by_server = closed.load(Ordering::Relaxed);
    let _ = release.send(true);
    while held.join_next().await.is_some() {}
    Ok(IdleReport {
        connections,
        hold,
        opened,
        closed_by_server,
    })
}

/// One connection: opened (at most `open_at_once` at a time), one exchange, then held
/// until released or closed by the server.
async fn open_and_hold(
    target: Arc<Target>,
    permits: Arc<Semaphore>,
    results: mpsc::UnboundedSender<Result<Answer, String>>,
    mut released: watch::Receiver<bool>,
    closed: Arc<AtomicUsize>,
) {
    let opening = async {
        // The semaphore is never closed: an error here cannot happen, and would only
        // open this connection without waiting its turn.
        let _turn = permits.acquire().await;
        let (mut sender, driver) = client::connect(target.addr()).await?;
        let driver = tokio::spawn(driver);
        let answer = client::exchange(&mut sender, target.request()).await?;
        Ok::<_, client::ExchangeError>((sender, driver, answer))
    };
    match opening.await {
        Err(e) => {
            let _ = results.send(Err(e.to_string()));
        }
        Ok((sender, driver, answer)) => {
            let _ = results.send(Ok(answer));
            drop(results);
            tokio::select! {
                _ = driver => {
                    closed.fetch_add(1, Ordering::Relaxed);
                }
                _ = released.wait_for(|released| *released) => {}
            }
            // Dropping the sender of an idle connection closes it.
            drop(sender);
        }
    }
}

fn check_descriptors(connections: usize, limit: Option<u64>) -> Result<(), IdleError> {
    let needed = connections as u64 + SPARE_DESCRIPTORS;
    match limit {
        Some(limit) if limit < needed => Err(IdleError::Descriptors {
            connections,
            needed,
            limit,
        }),
        _ => Ok(()),
    }
}

/// The soft limit on open files, from /proc (None where it cannot be read, or is
/// unlimited).
fn descriptor_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    soft_open_files(&limits)
}

fn soft_open_files(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl IdleReport {
    pub fn open_at_end(&self) -> usize {
        self.opened.established - self.closed_by_server
    }

    /// Every connection established with a 2xx answer and still open at the end.
    pub fn complete(&self) -> bool {
        self.opened.established == self.connections
            && self.opened.non_2xx == 0
            && self.closed_by_server == 0
    }

    pub fn text(&self, addr: &str) -> String {
        let mut text = format!(
            "{addr}: held {} of {} connections for {} s: {} closed by the server, {} open at the end",
            self.opened.established,
            self.connections,
            self.hold.as_secs_f64(),
            self.closed_by_server,
            self.open_at_end(),
        );
        if let Some(e) = &self.opened.first_error {
            text.push_str(&format!("\nfirst failure: {e}"));
        }
        text
    }

    pub fn json(&self, addr: &str) -> serde_json::Value {
        let o = &self.opened;
        json!({
            "mode": "idle",
            "addr": addr,
            "connections": self.connections,
            "established": o.established,
            "failed": o.failed,
            "non_2xx": o.non_2xx,
            "body_bytes_per_answer": o.body_bytes.checked_div(o.established as u64).unwrap_or(0),
            "open_s": (o.took.as_secs_f64() * 1000.0).round() / 1000.0,
            "hold_s": self.hold.as_secs_f64(),
            "closed_by_server": self.closed_by_server,
            "open_at_end": self.open_at_end(),
            "first_failure": o.first_error,
        })
    }
}

impl Opened {
    /// The line printed once every connection has been tried.
    pub fn text(&self, connections: usize, addr: &str, hold: Duration) -> String {
        format!(
            "established {} of {connections} connections to {addr} in {:.1} s ({} failed, {} not 2xx); holding them idle for {} s",
            self.established,
            self.took.as_secs_f64(),
            self.failed,
            self.non_2xx,
            hold.as_secs_f64(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_read_from_proc_limits() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             94226                94226                processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(soft_open_files(limits), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(soft_open_files(unlimited), None);
        assert_eq!(soft_open_files(""), None);
        assert!(descriptor_limit().is_some(), "/proc/self/limits on Linux");
    }

    #[test]
    fn too_few_descriptors_is_refused_before_connecting() {
        assert_eq!(
            check_descriptors(10_000, Some(1024)),
            Err(IdleError::Descriptors {
                connections: 10_000,
                needed: 10_064,
                limit: 1024
            })
        );
        assert_eq!(check_descriptors(10_000, Some(20_000)), Ok(()));
        assert_eq!(check_descriptors(10_000, None), Ok(()));
    }
}
