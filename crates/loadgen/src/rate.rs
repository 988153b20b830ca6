//! The open-loop run: requests sent on a fixed schedule whatever the server does, each
//! one's latency measured from when it was due.
//!
//! A closed-loop client (wrk, h2load) sends a connection's next request only after the
//! previous answer, so a server that stalls is simply asked less, and the requests that
//! would have waited are never measured (coordinated omission). Here a dispatcher
//! thread hands request `i` to its connection at its due time (`Schedule`); a
//! connection still busy with an earlier answer sends it late, and the wait counts.
//! The dispatcher sleeps on the OS timer (tens of µs of slack) rather than tokio's
//! (1 ms granularity), and its own lateness is reported apart.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

use crate::client::{self, Answer, ExchangeError, Sender};
use crate::latency::Latencies;
use crate::schedule::Schedule;
use crate::target::Target;

pub struct RateOptions {
    pub target: Target,
    pub schedule: Schedule,
    /// How long to wait for the answers still outstanding when the schedule ends;
    /// those not answered by then are reported unfinished.
    pub drain: Duration,
}

/// What a run measured.
#[derive(Debug)]
pub struct RateReport {
    pub schedule: Schedule,
    /// Answers received, whatever their status.
    pub answered: u64,
    pub non_2xx: u64,
    /// Requests that failed: no connection, or it broke during the exchange.
    pub failed: u64,
    /// Body bytes of the answers, as sent (coded).
    pub body_bytes: u64,
    /// From the start to the last answer.
    pub elapsed: Duration,
    /// Of every answer, from its request's due time to its last body byte.
    pub latency: Latencies,
    /// How late the dispatcher handed requests to their connections: the loader's
    /// own error, included in `latency`.
    pub dispatch_lag: Latencies,
    pub first_error: Option<String>,
}

/// One connection's share of the counts.
#[derive(Default)]
struct Tally {
    latency: Latencies,
    answered: u64,
    non_2xx: u64,
    failed: u64,
    body_bytes: u64,
    last_answer: Option<Instant>,
    first_error: Option<String>,
}

/// Runs the schedule against the target. Connections are opened before the start
/// (a connection that cannot be opened is retried at its first request, which then
/// counts as failed if it still cannot).
pub async fn run(options: RateOptions) -> RateReport {
    let RateOptions {
        target,
        schedule,
        drain,
    } = options;
    let target = Arc::new(target);
    let mut opened = Vec::with_capacity(schedule.connections());
    for _ in 0..schedule.connections() {
        opened.push(match client::connect(target.addr()).await {
            Ok((sender, driver)) => {
                tokio::spawn(driver);
                Some(sender)
            }
            Err(_) => None,
        });
    }

    let start = Instant::now();
    let give_up = start + schedule.duration() + drain;
    let mut queues = Vec::with_capacity(opened.len());
    let mut workers = Vec::with_capacity(opened.len());
    for sender in opened {
        let (queue, due) = mpsc::unbounded_channel();
        queues.push(queue);
        workers.push(tokio::spawn(work(
            target.clone(),
            sender,
            due,
            schedule,
            start,
            give_up,
        )));
    }
    let dispatcher = tokio::task::spawn_blocking(move || dispatch(schedule, start, queues));

    let mut total = Tally::default();
    for worker in workers {
        let tally = join(worker).await;
        total.latency.add(&tally.latency);
        total.answered += tally.answered;
        total.non_2xx += tally.non_2xx;
        total.failed += tally.failed;
        total.body_bytes += tally.body_bytes;
        total.last_answer = total.last_answer.max(tally.last_answer);
        if total.first_error.is_none() {
            total.first_error = tally.first_error;
        }
    }
    let dispatch_lag = join(dispatcher).await;
    RateReport {
        schedule,
        answered: total.answered,
        non_2xx: total.non_2xx,
        failed: total.failed,
        body_bytes: total.body_bytes,
        elapsed: total
            .last_answer
            .map_or(schedule.duration(), |last| last - start),
        latency: total.latency,
        dispatch_lag,
        first_error: total.first_error,
    }
}

