//! [`ToolRegistry`]: the tools of one agent, offered to its model, and the checks a call passes
//! before it runs (a known name, readable JSON, arguments the schema accepts).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::Value;

use super::{CallOptions, JsonSchema, Tool, ToolContext, ToolError, ToolOutcome};
use crate::item::Item;
use crate::model::{ToolCall, ToolSpec};

/// A call the registry refused before it ran: the arguments as parsed (the raw text as a JSON
/// string when they were not JSON), and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    /// The arguments.
    pub arguments: Value,
    /// Why the call cannot run.
    pub error: ToolError,
}

#[derive(Clone)]
pub(super) struct Registered {
    tool: Arc<dyn Tool>,
    /// The tool's parameters schema, compiled by its first call (shared with the registries
    /// [`ToolRegistry::only`] makes).
    pub(super) schema: Arc<OnceLock<Result<JsonSchema, String>>>,
}

impl Registered {
    fn new(tool: Arc<dyn Tool>) -> Registered {
        Registered { tool, schema: Arc::default() }
    }

    fn schema(&self) -> Result<&JsonSchema, &str> {
        self.schema
            .get_or_init(|| JsonSchema::compile(&self.tool.parameters()))
            .as_ref()
            .map_err(String::as_str)
    }
}

/// The tools of one agent. Each tool's schema is compiled by its first call, not when the
/// registry is built: the first schema a process compiles loads the JSON Schema meta-schemas
/// (a few milliseconds), which a Lambda function's start-up need not pay, and a mini-agent's
/// registry ([`ToolRegistry::only`]) compiles only what its calls use.
pub struct ToolRegistry {
    pub(super) tools: Vec<Registered>,
    by_name: HashMap<String, usize>,
    /// The tools as offered to a model, built by the first model call and shared by every later
    /// one: a tool's schema does not change while its registry lives.
    specs: OnceLock<Arc<[ToolSpec]>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.iter().map(|r| r.tool.name())).finish()
    }
}

impl ToolRegistry {
    /// A registry of `tools`; fails if two names clash. A tool whose schema does not compile is
    /// refused when called ([`ToolError::InvalidSchema`]).
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Result<ToolRegistry, ToolError> {
        let mut registered = Vec::with_capacity(tools.len());
        let mut by_name = HashMap::new();
        for tool in tools {
            let name = tool.name().to_owned();
            if by_name.insert(name.clone(), registered.len()).is_some() {
                return Err(ToolError::DuplicateName(name));
            }
            registered.push(Registered::new(tool));
        }
        Ok(ToolRegistry { tools: registered, by_name, specs: OnceLock::new() })
    }

    /// The tools as offered to a model, shared: built by the first call, not per model call.
    pub fn specs(&self) -> Arc<[ToolSpec]> {
        self.specs
            .get_or_init(|| {
                self.tools
                    .iter()
                    .map(|r| ToolSpec {
                        name: r.tool.name().to_owned(),
                        description: r.tool.description().to_owned(),
                        parameters: r.tool.parameters(),
                    })
                    .collect()
            })
            .clone()
    }

    /// The names of the registered tools, in order.
    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|r| r.tool.name()).collect()
    }

    /// A registry of only the tools named in `names` (names it does not hold are ignored), in
    /// this registry's order: a call of any other tool is an `unknown_tool` error result.
    pub fn only(&self, names: &[String]) -> ToolRegistry {
        let tools: Vec<Registered> =
            self.tools.iter().filter(|r| names.iter().any(|n| n == r.tool.name())).cloned().collect();
        let by_name = tools.iter().enumerate().map(|(i, r)| (r.tool.name().to_owned(), i)).collect();
        ToolRegistry { tools, by_name, specs: OnceLock::new() }
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.by_name.get(name).map(|&i| &self.tools[i].tool)
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Parses and validates a model's call, without running it.
    pub fn check(&self, call: &ToolCall) -> Result<(Arc<dyn Tool>, Value), Box<Refused>> {
        let refused = |arguments, error| Box::new(Refused { arguments, error });
        let raw = || Value::String(call.arguments.clone());
        let Some(&index) = self.by_name.get(&call.name) else {
            let available = self.names().join(", ");
            return Err(refused(raw(), ToolError::UnknownTool { name: call.name.clone(), available }));
        };
        let registered = &self.tools[index];
        let arguments = call.parse_arguments().map_err(|e| {
            let reason = format!("the arguments are not valid JSON ({e}); send one JSON object");
            refused(raw(), ToolError::InvalidArguments { tool: call.name.clone(), reason })
        })?;
        let schema = registered.schema().map_err(|reason| {
            refused(
                arguments.clone(),
                ToolError::InvalidSchema { tool: call.name.clone(), reason: reason.into() },
            )
        })?;
        if let Err(reason) = schema.validate(&arguments) {
            return Err(refused(
                arguments.clone(),
                ToolError::InvalidArguments { tool: call.name.clone(), reason },
            ));
        }
        Ok((registered.tool.clone(), arguments))
    }

    /// Runs one call: validation, then the tool under `timeout`. Never fails: every problem is an
    /// error outcome.
    pub async fn call(&self, call: &ToolCall, context: &ToolContext, timeout: Duration) -> ToolOutcome {
        match self.check(call) {
            Ok((tool, arguments)) => run_checked(tool, arguments, context, timeout).await,
            Err(refused) => ToolOutcome::error(refused.arguments, refused.error),
        }
    }
}

/// Runs a call [`ToolRegistry::check`] accepted to its end, its events dropped. Never fails: a
/// tool error or a timeout is an error outcome.
pub(crate) async fn run_checked(
    tool: Arc<dyn Tool>,
    arguments: Value,
    context: &ToolContext,
    timeout: Duration,
) -> ToolOutcome {
    let name = tool.name().to_owned();
    let run = tool.start(arguments.clone(), context.clone(), CallOptions::new(timeout));
    let outcome = Item::result(run.items).await.map_or_else(
        || Err(ToolError::Failed { tool: name.clone(), reason: "the call ended without a result".into() }),
        |finish| finish.outcome,
    );
    ToolOutcome::from_result(&name, arguments, outcome)
}
