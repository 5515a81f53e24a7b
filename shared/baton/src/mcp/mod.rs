//! Model Context Protocol, both ways, with the official SDK (`rmcp`).
//!
//! - As a **client**, agents use the tools of configured MCP servers (`mcp_servers:` in the
//!   configuration): a child process over stdio, or a streamable HTTP endpoint. Each tool is an
//!   ordinary [`crate::tool::Tool`] named `mcp__<server>__<tool>`, so it never collides with a
//!   built-in tool or an agent tool (`agent__<name>`), and the tool registry validates the
//!   model's arguments against the server's own JSON Schema before the call. That name is the
//!   tool's one name: in `tools:`, `needs_approval:`, errors and events.
//! - As a **server**, `mcp_server` (an edge, beside `http`) offers Baton's agents as MCP
//!   tools (stdio and streamable HTTP), so an IDE or another agent framework can call them.
//!
//! # Layout
//! - `config`: the `mcp_servers` settings and their validation (errors name the field path).
//! - `client`: a connection per server (restarted after it broke), the tools, the retry and
//!   cancellation rules (a `tools/call` is never sent twice).
//! - `errors`: failures as sentences naming the server and the likely fix.
//!
//! # When tools are listed
//! [`connect_all`] starts every server and lists its tools **once, at start**, not on first use:
//! in Lambda the start runs in the init phase, before the first request and outside its
//! latency, so no user waits for `npx` or a TLS handshake; and a server that cannot start is a
//! deployment error seen at once (naming the server), not a tool that fails mid-conversation.
//! The list is not refreshed: a server that changes its tools is picked up at the next start.

mod client;
pub(crate) mod config;
mod errors;

use std::sync::Arc;

pub use client::McpCallItem;
pub(crate) use client::{McpConnection, McpTool};
pub(crate) use config::McpConfigError;
pub use config::McpServers;

use crate::tool::Tool;

/// The prefix of every MCP tool name.
pub(crate) const MCP_TOOL_PREFIX: &str = "mcp__";

/// Longest tool name models accept.
const MAX_TOOL_NAME: usize = 64;

/// MCP failed at start, or while serving.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The configuration is wrong (field path and reason).
    #[error("invalid MCP configuration: {0}")]
    Config(#[from] McpConfigError),
    /// A server did not start, or did not list its tools: `reason` is the whole sentence,
    /// naming the server, where it is and the likely fix.
    #[error("{reason}")]
    Start {
        /// The server's name in the configuration.
        server: String,
        /// Why.
        reason: String,
    },
    /// Serving Baton's agents over MCP failed.
    #[error("MCP server: {0}")]
    Serve(String),
}

/// The name the model calls a server's tool by: `mcp__<server>__<tool>`, with characters models
/// refuse replaced by `_`, and a long name shortened with a hash of the original so that two
/// tools never share one.
pub(crate) fn tool_name(server: &str, tool: &str) -> String {
    let clean: String = tool
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .collect();
    let name = format!("{MCP_TOOL_PREFIX}{server}__{clean}");
    if name.len() <= MAX_TOOL_NAME && clean == tool {
        return name;
    }
    // FNV-1a of the original name: stable across runs and builds.
    let hash =
        tool.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let suffix = format!("_{:08x}", hash as u32);
    let keep = name.len().min(MAX_TOOL_NAME - suffix.len());
    format!("{}{suffix}", &name[..keep])
}

/// The tools of every connected server, to hand to agents by pattern.
#[derive(Debug, Default, Clone)]
pub struct McpTools {
    /// Servers that started, with their tools (after the allowlist), in configuration order.
    servers: Vec<(String, Vec<Arc<McpTool>>)>,
    /// Optional servers that did not start: patterns naming them select nothing.
    absent: Vec<String>,
}

impl McpTools {
    /// Every tool of every server.
    pub fn all(&self) -> Vec<Arc<dyn Tool>> {
        self.servers.iter().flat_map(|(_, tools)| tools.iter().map(|t| t.clone() as Arc<dyn Tool>)).collect()
    }

    /// One tool, by its name (`mcp__<server>__<tool>`): for callers that stream its progress
    /// (`McpTool::call_items`).
    pub fn tool(&self, name: &str) -> Option<Arc<McpTool>> {
        let (server, _) = split_pattern(name)?;
        let (_, tools) = self.servers.iter().find(|(s, _)| s == server)?;
        tools.iter().find(|t| t.name() == name).cloned()
    }

