//! A team's Lambda function as a tool (`lambda_tools:` in a configuration, docs/tools.md): the
//! model's arguments are the function's event, its JSON answer the result (`Invoke`,
//! `RequestResponse`, with the function's IAM permissions as remote agents use them).
//!
//! Every failure is a tool error naming the tool, which the model reads: the function's own
//! error (`FunctionError`) with its `errorMessage` only (never its stack trace), an answer that
//! is not JSON or is over `max_result_bytes`, a call past `timeout_seconds`, the service out of
//! reach.
//!
//! **Never twice.** The SDK's own retries are off for these calls: an `Invoke` whose answer was
//! lost (the connection broke, the read timed out, Lambda's own 5xx) may have run the function,
//! so it is not sent again and the model reads `outcome_unknown`. Only what Lambda refused before
//! running anything is tried again: throttling (`TooManyRequestsException`, up to
//! `THROTTLE_ATTEMPTS` sends within the tool's timeout) and a connection that was never made.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use baton::config::tools::LambdaToolSpec;
use baton::tool::{Tool, ToolContext, ToolError};
use serde_json::Value;

/// Sends of one call Lambda throttled, at most (the first and two more, 200 ms and 400 ms apart).
pub(crate) const THROTTLE_ATTEMPTS: u32 = 3;

/// One Lambda function offered as a tool.
#[derive(Debug, Clone)]
pub struct LambdaTool {
    name: String,
    description: String,
    parameters: Value,
    function: String,
    timeout: Duration,
    max_result_bytes: usize,
    client: aws_sdk_lambda::Client,
}

impl LambdaTool {
    /// The tool `name` declared by `spec` (checked when the configuration was read), calling
    /// through `client`.
    pub fn new(name: &str, spec: &LambdaToolSpec, client: aws_sdk_lambda::Client) -> LambdaTool {
        LambdaTool {
            name: name.to_owned(),
            description: spec.description.clone(),
            parameters: spec.parameters.clone().unwrap_or_else(|| serde_json::json!({"type": "object"})),
            function: spec.function.clone(),
            timeout: spec.timeout(),
            max_result_bytes: spec.max_result_bytes(),
            client,
        }
    }

    fn failed(&self, reason: impl Into<String>) -> ToolError {
        ToolError::Failed { tool: self.name.clone(), reason: reason.into() }
    }

