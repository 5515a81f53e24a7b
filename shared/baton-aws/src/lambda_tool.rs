//! A team's Lambda function as a tool (`lambda_tools:` in a configuration, docs/tools.md): the
//! model's arguments are the function's event, its JSON answer the result (`Invoke`,
//! `RequestResponse`, with the function's IAM permissions as remote agents use them).
//!
//! Every failure is a tool error naming the tool, which the model reads: the function's own
//! error (`FunctionError`) with its `errorMessage` only (never its stack trace), an answer that
//! is not JSON or is over `max_result_bytes`, a call past `timeout_seconds`, the service out of
//! reach.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use baton::config::tools::LambdaToolSpec;
use baton::tool::{Tool, ToolContext, ToolError};
use futures::future::BoxFuture;
use serde_json::Value;

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
        let out = self
            .client
            .invoke()
            .function_name(&self.function)
            .invocation_type(InvocationType::RequestResponse)
            .payload(Blob::new(arguments.to_string()))
            .send()
            .await
            .map_err(|e| {
                // The service's own code and message (a missing function, a denied role); no
                // endpoint address, no request id.
                let reason = match e.as_service_error() {
                    Some(service) => format!("the function could not be invoked: {}", service_words(service)),
                    None => "the Lambda service could not be reached".to_owned(),
                };
                self.failed(reason)
            })?;
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
}

fn service_words(error: &aws_sdk_lambda::operation::invoke::InvokeError) -> String {
    use aws_sdk_lambda::error::ProvideErrorMetadata;
    match (error.code(), error.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_owned(),
        _ => "the service refused the call".to_owned(),
    }
}

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

    fn call<'a>(&'a self, arguments: Value, _: &'a ToolContext) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            match tokio::time::timeout(self.timeout, self.invoke(arguments)).await {
                Ok(result) => result,
                Err(_) => Err(ToolError::Timeout { tool: self.name.clone(), timeout: self.timeout }),
            }
        })
    }
}

/// The configuration's Lambda tools, over one client from the environment (region,
/// credentials, `AWS_ENDPOINT_URL_LAMBDA`); none, and no AWS configuration read, when it
/// declares none.
pub async fn lambda_tools(config: &baton::config::Config) -> Vec<Arc<dyn Tool>> {
    let declared = &config.tool_sources.lambda;
    if declared.is_empty() {
        return Vec::new();
    }
    let shared = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let client = aws_sdk_lambda::Client::new(&shared);
    declared
        .iter()
        .map(|(name, spec)| Arc::new(LambdaTool::new(name, spec, client.clone())) as Arc<dyn Tool>)
        .collect()
}
