//! The tools a configuration declares by source (`openapi:`, `lambda_tools:`, `docs/tools.md`):
//! built once at start, before the agents, into [`Backends::tools`], so agents list them by name
//! like any team tool.
//!
//! OpenAPI tools are built here; Lambda tools need the AWS SDK and are built by the AWS
//! deployment (`baton-aws`), which hands them in through [`declared_tools`]'s `lambda`.

use std::collections::HashMap;
use std::sync::Arc;

use super::Backends;
use crate::config::Config;
use crate::tool::Tool;
use crate::tool::openapi::{self, AuthHooks};

/// Builds the configuration's OpenAPI tools and adds them, with `lambda` (the Lambda tools, by
/// source), to `backends.tools`. A document that cannot be read or used, a credential that
/// cannot be read, or two sources offering one tool name is an error naming them.
pub async fn declared_tools(
    config: &Config,
    backends: &mut Backends,
    lambda: Vec<Arc<dyn Tool>>,
) -> Result<(), String> {
    let hooks = AuthHooks { secrets: backends.secrets.clone(), signer: backends.signer.clone() };
    let mut sources: HashMap<String, String> = backends
        .tools
        .iter()
        .map(|t| (t.name().to_owned(), "the deployment's own tools".to_owned()))
        .collect();
    let mut add = |tool: Arc<dyn Tool>, source: String, backends: &mut Backends| {
        if let Some(other) = sources.insert(tool.name().to_owned(), source.clone()) {
            return Err(format!("the tool name `{}` is offered by both {other} and {source}", tool.name()));
        }
        backends.tools.push(tool);
        Ok(())
    };
    for tool in lambda {
        let source = format!("lambda_tools.{}", tool.name());
        add(tool, source, backends)?;
    }
    for (name, spec) in &config.tool_sources.openapi {
        for tool in openapi::load(name, spec, &hooks).await? {
            add(tool, format!("openapi.{name}"), backends)?;
        }
    }
    Ok(())
}

/// A tool a configuration declares, standing in for it where nothing is reached (`orchestrator
/// check` without `--connect`): its name and kind, for the composition root's checks; never
/// called.
struct Declared {
    name: String,
    kind: &'static str,
}

#[async_trait::async_trait]
impl Tool for Declared {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        "declared in the configuration"
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }

    fn kind(&self) -> &'static str {
        self.kind
    }

    async fn call(
        &self,
        _: serde_json::Value,
        _: &crate::tool::ToolContext,
    ) -> Result<serde_json::Value, crate::tool::ToolError> {
        Err(crate::tool::ToolError::Failed { tool: self.name.clone(), reason: "not built (a check)".into() })
    }
}

/// The tools `config` declares by source, named without reaching anything (the Lambda tools by
/// their keys, the OpenAPI sources by [`openapi::offline_names`]), added to `backends.tools` as
/// stand-ins; a tool name the agents use that an unread URL document may offer counts as one
/// of its tools (`check --connect` reads it).
pub(super) fn declared_offline(config: &Config, backends: &mut Backends) -> Result<(), String> {
    let mut unread = false;
    let mut names: Vec<(String, &'static str)> =
        config.tool_sources.lambda.keys().map(|name| (name.clone(), "lambda")).collect();
    for (name, spec) in &config.tool_sources.openapi {
        match openapi::offline_names(name, spec)? {
            Some(ids) => names.extend(ids.into_iter().map(|id| (id, "openapi"))),
            None => unread = true,
        }
    }
    if unread {
        let known: std::collections::HashSet<&str> =
            backends.tools.iter().map(|t| t.name()).chain(names.iter().map(|(n, _)| n.as_str())).collect();
        let wanted: Vec<String> = config
            .agents
            .agents
            .iter()
            .flat_map(|a| a.tools.iter())
            .filter(|t| !known.contains(t.as_str()) && !crate::mcp::is_mcp_pattern(t))
            .cloned()
            .collect();
        names.extend(wanted.into_iter().map(|n| (n, "openapi")));
    }
    for (name, kind) in names {
        if !backends.tools.iter().any(|t| t.name() == name) {
            backends.tools.push(Arc::new(Declared { name, kind }));
        }
    }
    Ok(())
}
