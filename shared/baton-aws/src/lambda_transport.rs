//! The production transport of remote agents: Lambda `InvokeWithResponseStream`.
//!
//! The callee is a `lambda_http` streaming function (the same kind as the orchestrator, so it also
//! serves its Function URL locally under `cargo lambda watch`). It is invoked directly with the
//! `baton::remote::RemoteRequest` wrapped in a Function URL event, and answers with an HTTP
//! response: a JSON prelude (status and headers) ended by 8 NUL bytes, then the NDJSON body.
//! This transport strips the prelude, refuses non-2xx statuses, and maps a failed invocation
//! (`InvokeComplete.error_code`) to [`TransportError::Remote`] (its details as a redacted,
//! bounded excerpt). A prelude that has not ended within [`MAX_PRELUDE_BYTES`] is an error, so
//! a callee that never sends the NUL separator cannot grow this process's memory.

use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvokeWithResponseStreamResponseEvent;
use baton::remote::{AgentTransport, ByteStream, TransportError};
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};

/// The longest response prelude (status and headers as JSON) accepted.
pub const MAX_PRELUDE_BYTES: usize = 64 * 1024;

/// Calls a remote agent deployed as a Lambda function.
#[derive(Debug, Clone)]
pub(crate) struct LambdaTransport {
    client: aws_sdk_lambda::Client,
    function: String,
}

impl LambdaTransport {
    /// A transport to `function` (name or ARN).
    pub(crate) fn new(client: aws_sdk_lambda::Client, function: impl Into<String>) -> LambdaTransport {
        LambdaTransport { client, function: function.into() }
    }

    /// A transport whose client comes from the environment (region, credentials,
    /// `AWS_ENDPOINT_URL_LAMBDA`).
    pub(crate) async fn from_env(function: impl Into<String>) -> LambdaTransport {
        let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        LambdaTransport::new(aws_sdk_lambda::Client::new(&config), function)
    }
}

/// One event of a response stream, as this module needs it.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// Bytes of the callee's response.
    Chunk(Bytes),
    /// The invocation ended; `error_code` is set when the callee failed.
    Complete {
        /// Lambda's error type (`Unhandled`, `Function.TimedOut`, …).
        error_code: Option<String>,
        /// Its details.
        error_details: Option<String>,
    },
}

/// `payload` (a JSON remote request) as the body of a Function URL (payload v2) event.
pub(crate) fn function_url_event(payload: &[u8]) -> Bytes {
    let event = serde_json::json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": "/",
        "rawQueryString": "",
        "headers": {"content-type": "application/json"},
        "requestContext": {
            "http": {"method": "POST", "path": "/", "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "baton"},
            "routeKey": "$default",
            "stage": "$default",
            "requestId": "invoke",
            "timeEpoch": 0
        },
        "body": String::from_utf8_lossy(payload),
        "isBase64Encoded": false
    });
    Bytes::from(serde_json::to_vec(&event).expect("an event serializes"))
}

/// The callee's body: the prelude stripped (a non-2xx status is an error), chunks passed on, and
/// a failed or unfinished invocation reported.
pub fn response_body(
    events: impl Stream<Item = Result<StreamEvent, TransportError>> + Send + 'static,
) -> ByteStream {
    Box::pin(body_stream(events))
}