    /// The tools an agent's `tools:` entry names: `mcp__<server>__*` (all of a server's tools)
    /// or `mcp__<server>__<tool>` (one, by the name the model calls it). An unknown server, or a
    /// tool the server does not offer (or the allowlist leaves out), is an error naming the
    /// entry; an optional server that did not start selects nothing.
    pub fn select(&self, pattern: &str) -> Result<Vec<Arc<dyn Tool>>, McpConfigError> {
        let error = |reason: String| McpConfigError::new(pattern, reason);
        let Some((server, tool)) = split_pattern(pattern) else {
            return Err(error(PATTERN_FORM.into()));
        };
        if self.absent.iter().any(|a| a == server) {
            return Ok(Vec::new());
        }
        let Some((_, tools)) = self.servers.iter().find(|(name, _)| name == server) else {
            let known: Vec<&str> = self.servers.iter().map(|(n, _)| n.as_str()).collect();
            return Err(error(format!("no MCP server named `{server}`; configured: {}", known.join(", "))));
        };
        if tool == "*" {
            return Ok(tools.iter().map(|t| t.clone() as Arc<dyn Tool>).collect());
        }
        match tools.iter().find(|t| t.name() == pattern) {
            Some(t) => Ok(vec![t.clone() as Arc<dyn Tool>]),
            None => {
                let offered: Vec<&str> = tools.iter().map(|t| t.name()).collect();
                Err(error(format!("`{server}` has no tool `{pattern}`; it offers: {}", offered.join(", "))))
            }
        }
    }

    /// Whether `name` (a tool name, as in `needs_approval:`) is one of an optional server's
    /// that did not start: a rule naming it is a warning, not a start-up error.
    pub fn is_absent(&self, name: &str) -> bool {
        split_pattern(name).is_some_and(|(server, _)| self.absent.iter().any(|a| a == server))
    }
}

/// How an MCP `tools:` entry is written.
const PATTERN_FORM: &str = "an MCP tool is named as the model calls it, `mcp__<server>__<tool>`, or `mcp__<server>__*` for all of its tools";

