//! The settings of one Chat Completions model: where, which model, the timeouts, the retry
//! policy and the answer cap.

use std::time::Duration;

use crate::model::ModelError;

/// Connect, first-byte and idle timeouts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timeouts {
    /// Establishing the TCP (and TLS) connection.
    pub connect: Duration,
    /// From sending the request to the response headers.
    pub first_byte: Duration,
    /// Between two chunks of a started stream.
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            first_byte: Duration::from_secs(30),
            idle: Duration::from_secs(30),
        }
    }
}

/// Retry policy for failures before the first delta.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Backoff before the first retry; doubles each time.
    pub base_delay: Duration,
    /// Backoff cap.
    pub max_delay: Duration,
    /// A server's `Retry-After` longer than this is not waited for: the error is returned.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(4),
            max_retry_after: Duration::from_secs(20),
        }
    }
}

impl RetryPolicy {
    /// How long to wait before retry number `attempt` (0-based) after `error`, or `None` when the
    /// error should be returned instead.
    pub(crate) fn delay(&self, attempt: u32, error: &ModelError) -> Option<Duration> {
        if attempt >= self.max_retries || !error.is_retryable() {
            return None;
        }
        if let ModelError::Http { retry_after: Some(after), .. } = error {
            return (*after <= self.max_retry_after).then_some(*after);
        }
        let exp = self.base_delay.saturating_mul(1 << attempt.min(16)).min(self.max_delay);
        // "Equal jitter": half fixed, half random, so retries from many clients spread out.
        Some(exp / 2 + exp.mul_f64(fastrand::f64() / 2.0))
    }
}

/// The default cap on one model answer: text, reasoning and tool-call names and arguments.
pub(crate) const DEFAULT_MAX_ANSWER_CHARS: usize = 32_000;
/// A response body may carry this many bytes per answer character (JSON framing, ids, usage)
/// before it is cut: the cap on memory for a stream whose events carry no answer at all.
pub(super) const BODY_BYTES_PER_ANSWER_CHAR: usize = 256;
/// How much of an error body is read.
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Settings of one Chat Completions model.
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// Base URL up to and including `/v1`, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Bearer token; none for servers that need none.
    pub api_key: Option<String>,
    /// Model name sent in the request.
    pub model: String,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Retries.
    pub retry: RetryPolicy,
    /// The longest answer, in characters of text, reasoning and tool calls; past it the stream
    /// ends with [`ModelError::AnswerTooLong`].
    pub max_answer_chars: usize,
}

impl OpenAiConfig {
    /// A config with default timeouts and retries.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> OpenAiConfig {
        OpenAiConfig {
            base_url: base_url.into(),
            api_key: None,
            model: model.into(),
            timeouts: Timeouts::default(),
            retry: RetryPolicy::default(),
            max_answer_chars: DEFAULT_MAX_ANSWER_CHARS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_stops_at_max_retries() {
        let p = RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(300),
            max_retry_after: Duration::from_secs(1),
        };
        let err = ModelError::Connect("refused".into());
        for _ in 0..50 {
            let d0 = p.delay(0, &err).unwrap();
            assert!(d0 >= Duration::from_millis(50) && d0 <= Duration::from_millis(100), "{d0:?}");
            let d2 = p.delay(2, &err).unwrap();
            assert!(d2 >= Duration::from_millis(150) && d2 <= Duration::from_millis(300), "{d2:?}");
        }
        assert_eq!(p.delay(3, &err), None);
        let too_long = ModelError::Http {
            status: 429,
            message: String::new(),
            retry_after: Some(Duration::from_secs(5)),
        };
        assert_eq!(p.delay(0, &too_long), None);
        let bad = ModelError::Http { status: 400, message: String::new(), retry_after: None };
        assert_eq!(p.delay(0, &bad), None);
    }
}
