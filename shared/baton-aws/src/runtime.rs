//! Keeping a function's event loop alive across a failed call to the Lambda Runtime API.
//!
//! `lambda_runtime`'s loop returns an error when one of its own HTTP calls to the Runtime API
//! fails (the API closed the connection between two invocations, for instance). Returning from
//! `main` then ends the process: Lambda has to start a new execution environment (a cold start),
//! and `cargo lambda watch` does not restart it at all, so the next request hangs. A handler error
//! never gets here (the runtime reports it for its invocation); only the loop's own transport
//! does. So the loop is entered again, unless it keeps failing: `MAX_QUICK_FAILURES` failures
//! within `QUICK_FAILURE_WINDOW` mean the Runtime API is really gone, and the error is returned.

use std::future::Future;
use std::time::{Duration, Instant};

/// How many failures of the event loop within [`QUICK_FAILURE_WINDOW`] end the process.
pub(crate) const MAX_QUICK_FAILURES: usize = 3;

/// The window in which [`MAX_QUICK_FAILURES`] failures end the process.
pub(crate) const QUICK_FAILURE_WINDOW: Duration = Duration::from_secs(10);

/// Runs the event loop `run` makes, again after each failure, until it ends or fails
/// `MAX_QUICK_FAILURES` times within `QUICK_FAILURE_WINDOW`.
pub async fn keep_running<F, Fut, E>(mut run: F) -> Result<(), E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let mut failures: Vec<Instant> = Vec::new();
    loop {
        let Err(e) = run().await else { return Ok(()) };
        let now = Instant::now();
        failures.retain(|at| now.duration_since(*at) < QUICK_FAILURE_WINDOW);
        failures.push(now);
        if failures.len() >= MAX_QUICK_FAILURES {
            return Err(e);
        }
        tracing::warn!(error = %e, "the Lambda event loop failed; entering it again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failing_loop_is_entered_again_and_repeated_failures_end_it() {
        let mut calls = 0;
        let result: Result<(), String> = keep_running(|| {
            calls += 1;
            let outcome = if calls == 1 { Err("connection closed".to_owned()) } else { Ok(()) };
            async move { outcome }
        })
        .await;
        assert_eq!((result, calls), (Ok(()), 2), "one failure: the loop runs again and ends well");

        let mut calls = 0;
        let result: Result<(), String> = keep_running(|| {
            calls += 1;
            let n = calls;
            async move { Err(format!("failure {n}")) }
        })
        .await;
        assert_eq!(result, Err(format!("failure {MAX_QUICK_FAILURES}")));
        assert_eq!(calls, MAX_QUICK_FAILURES, "quick repeated failures end it");
    }
}
