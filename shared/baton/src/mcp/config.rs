//! The `mcp_servers` configuration: what each server is (a command or a URL), which of its tools
//! agents may use, and how long a call may take; its validation, whose errors name the field
//! path (`mcp_servers.github.url`) so the configuration file can point at the line.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// The configured MCP servers, by name. A server's tools reach the model as
/// `mcp__<server>__<tool>` (see `tool_name`).
pub type McpServers = BTreeMap<String, McpServerConfig>;

/// How long one call may take when the configuration says nothing.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest `timeout_seconds` accepted (an hour: a call that runs longer is a job, not a tool).
pub(crate) const MAX_TIMEOUT_SECONDS: f64 = 3600.0;

/// Longest server name: the tool names built from it must stay within a model's 64 characters.
pub(crate) const MAX_SERVER_NAME: usize = 24;

/// One MCP server: exactly one of `command` (stdio: a child process) or `url` (streamable HTTP).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The program to start (stdio transport).
    #[serde(default)]
    pub command: Option<String>,
    /// The server's streamable HTTP endpoint (`http://` or `https://`).
    #[serde(default)]
    pub url: Option<String>,
    /// Arguments of `command`.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables set for `command`, on top of Baton's own. Values may reference
    /// Baton's environment as `${NAME}`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// HTTP headers sent with every request to `url`. Values may reference the environment as
    /// `${NAME}` (`Authorization: Bearer ${GITHUB_TOKEN}`); they are never logged.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The server's tools agents may use, by their name on the server; all of them when absent.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Longest one call may take; 30 s by default. (Start and listing have their own bound,
    /// `START_TIMEOUT`.)
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// A server that fails to start is a warning and its tools are absent, instead of a
    /// start-up error.
    #[serde(default)]
    pub optional: bool,
}

impl McpServerConfig {
    /// The bound of one call.
    pub fn timeout(&self) -> Duration {
        self.timeout_seconds.map_or(DEFAULT_TIMEOUT, Duration::from_secs_f64)
    }
}

/// A configuration problem: the field path (`mcp_servers.<name>.<field>`, or an agent's tool
/// pattern) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct McpConfigError {
    /// Where: `mcp_servers.github.url`, `mcp_servers.github.headers.Authorization`.
    pub path: String,
    /// What is wrong (never a secret's value).
    pub reason: String,
}

impl McpConfigError {
    pub(crate) fn new(path: impl Into<String>, reason: impl Into<String>) -> McpConfigError {
        McpConfigError { path: path.into(), reason: reason.into() }
    }
}

/// Whether `name` may name a server: 1 to [`MAX_SERVER_NAME`] ASCII letters, digits, `_` or
/// `-`, without `__` (the separator in tool names).
pub(crate) fn is_valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_SERVER_NAME
        && !name.contains("__")
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Checks every server; the first problem found, with its field path.
pub(crate) fn validate(servers: &McpServers) -> Result<(), McpConfigError> {
    for (name, server) in servers {
        validate_server(name, server)?;
    }
    Ok(())
}

/// Checks one server's name and fields (errors name the field path).
pub(crate) fn validate_server(name: &str, s: &McpServerConfig) -> Result<(), McpConfigError> {
    let at = |field: &str| format!("mcp_servers.{name}.{field}");
    if !is_valid_server_name(name) {
        return Err(McpConfigError::new(
            format!("mcp_servers.{name}"),
            format!(
                "a server name is 1 to {MAX_SERVER_NAME} letters, digits, `_` or `-`, without `__` \
                 (its tools are `mcp__<server>__<tool>`)"
            ),
        ));
    }
    match (&s.command, &s.url) {
        (Some(_), Some(_)) => {
            return Err(McpConfigError::new(
                at("url"),
                "give either `command` (stdio) or `url` (streamable HTTP), not both",
            ));
        }
        (None, None) => {
            return Err(McpConfigError::new(
                at("command"),
                "give `command` (stdio) or `url` (streamable HTTP)",
            ));
        }
        (Some(command), None) => {
            if command.trim().is_empty() {
                return Err(McpConfigError::new(at("command"), "must not be empty"));
            }
            if let Some(header) = s.headers.keys().next() {
                return Err(McpConfigError::new(
                    at(&format!("headers.{header}")),
                    "headers are sent to a `url` server; a `command` server takes `env`",
                ));
            }
        }
        (None, Some(url)) => {
            let parsed = reqwest::Url::parse(url)
                .map_err(|e| McpConfigError::new(at("url"), format!("not a URL: {e}")))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(McpConfigError::new(at("url"), "must be an http:// or https:// URL"));
            }
            if !s.args.is_empty() {
                return Err(McpConfigError::new(at("args"), "arguments go with `command`, not `url`"));
            }
            if let Some(var) = s.env.keys().next() {
                return Err(McpConfigError::new(
                    at(&format!("env.{var}")),
                    "environment variables go with `command`; a `url` server takes `headers`",
                ));
            }
            for header in s.headers.keys() {
                if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                    return Err(McpConfigError::new(
                        at(&format!("headers.{header}")),
                        "not a valid HTTP header name",
                    ));
                }
            }
        }
    }
    if let Some(tools) = &s.tools {
        let mut seen = std::collections::BTreeSet::new();
        for (i, tool) in tools.iter().enumerate() {
            if tool.trim().is_empty() {
                return Err(McpConfigError::new(at(&format!("tools[{i}]")), "must not be empty"));
            }
            if !seen.insert(tool) {
                return Err(McpConfigError::new(
                    at(&format!("tools[{i}]")),
                    format!("`{tool}` is listed twice"),
                ));
            }
        }
    }
    if let Some(t) = s.timeout_seconds
        && !(t.is_finite() && t > 0.0 && t <= MAX_TIMEOUT_SECONDS)
    {
        return Err(McpConfigError::new(
            at("timeout_seconds"),
            format!("must be more than 0 and at most {MAX_TIMEOUT_SECONDS}"),
        ));
    }
    Ok(())
}

