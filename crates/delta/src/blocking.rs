//! Awaiting work on tokio's blocking pool. It lives here, in the lowest of the
//! server's crates with tokio, so the proxy, the link server and the client proxy
//! share it (the proxy re-exports it).

use std::future::Future;

use tokio::task::JoinError;

/// Runs `work` on the blocking pool and returns its result, as [`join`] does.
pub async fn run<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    join(tokio::task::spawn_blocking(work)).await
}

/// The result of a task already spawned (a `JoinHandle`, or `&mut` one kept across
/// cancellations).
///
/// A panic in the task resumes in the caller, as if the work had run inline: a panic
/// stays a panic. The only other way a blocking task does not finish is the runtime
/// shutting down before it started; the task awaiting it is then being dropped with
/// the runtime, so this waits for that instead of inventing a result.
pub async fn join<T>(task: impl Future<Output = Result<T, JoinError>>) -> T {
    match task.await {
        Ok(value) => value,
        Err(e) => match e.try_into_panic() {
            Ok(payload) => std::panic::resume_unwind(payload),
            Err(_) => {
                tracing::debug!("blocking work cancelled: the runtime is shutting down");
                std::future::pending().await
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_the_result() {
        assert_eq!(run(|| 6 * 7).await, 42);
    }

    #[tokio::test]
    async fn a_panic_stays_a_panic() {
        let caller = tokio::spawn(run(|| -> u32 { panic!("in the work") }));
        let payload = caller.await.unwrap_err().into_panic();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"in the work"));
    }

    #[tokio::test]
    async fn a_cancelled_task_is_never_answered() {
        let task = tokio::spawn(std::future::pending::<u32>());
        task.abort();
        let answer = tokio::time::timeout(std::time::Duration::from_millis(50), join(task));
        assert!(answer.await.is_err());
    }
}
