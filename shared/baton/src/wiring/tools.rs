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