    async fn invoke(&self, arguments: Value) -> Result<Value, ToolError> {
        let payload = Blob::new(arguments.to_string());
        let mut attempt = 1;
        let out = loop {
            let sent = self
                .client
                .invoke()
                .function_name(&self.function)
                .invocation_type(InvocationType::RequestResponse)
                .payload(payload.clone())
                .send()
                .await;
            match sent {
                Ok(out) => break out,
                Err(e) => match self.classify(&e) {
                    Retry::Again if attempt < THROTTLE_ATTEMPTS => {
                        tokio::time::sleep(Duration::from_millis(200 << (attempt - 1))).await;
                        attempt += 1;
                    }
                    Retry::Again | Retry::Final => return Err(self.error_of(&e)),
                    Retry::Function(message) => {
                        return Err(self.failed(format!("the function failed: {message}")));
                    }
                    Retry::Unknown(reason) => {
                        tracing::warn!(tool = %self.name, %reason, "Lambda tool: the answer was lost after the call was sent; not sent again");
                        return Err(ToolError::OutcomeUnknown { tool: self.name.clone(), reason });
                    }
                },
            }
        };
        let payload = out.payload().map(|b| b.as_ref()).unwrap_or_default();
        if payload.len() > self.max_result_bytes {
            return Err(ToolError::TooLarge { tool: self.name.clone(), limit: self.max_result_bytes });
        }
        let answer: Result<Value, _> = serde_json::from_slice(payload);
        if out.function_error().is_some() {
            let message = answer
                .ok()
                .and_then(|v| v.get("errorMessage").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_else(|| "no message".to_owned());
            return Err(self.failed(format!("the function failed: {message}")));
        }
        answer.map_err(|_| self.failed("the function answered with something that is not JSON"))
    }

    /// Reaches the function without running it (`Invoke` with `DryRun`: Lambda checks that it
    /// exists and that this role may invoke it), for `orchestrator check --connect`. The error
    /// names the tool and the function.
    pub(crate) async fn reach(&self) -> Result<(), String> {
        dry_run(&self.client, &self.function, self.timeout)
            .await
            .map_err(|failure| format!("Lambda tool `{}` (function {}): {failure}", self.name, self.function))
    }

    /// Whether a failed `Invoke` may be sent again: only when Lambda ran nothing.
    fn classify(&self, error: &InvokeSdkError) -> Retry {
        use aws_sdk_lambda::error::SdkError;
        match error {
            SdkError::ServiceError(service) => {
                let status = service.raw().status().as_u16();
                if service.err().is_too_many_requests_exception() || status == 429 {
                    Retry::Again
                } else if let Some(message) = status.ge(&500).then(|| function_error(service.raw())).flatten() {
                    // A function's own error as `cargo lambda watch` answers it (500 and the
                    // error payload; Lambda answers 200 with `X-Amz-Function-Error`).
                    Retry::Function(message)
                } else if status >= 500 {
                    Retry::Unknown(format!(
                        "Lambda answered HTTP {status} ({}); the function may have run, so the call was not sent again",
                        service_words(service.err())
                    ))
                } else {
                    Retry::Final
                }
            }
            SdkError::ConstructionFailure(_) => Retry::Final,
            SdkError::DispatchFailure(_) if never_connected(error) => Retry::Final,
            _ => Retry::Unknown(
                "the connection to Lambda broke before it answered; the function may have run, so the call was not sent again"
                    .to_owned(),
            ),
        }
    }

    /// The error the model reads for a failure that ran nothing.
    fn error_of(&self, error: &InvokeSdkError) -> ToolError {
        // The service's own code and message (a missing function, a denied role); no endpoint
        // address, no request id.
        let reason = match error.as_service_error() {
            Some(service) => format!("the function could not be invoked: {}", service_words(service)),
            None => "the Lambda service could not be reached, so the call was not made".to_owned(),
        };
        self.failed(reason)
    }
}

type InvokeSdkError = aws_sdk_lambda::error::SdkError<
    aws_sdk_lambda::operation::invoke::InvokeError,
    aws_sdk_lambda::config::http::HttpResponse,
>;

/// What a failed send allows.
enum Retry {
    /// Lambda ran nothing and may be asked again (throttled).
    Again,
    /// Lambda ran nothing; the error is final.
    Final,
    /// The function may have run: never sent again.
    Unknown(String),
    /// The function ran and failed with this message.
    Function(String),
}

/// The `errorMessage` of a function's error payload (`{"errorMessage", "errorType", ...}`), if
/// `response` carries one.
fn function_error(response: &aws_sdk_lambda::config::http::HttpResponse) -> Option<String> {
    let payload: Value = serde_json::from_slice(response.body().bytes()?).ok()?;
    payload.get("errorMessage")?.as_str().map(str::to_owned)
}

/// Whether the connection to Lambda was never made (refused, no route, no such host): then
/// nothing was sent.
fn never_connected(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            if matches!(
                io.kind(),
                ConnectionRefused | AddrNotAvailable | HostUnreachable | NetworkUnreachable
            ) {
                return true;
            }
        }
        if e.to_string().contains("dns error") {
            return true;
        }
        source = e.source();
    }
    false
}

fn service_words(error: &aws_sdk_lambda::operation::invoke::InvokeError) -> String {
    use aws_sdk_lambda::error::ProvideErrorMetadata;
    match (error.code(), error.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_owned(),
        _ => "the service refused the call".to_owned(),
    }
}