fn body_stream(
    events: impl Stream<Item = Result<StreamEvent, TransportError>> + Send + 'static,
) -> impl Stream<Item = Result<Bytes, TransportError>> + Send {
    futures::stream::unfold(
        (Box::pin(events), Some(BytesMut::new()), false),
        |(mut events, mut prelude, done)| async move {
            if done {
                return None;
            }
            loop {
                match events.next().await {
                    None => {
                        let e = TransportError::Broken("the invocation ended without completing".into());
                        return Some((Err(e), (events, prelude, true)));
                    }
                    Some(Err(e)) => return Some((Err(e), (events, prelude, true))),
                    Some(Ok(StreamEvent::Complete { error_code: Some(code), error_details })) => {
                        let message = baton::redact::excerpt(error_details.as_deref().unwrap_or(""), &[]);
                        let e = TransportError::Remote { code: baton::redact::excerpt(&code, &[]), message };
                        return Some((Err(e), (events, prelude, true)));
                    }
                    Some(Ok(StreamEvent::Complete { error_code: None, .. })) => return None,
                    Some(Ok(StreamEvent::Chunk(chunk))) => {
                        let Some(buffer) = prelude.as_mut() else {
                            return Some((Ok(chunk), (events, prelude, false)));
                        };
                        // Only the new bytes (and the 7 before them) can complete the separator.
                        let from = buffer.len().saturating_sub(7);
                        buffer.extend_from_slice(&chunk);
                        let Some(end) = find_prelude_end(&buffer[from..]).map(|at| from + at) else {
                            if buffer.len() > MAX_PRELUDE_BYTES {
                                let e = TransportError::Broken(format!(
                                    "the response prelude passed {MAX_PRELUDE_BYTES} bytes without ending"
                                ));
                                return Some((Err(e), (events, None, true)));
                            }
                            continue;
                        };
                        let rest = buffer.split_off(end + 8).freeze();
                        if let Err(e) = check_prelude(&buffer[..end]) {
                            return Some((Err(e), (events, None, true)));
                        }
                        prelude = None;
                        if !rest.is_empty() {
                            return Some((Ok(rest), (events, prelude, false)));
                        }
                    }
                }
            }
        },
    )
}

fn find_prelude_end(buffer: &[u8]) -> Option<usize> {
    buffer.windows(8).position(|w| w == [0u8; 8])
}

fn check_prelude(prelude: &[u8]) -> Result<(), TransportError> {
    let value: serde_json::Value = serde_json::from_slice(prelude).map_err(|e| {
        TransportError::Broken(format!(
            "unreadable response prelude (line {}, column {})",
            e.line(),
            e.column()
        ))
    })?;
    let status = value.get("statusCode").and_then(serde_json::Value::as_u64).unwrap_or(200);
    if (200..300).contains(&status) {
        Ok(())
    } else {
        Err(TransportError::Remote {
            code: status.to_string(),
            message: "the remote agent refused the request".into(),
        })
    }
}