/// `mcp__<server>__<tool>` as its server and the rest (`*` or the tool's name after the
/// server); `None` when it is not one.
fn split_pattern(entry: &str) -> Option<(&str, &str)> {
    let (server, tool) = entry.strip_prefix(MCP_TOOL_PREFIX)?.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

/// Whether an agent's `tools:` entry names MCP tools (`mcp__<server>__*`,
/// `mcp__<server>__<tool>`) rather than a built-in tool.
pub fn is_mcp_pattern(entry: &str) -> bool {
    entry.starts_with(MCP_TOOL_PREFIX)
}

/// The server an MCP `tools:` entry names, if it is one.
pub fn pattern_server(entry: &str) -> Option<&str> {
    split_pattern(entry).map(|(server, _)| server)
}

/// The name to write instead of the older `server.tool` / `server.*` spelling of an MCP tool
/// (in `tools:` or `needs_approval:`); `None` when `entry` is not written that way. The error
/// that carries it is the only place the older spelling is still known.
pub(crate) fn respelled(entry: &str) -> Option<String> {
    if is_mcp_pattern(entry) {
        return None;
    }
    let (server, tool) = entry.split_once('.')?;
    if !config::is_valid_server_name(server) || tool.is_empty() {
        return None;
    }
    Some(if tool == "*" { format!("{MCP_TOOL_PREFIX}{server}__*") } else { tool_name(server, tool) })
}

/// Checks the MCP entries of an agent's `tools:` against the configured servers without
/// starting them (an unknown server); the tool names are checked by [`McpTools::select`] once
/// the servers listed their tools.
pub(crate) fn validate_pattern(pattern: &str, servers: &McpServers) -> Result<(), McpConfigError> {
    match split_pattern(pattern) {
        Some((server, _)) => {
            if servers.contains_key(server) {
                Ok(())
            } else {
                let known: Vec<&str> = servers.keys().map(String::as_str).collect();
                Err(McpConfigError::new(
                    pattern,
                    format!("no MCP server named `{server}`; configured: {}", known.join(", ")),
                ))
            }
        }
        None => Err(McpConfigError::new(pattern, PATTERN_FORM)),
    }
}

/// Validates `servers`, starts them all at once, and lists their tools (see the module docs for
/// why at start). A server that does not start is an error naming it, or, when it is
/// `optional`, a warning and its tools absent. A tool the allowlist names but the server does
/// not offer is an error naming the field.
pub async fn connect_all(servers: &McpServers) -> Result<McpTools, McpError> {
    config::validate(servers)?;
    let started = futures::future::join_all(servers.iter().map(|(name, config)| async move {
        let connected = async {
            let connection = McpConnection::connect(name, config).await?;
            let listed = connection.list_tools().await?;
            Ok::<_, McpError>((connection, listed))
        };
        (name, config, connected.await)
    }))
    .await;
    let mut tools = McpTools::default();
    for (name, config, connected) in started {
        let (connection, listed) = match connected {
            Ok(ok) => ok,
            Err(e @ McpError::Start { .. }) if config.optional => {
                tracing::warn!(server = %name, error = %e, "optional MCP server is absent: its tools are not offered");
                tools.absent.push(name.clone());
                continue;
            }
            Err(e) => return Err(e),
        };
        if let Some(allow) = &config.tools {
            for (i, wanted) in allow.iter().enumerate() {
                if !listed.iter().any(|t| t.name == wanted.as_str()) {
                    let offered: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
                    return Err(McpError::Config(McpConfigError::new(
                        format!("mcp_servers.{name}.tools[{i}]"),
                        format!("`{name}` has no tool `{wanted}`; it offers: {}", offered.join(", ")),
                    )));
                }
            }
        }
        let allowed = |t: &&rmcp::model::Tool| {
            config.tools.as_ref().is_none_or(|a| a.iter().any(|w| w == t.name.as_ref()))
        };
        let server_tools: Vec<Arc<McpTool>> =
            listed.iter().filter(allowed).map(|t| Arc::new(McpTool::new(connection.clone(), t))).collect();
        tracing::info!(server = %name, tools = server_tools.len(), "MCP server connected");
        tools.servers.push((name.clone(), server_tools));
    }
    Ok(tools)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_are_prefixed_and_safe_for_models() {
        assert_eq!(tool_name("everything", "get-sum"), "mcp__everything__get-sum");
        let dotted = tool_name("fs", "files.read");
        assert!(dotted.starts_with("mcp__fs__files_read_") && dotted.len() <= 64, "{dotted}");
        assert_ne!(
            tool_name("fs", "files.read"),
            tool_name("fs", "files_read"),
            "a cleaned name keeps its own hash"
        );
        let long = tool_name("server", &"x".repeat(100));
        assert_eq!(long.len(), 64);
        assert_ne!(long, tool_name("server", &"x".repeat(101)));
    }

    #[test]
    fn patterns_name_a_configured_server() {
        let servers: McpServers = serde_yaml_ng::from_str("fs: {command: a}").unwrap();
        assert!(validate_pattern("mcp__fs__*", &servers).is_ok());
        assert!(validate_pattern("mcp__fs__read", &servers).is_ok());
        let e = validate_pattern("mcp__git__*", &servers).unwrap_err();
        assert_eq!(e.path, "mcp__git__*");
        assert!(e.reason.contains("no MCP server named `git`") && e.reason.contains("fs"), "{e}");
        assert!(validate_pattern("mcp__fs__", &servers).is_err());
        assert!(is_mcp_pattern("mcp__fs__*") && !is_mcp_pattern("search_offers"));
        assert_eq!(pattern_server("mcp__fs__read__all"), Some("fs"));
    }

    #[test]
    fn the_older_dotted_spelling_is_respelled_as_the_models_name() {
        assert_eq!(respelled("hotels.book_hotel").as_deref(), Some("mcp__hotels__book_hotel"));
        assert_eq!(respelled("hotels.*").as_deref(), Some("mcp__hotels__*"));
        assert_eq!(respelled("fs.files.read"), Some(tool_name("fs", "files.read")));
        assert_eq!(respelled("search_offers"), None);
        assert_eq!(respelled("mcp__hotels__book_hotel"), None);
    }

    #[test]
    fn selecting_from_no_servers_names_the_pattern() {
        let tools = McpTools { servers: vec![], absent: vec!["maybe".into()] };
        assert!(
            tools.select("mcp__maybe__*").unwrap().is_empty(),
            "an absent optional server selects nothing"
        );
        assert!(tools.is_absent("mcp__maybe__x") && !tools.is_absent("mcp__nope__x"));
        assert_eq!(tools.select("mcp__nope__x").err().map(|e| e.path).as_deref(), Some("mcp__nope__x"));
    }
}