#[async_trait::async_trait]
impl Tool for LambdaTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn kind(&self) -> &'static str {
        "lambda"
    }

    async fn call(&self, arguments: Value, _: &ToolContext) -> Result<Value, ToolError> {
        match tokio::time::timeout(self.timeout, self.invoke(arguments)).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::Timeout { tool: self.name.clone(), timeout: self.timeout }),
        }
    }
}

/// The Lambda client of the tools: the SDK's retries off (a lost answer is never sent again;
/// [`LambdaTool`] tries throttled calls again itself).
pub fn client_of(shared: &aws_config::SdkConfig) -> aws_sdk_lambda::Client {
    let config = aws_sdk_lambda::config::Builder::from(shared)
        .retry_config(aws_sdk_lambda::config::retry::RetryConfig::disabled())
        .build();
    aws_sdk_lambda::Client::from_conf(config)
}

/// Invokes `function` with `DryRun` within `timeout` (Lambda checks that it exists and that this
/// role may invoke it; nothing runs): why not, in words, when it fails.
pub(crate) async fn dry_run(
    client: &aws_sdk_lambda::Client,
    function: &str,
    timeout: std::time::Duration,
) -> Result<(), String> {
    let dry_run = client.invoke().function_name(function).invocation_type(InvocationType::DryRun).send();
    match tokio::time::timeout(timeout, dry_run).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(match e.as_service_error() {
            Some(service) => service_words(service),
            None => "the Lambda service could not be reached".to_owned(),
        }),
        Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
    }
}

/// Reaches every Lambda tool `config` declares (`LambdaTool::reach`): the first failure.
pub async fn reach_all(config: &baton::config::Config) -> Result<(), String> {
    if config.tool_sources.lambda.is_empty() {
        return Ok(());
    }
    let shared = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let client = client_of(&shared);
    for (name, spec) in &config.tool_sources.lambda {
        LambdaTool::new(name, spec, client.clone()).reach().await?;
    }
    Ok(())
}

/// The configuration's Lambda tools, over one client from the environment (region,
/// credentials, `AWS_ENDPOINT_URL_LAMBDA`); none, and no AWS configuration read, when it
/// declares none.
pub(crate) async fn lambda_tools(config: &baton::config::Config) -> Vec<Arc<dyn Tool>> {
    let declared = &config.tool_sources.lambda;
    if declared.is_empty() {
        return Vec::new();
    }
    let shared = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let client = client_of(&shared);
    declared
        .iter()
        .map(|(name, spec)| Arc::new(LambdaTool::new(name, spec, client.clone())) as Arc<dyn Tool>)
        .collect()
}

#[cfg(test)]
mod tests {
    //! Against a local endpoint speaking Lambda's `Invoke` wire format (`POST
    //! /2015-03-31/functions/<name>/invocations`; `X-Amz-Function-Error` on a function's error;
    //! `TooManyRequestsException` with 429), through the real SDK client.

    use std::sync::Mutex;

    use serde_json::json;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// What the endpoint does with one request: answer it, or drop the connection once read.
    #[derive(Clone)]
    enum Reply {
        Answer { status: u16, headers: Vec<(&'static str, &'static str)>, body: String },
        Drop,
    }