#[async_trait::async_trait]
impl AgentTransport for LambdaTransport {
    async fn invoke(&self, payload: Bytes) -> Result<ByteStream, TransportError> {
        let request = self
            .client
            .invoke_with_response_stream()
            .function_name(&self.function)
            .payload(Blob::new(function_url_event(&payload).to_vec()));
        let output = request.send().await.map_err(|e| {
            TransportError::Unreachable(aws_sdk_lambda::error::DisplayErrorContext(&e).to_string())
        })?;
        let events = futures::stream::unfold(output.event_stream, |mut receiver| async move {
            let item = match receiver.recv().await {
                Ok(None) => return None,
                Ok(Some(InvokeWithResponseStreamResponseEvent::PayloadChunk(chunk))) => {
                    Ok(StreamEvent::Chunk(
                        chunk.payload().map(|b| Bytes::copy_from_slice(b.as_ref())).unwrap_or_default(),
                    ))
                }
                Ok(Some(InvokeWithResponseStreamResponseEvent::InvokeComplete(done))) => {
                    Ok(StreamEvent::Complete {
                        error_code: done.error_code().map(str::to_owned),
                        error_details: done.error_details().map(str::to_owned),
                    })
                }
                Ok(Some(other)) => Err(TransportError::Broken(format!("unexpected stream event {other:?}"))),
                Err(e) => {
                    Err(TransportError::Broken(aws_sdk_lambda::error::DisplayErrorContext(&e).to_string()))
                }
            };
            Some((item, receiver))
        });
        Ok(response_body(events))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(b: &[u8]) -> Result<StreamEvent, TransportError> {
        Ok(StreamEvent::Chunk(Bytes::copy_from_slice(b)))
    }

    fn complete() -> Result<StreamEvent, TransportError> {
        Ok(StreamEvent::Complete { error_code: None, error_details: None })
    }

    async fn body(events: Vec<Result<StreamEvent, TransportError>>) -> Result<Vec<u8>, TransportError> {
        let mut out = Vec::new();
        let mut stream = response_body(futures::stream::iter(events));
        while let Some(chunk) = stream.next().await {
            out.extend_from_slice(&chunk?);
        }
        Ok(out)
    }

    const PRELUDE: &[u8] = br#"{"statusCode":200,"headers":{"content-type":"application/x-ndjson"}}"#;

    #[tokio::test]
    async fn the_prelude_is_stripped_even_when_split_across_chunks() {
        let mut all = PRELUDE.to_vec();
        all.extend_from_slice(&[0u8; 8]);
        all.extend_from_slice(b"{\"type\":\"thinking\"}\n");
        for split in [1, 5, PRELUDE.len(), PRELUDE.len() + 3, all.len()] {
            let (a, b) = all.split_at(split);
            let got = body(vec![chunk(a), chunk(b), complete()]).await.unwrap();
            assert_eq!(got, b"{\"type\":\"thinking\"}\n", "split at {split}");
        }
    }

    #[tokio::test]
    async fn a_failed_invocation_is_a_remote_error_after_what_arrived() {
        let mut first = PRELUDE.to_vec();
        first.extend_from_slice(&[0u8; 8]);
        first.extend_from_slice(b"partial\n");
        let events = vec![
            chunk(&first),
            Ok(StreamEvent::Complete {
                error_code: Some("Function.TimedOut".into()),
                error_details: Some("30 s".into()),
            }),
        ];
        let mut stream = response_body(futures::stream::iter(events));
        assert_eq!(stream.next().await.unwrap().unwrap(), Bytes::from_static(b"partial\n"));
        let err = stream.next().await.unwrap().unwrap_err();
        assert_eq!(err, TransportError::Remote { code: "Function.TimedOut".into(), message: "30 s".into() });
        assert!(stream.next().await.is_none());
    }

    #[tokio::test]
    async fn an_error_status_in_the_prelude_is_refused() {
        let mut first = br#"{"statusCode":400,"headers":{}}"#.to_vec();
        first.extend_from_slice(&[0u8; 8]);
        first.extend_from_slice(b"{\"error\":\"bad\"}");
        let err = body(vec![chunk(&first), complete()]).await.unwrap_err();
        assert!(matches!(err, TransportError::Remote { ref code, .. } if code == "400"), "{err:?}");
    }

    #[tokio::test]
    async fn a_prelude_that_never_ends_is_refused_within_its_cap() {
        let endless = (0..100).map(|_| chunk(&[b'x'; 1024])).collect();
        let err = body(endless).await.unwrap_err();
        assert!(matches!(&err, TransportError::Broken(m) if m.contains("prelude passed")), "{err:?}");
    }

    #[tokio::test]
    async fn failure_details_are_redacted() {
        let events = vec![Ok(StreamEvent::Complete {
            error_code: Some("Unhandled".into()),
            error_details: Some("auth failed for Bearer sk-live-abcdef123456".into()),
        })];
        let err = body(events).await.unwrap_err();
        assert!(!err.to_string().contains("sk-live"), "{err}");
    }

    #[tokio::test]
    async fn a_stream_that_stops_without_completing_is_broken() {
        let err = body(vec![chunk(b"{\"statusCode\":200}")]).await.unwrap_err();
        assert!(matches!(err, TransportError::Broken(_)), "{err:?}");
    }

    #[test]
    fn the_request_travels_as_the_body_of_a_function_url_event() {
        let event: serde_json::Value =
            serde_json::from_slice(&function_url_event(br#"{"agent":"shopping"}"#)).unwrap();
        assert_eq!(event["version"], "2.0");
        assert_eq!(event["requestContext"]["http"]["method"], "POST");
        assert_eq!(event["body"], r#"{"agent":"shopping"}"#);
    }
}