/// `value` with every `${NAME}` replaced by the environment variable `NAME`, read through
/// `lookup`. The error names the missing variable, never the value.
pub(crate) fn expand_env(value: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err("has `${` without a closing `}`".to_owned());
        };
        let name = &after[..end];
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("`${{{name}}}` is not an environment variable name"));
        }
        match lookup(name) {
            Some(v) => out.push_str(&v),
            None => return Err(format!("references ${{{name}}}, which is not set")),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<McpServers, String> {
        serde_yaml_ng::from_str(yaml).map_err(|e| e.to_string())
    }

    fn check(yaml: &str) -> Result<(), McpConfigError> {
        validate(&parse(yaml).unwrap())
    }

    #[test]
    fn a_stdio_and_an_http_server_are_accepted() {
        let servers = parse(
            "files: {command: npx, args: [-y, server], env: {ROOT: /tmp}, tools: [read], timeout_seconds: 5}\n\
             github: {url: 'https://example.com/mcp', headers: {Authorization: 'Bearer ${TOKEN}'}, optional: true}\n",
        )
        .unwrap();
        validate(&servers).unwrap();
        assert_eq!(servers["files"].timeout(), Duration::from_secs(5));
        assert_eq!(servers["github"].timeout(), DEFAULT_TIMEOUT);
        assert!(servers["github"].optional);
    }

    #[test]
    fn both_command_and_url_is_refused_naming_the_field() {
        let e = check("x: {command: a, url: 'http://127.0.0.1/mcp'}").unwrap_err();
        assert_eq!(e.path, "mcp_servers.x.url");
        assert!(e.reason.contains("not both"), "{e}");
    }

    #[test]
    fn neither_command_nor_url_is_refused() {
        let e = check("x: {args: [a]}").unwrap_err();
        assert_eq!(e.path, "mcp_servers.x.command");
    }

    #[test]
    fn an_unknown_field_is_refused_by_the_parser() {
        let e = parse("x: {command: a, headerz: {}}").unwrap_err();
        assert!(e.contains("headerz"), "{e}");
    }

    #[test]
    fn fields_of_the_other_transport_are_refused() {
        assert_eq!(check("x: {command: a, headers: {A: b}}").unwrap_err().path, "mcp_servers.x.headers.A");
        assert_eq!(check("x: {url: 'http://h/m', env: {A: b}}").unwrap_err().path, "mcp_servers.x.env.A");
        assert_eq!(check("x: {url: 'http://h/m', args: [a]}").unwrap_err().path, "mcp_servers.x.args");
    }

    #[test]
    fn bad_values_are_refused_naming_the_field() {
        assert_eq!(check("x: {url: 'ftp://h/m'}").unwrap_err().path, "mcp_servers.x.url");
        assert_eq!(check("x: {url: 'not a url'}").unwrap_err().path, "mcp_servers.x.url");
        assert_eq!(
            check("x: {command: a, timeout_seconds: 0}").unwrap_err().path,
            "mcp_servers.x.timeout_seconds"
        );
        assert_eq!(check("x: {command: a, tools: [a, a]}").unwrap_err().path, "mcp_servers.x.tools[1]");
        assert_eq!(
            check("x: {url: 'http://h/m', headers: {'a b': c}}").unwrap_err().path,
            "mcp_servers.x.headers.a b"
        );
        assert_eq!(check("a__b: {command: a}").unwrap_err().path, "mcp_servers.a__b");
    }

    #[test]
    fn environment_references_are_expanded_and_a_missing_one_is_named() {
        let env = |name: &str| (name == "TOKEN").then(|| "s3cret".to_owned());
        assert_eq!(expand_env("Bearer ${TOKEN}", env).unwrap(), "Bearer s3cret");
        assert_eq!(expand_env("plain", env).unwrap(), "plain");
        let e = expand_env("Bearer ${NOPE}", env).unwrap_err();
        assert!(e.contains("NOPE") && !e.contains("s3cret"), "{e}");
        assert!(expand_env("${TOKEN", env).is_err());
    }
}