    /// An endpoint that plays `replies` in order (the last one again when they run out); the
    /// paths and bodies it received.
    async fn endpoint(replies: Vec<Reply>) -> (String, Arc<Mutex<Vec<(String, String, String)>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (log, replies) = (log.clone(), replies.clone());
                tokio::spawn(async move {
                    loop {
                        let Some(request) = read_request(&mut socket).await else { return };
                        let n = {
                            let mut log = log.lock().unwrap();
                            log.push(request);
                            log.len()
                        };
                        match replies[(n - 1).min(replies.len() - 1)].clone() {
                            Reply::Drop => return,
                            Reply::Answer { status, headers, body } => {
                                let mut head =
                                    format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\n", body.len());
                                for (k, v) in headers {
                                    head.push_str(&format!("{k}: {v}\r\n"));
                                }
                                head.push_str("\r\n");
                                let _ = socket.write_all(format!("{head}{body}").as_bytes()).await;
                            }
                        }
                    }
                });
            }
        });
        (url, seen)
    }

    /// One request's path, body and head (lowercase).
    async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<(String, String, String)> {
        let mut data = Vec::new();
        let mut buf = [0u8; 4096];
        let end = loop {
            if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let n = socket.read(&mut buf).await.ok().filter(|n| *n > 0)?;
            data.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&data[..end]).to_string();
        let length: usize = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while data.len() < end + length {
            let n = socket.read(&mut buf).await.ok().filter(|n| *n > 0)?;
            data.extend_from_slice(&buf[..n]);
        }
        let path = head.split_whitespace().nth(1).unwrap_or_default().to_owned();
        Some((path, String::from_utf8_lossy(&data[end..end + length]).to_string(), head.to_ascii_lowercase()))
    }

    async fn tool_at(url: &str) -> LambdaTool {
        let credentials = aws_credential_types::Credentials::new("testing", "testing", None, None, "test");
        let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(credentials)
            .endpoint_url(url)
            .load()
            .await;
        let spec: LambdaToolSpec = serde_json::from_value(json!({
            "function": "book-hotel", "description": "Books a hotel.", "timeout_seconds": 5
        }))
        .unwrap();
        LambdaTool::new("book_hotel", &spec, client_of(&shared))
    }

    fn ok(body: &str) -> Reply {
        Reply::Answer { status: 200, headers: vec![("content-type", "application/json")], body: body.into() }
    }

    #[tokio::test]
    async fn the_arguments_are_the_event_and_the_answer_the_result() {
        let (url, seen) = endpoint(vec![ok(r#"{"booking":"b-1"}"#)]).await;
        let tool = tool_at(&url).await;
        let result = tool.call(json!({"hotel_id": "h7", "nights": 3}), &ToolContext::default()).await;
        assert_eq!(result.unwrap(), json!({"booking": "b-1"}));
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].0, "/2015-03-31/functions/book-hotel/invocations");
        assert_eq!(
            serde_json::from_str::<Value>(&seen[0].1).unwrap(),
            json!({"hotel_id": "h7", "nights": 3})
        );
    }

    #[tokio::test]
    async fn a_functions_own_error_is_its_message_and_is_not_retried() {
        let error = Reply::Answer {
            status: 200,
            headers: vec![("x-amz-function-error", "Unhandled")],
            body: r#"{"errorMessage":"no rooms left","errorType":"Full","stackTrace":["at secret.py:3"]}"#
                .into(),
        };
        let (url, seen) = endpoint(vec![error]).await;
        let err = tool_at(&url).await.call(json!({}), &ToolContext::default()).await.unwrap_err();
        assert_eq!(err.code(), "tool_failed");
        let text = err.to_string();
        assert!(text.contains("no rooms left") && !text.contains("secret.py"), "{text}");
        assert_eq!(seen.lock().unwrap().len(), 1);

        // As `cargo lambda watch` answers it: 500 with the function's error payload.
        let emulated = Reply::Answer {
            status: 500,
            headers: vec![("content-type", "application/json")],
            body: r#"{"errorMessage":"no rooms left","errorType":"Full"}"#.into(),
        };
        let (url, seen) = endpoint(vec![emulated]).await;
        let err = tool_at(&url).await.call(json!({}), &ToolContext::default()).await.unwrap_err();
        assert_eq!(err.code(), "tool_failed", "{err}");
        assert!(err.to_string().contains("the function failed: no rooms left"), "{err}");
        assert_eq!(seen.lock().unwrap().len(), 1);
    }

    /// Never twice: the function ran and its answer was lost; nothing sends it again.
    #[tokio::test]
    async fn an_invoke_whose_answer_is_lost_is_sent_once_and_its_outcome_is_unknown() {
        let (url, seen) = endpoint(vec![Reply::Drop, ok("{}")]).await;
        let err =
            tool_at(&url).await.call(json!({"hotel_id": "h7"}), &ToolContext::default()).await.unwrap_err();
        assert_eq!(err.code(), "outcome_unknown", "{err}");
        assert!(err.to_string().contains("not sent again") && !err.to_string().contains(&url), "{err}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(seen.lock().unwrap().len(), 1, "sent once");

        // Lambda's own 5xx: the function may have run too.
        let failure = Reply::Answer {
            status: 500,
            headers: vec![("x-amzn-errortype", "ServiceException")],
            body: r#"{"message":"internal"}"#.into(),
        };
        let (url, seen) = endpoint(vec![failure, ok("{}")]).await;
        let err = tool_at(&url).await.call(json!({}), &ToolContext::default()).await.unwrap_err();
        assert_eq!(err.code(), "outcome_unknown", "{err}");
        assert_eq!(seen.lock().unwrap().len(), 1, "sent once");
    }

    /// Throttling ran nothing: it is tried again, a bounded number of times.
    #[tokio::test]
    async fn a_throttled_invoke_is_sent_again_a_bounded_number_of_times() {
        let throttled = Reply::Answer {
            status: 429,
            headers: vec![("x-amzn-errortype", "TooManyRequestsException")],
            body:
                r#"{"message":"Rate exceeded","Reason":"ReservedFunctionConcurrentInvocationLimitExceeded"}"#
                    .into(),
        };
        let (url, seen) = endpoint(vec![throttled.clone(), ok(r#"{"ok":true}"#)]).await;
        let result = tool_at(&url).await.call(json!({}), &ToolContext::default()).await;
        assert_eq!(result.unwrap(), json!({"ok": true}));
        assert_eq!(seen.lock().unwrap().len(), 2);

        let (url, seen) = endpoint(vec![throttled]).await;
        let err = tool_at(&url).await.call(json!({}), &ToolContext::default()).await.unwrap_err();
        assert_eq!(err.code(), "tool_failed");
        assert!(err.to_string().contains("TooManyRequestsException"), "{err}");
        assert_eq!(seen.lock().unwrap().len() as u32, THROTTLE_ATTEMPTS);
    }

    #[tokio::test]
    async fn reaching_a_function_runs_nothing_and_names_what_is_wrong() {
        let (url, seen) =
            endpoint(vec![Reply::Answer { status: 204, headers: vec![], body: String::new() }]).await;
        tool_at(&url).await.reach().await.unwrap();
        let (path, _, head) = seen.lock().unwrap()[0].clone();
        assert_eq!(path, "/2015-03-31/functions/book-hotel/invocations");
        assert!(head.contains("x-amz-invocation-type: dryrun"), "{head}");
        let missing = Reply::Answer {
            status: 404,
            headers: vec![("x-amzn-errortype", "ResourceNotFoundException")],
            body: r#"{"Type":"User","message":"Function not found: arn:aws:lambda:us-east-1:1:function:book-hotel"}"#
                .into(),
        };
        let (url, _) = endpoint(vec![missing]).await;
        let err = tool_at(&url).await.reach().await.unwrap_err();
        assert!(
            err.starts_with("Lambda tool `book_hotel` (function book-hotel): ResourceNotFoundException"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn an_endpoint_that_cannot_be_reached_ran_nothing() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let err = tool_at(&format!("http://127.0.0.1:{port}"))
            .await
            .call(json!({}), &ToolContext::default())
            .await
            .unwrap_err();
        assert_eq!(err.code(), "tool_failed", "{err}");
        assert!(err.to_string().contains("so the call was not made"), "{err}");
    }
}