/// A task's result; its panic is the loader's bug and goes on up.
async fn join<T>(task: tokio::task::JoinHandle<T>) -> T {
    match task.await {
        Ok(value) => value,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Hands each request to its connection at its due time; returns how late it was.
fn dispatch(schedule: Schedule, start: Instant, queues: Vec<UnboundedSender<u64>>) -> Latencies {
    let mut lag = Latencies::default();
    for i in 0..schedule.count() {
        let due = start + schedule.due(i);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        lag.record(Instant::now().saturating_duration_since(due));
        // A connection that gave up (the drain ended) takes no more.
        let _ = queues[schedule.connection_of(i)].send(i);
    }
    lag
}

/// One connection: its requests in order, each sent as soon as it is due and the
/// previous answer is in.
async fn work(
    target: Arc<Target>,
    mut sender: Option<Sender>,
    mut due_requests: UnboundedReceiver<u64>,
    schedule: Schedule,
    start: Instant,
    give_up: Instant,
) -> Tally {
    let mut tally = Tally::default();
    while let Some(i) = due_requests.recv().await {
        let due = start + schedule.due(i);
        let sent = tokio::time::timeout_at(give_up.into(), send(&target, &mut sender)).await;
        match sent {
            // The drain is over: this request and those still queued stay unfinished.
            Err(_) => break,
            Ok(Ok(answer)) => {
                let done = Instant::now();
                tally.latency.record(done.saturating_duration_since(due));
                tally.answered += 1;
                tally.body_bytes += answer.body_bytes;
                if !answer.status.is_success() {
                    tally.non_2xx += 1;
                }
                tally.last_answer = Some(done);
            }
            Ok(Err(e)) => {
                tally.failed += 1;
                tally.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    tally
}

/// One exchange on the connection in `slot`, reconnecting first when it is gone or was
/// closed by the server between answers; a failed exchange leaves the slot empty.
async fn send(target: &Target, slot: &mut Option<Sender>) -> Result<Answer, ExchangeError> {
    let reusable = match slot.as_mut() {
        Some(sender) => sender.ready().await.is_ok(),
        None => false,
    };
    let sender = match slot {
        Some(sender) if reusable => sender,
        _ => {
            let (sender, driver) = client::connect(target.addr()).await?;
            tokio::spawn(driver);
            slot.insert(sender)
        }
    };
    let answer = client::exchange(sender, target.request()).await;
    if answer.is_err() {
        *slot = None;
    }
    answer
}

impl RateReport {
    /// Scheduled requests neither answered nor failed when the drain ended.
    pub fn unfinished(&self) -> u64 {
        self.schedule.count() - self.answered - self.failed
    }

    /// Answers per second, from the start to the last answer.
    pub fn achieved_rate(&self) -> f64 {
        self.answered as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn body_bytes_per_answer(&self) -> u64 {
        self.body_bytes.checked_div(self.answered).unwrap_or(0)
    }

    /// The human report (several lines, no trailing newline).
    pub fn text(&self, url: &str) -> String {
        let s = &self.schedule;
        let l = self.latency.summary();
        let lag = self.dispatch_lag.summary();
        let mut text = format!(
            "{url}: {} requests/s for {} s over {} connections ({} requests)\n\
             answered {} ({} not 2xx), failed {}, unfinished {}; achieved {:.1} requests/s; {} B body per answer\n\
             latency from the due time (ms): p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}\n\
             the loader's own lateness (ms): p99 {:.3}  max {:.3}",
            s.rate(),
            s.duration().as_secs_f64(),
            s.connections(),
            s.count(),
            self.answered,
            self.non_2xx,
            self.failed,
            self.unfinished(),
            self.achieved_rate(),
            self.body_bytes_per_answer(),
            l.p50,
            l.p90,
            l.p99,
            l.p99_9,
            l.max,
            lag.p99,
            lag.max,
        );
        if let Some(e) = &self.first_error {
            text.push_str(&format!("\nfirst failure: {e}"));
        }
        text
    }

    /// The report as one JSON object.
    pub fn json(&self, url: &str) -> serde_json::Value {
        let s = &self.schedule;
        let lag = self.dispatch_lag.summary();
        json!({
            "mode": "rate",
            "url": url,
            "rate": s.rate(),
            "duration_s": s.duration().as_secs_f64(),
            "connections": s.connections(),
            "scheduled": s.count(),
            "answered": self.answered,
            "non_2xx": self.non_2xx,
            "failed": self.failed,
            "unfinished": self.unfinished(),
            "achieved_rps": (self.achieved_rate() * 10.0).round() / 10.0,
            "body_bytes_per_answer": self.body_bytes_per_answer(),
            "latency_ms": self.latency.summary(),
            "dispatch_lag_ms": { "p99": lag.p99, "max": lag.max },
            "first_failure": self.first_error,
        })
    }
}
