//! The unit tests' tools: one tool made of a name, a JSON Schema and an async function, so a
//! test says what its tool does in one expression instead of an `impl Tool` of its own.

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::{Tool, ToolContext, ToolError};

type Call = dyn Fn(Value, ToolContext) -> BoxFuture<'static, Result<Value, ToolError>> + Send + Sync;

/// A tool whose call is a function of its arguments and context.
pub(crate) struct FnTool {
    name: String,
    description: String,
    parameters: Value,
    call: Box<Call>,
}

impl FnTool {
    /// The tool `name` with arguments `parameters`, answering with `call`.
    pub(crate) fn new<F, Fut>(name: &str, description: &str, parameters: Value, call: F) -> Arc<FnTool>
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        Arc::new(FnTool {
            name: name.to_owned(),
            description: description.to_owned(),
            parameters,
            call: Box::new(move |arguments, context| Box::pin(call(arguments, context))),
        })
    }
}

#[async_trait::async_trait]
impl Tool for FnTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn parameters(&self) -> Value {
        self.parameters.clone()
    }
    async fn call(&self, arguments: Value, context: &ToolContext) -> Result<Value, ToolError> {
        (self.call)(arguments, context.clone()).await
    }
}
