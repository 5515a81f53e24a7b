//! Tool sources a team declares in its file: HTTP tools from OpenAPI documents (`openapi:`) and
//! Lambda functions as tools (`lambda_tools:`), see `docs/tools.md`.
//!
//! ```yaml
//! openapi:
//!   petstore:                              # a source: each operation becomes a tool
//!     document: petstore.yaml              # a path (beside this file) or an http(s) URL
//!     base_url: http://127.0.0.1:4010/v3   # else the document's first absolute server URL
//!     operations: [getPetById]             # else every operation
//!     auth: {api_key: {header: api_key, env: PETSTORE_KEY}}
//!     timeout_seconds: 10
//!     max_result_bytes: 65536
//! lambda_tools:
//!   quote_fare:                            # the tool's name
//!     function: quote-fare                 # a function name or ARN
//!     description: Quotes a fare.
//!     parameters: {type: object, properties: {from: {type: string}}}
//! ```
//!
//! Checked when the file is read, each error with its dotted field (`openapi.petstore.auth`);
//! the documents themselves are read when the tools are built (by the composition root). The
//! OpenAPI source's own types live with its tools (`tool::openapi::spec`) and are re-exported here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

pub(crate) use crate::tool::openapi::spec::{DEFAULT_MAX_RESULT_BYTES, DEFAULT_TOOL_TIMEOUT, OpenApiSource};

/// The longest `timeout_seconds` a source may set (a Lambda function's own limit).
const MAX_TIMEOUT_SECONDS: f64 = 900.0;

/// The declared tool sources of a configuration.
#[derive(Debug, Clone, Default)]
pub struct ToolSources {
    /// OpenAPI sources by name.
    pub openapi: BTreeMap<String, OpenApiSource>,
    /// Lambda tools by tool name.
    pub lambda: BTreeMap<String, LambdaToolSpec>,
}

/// A Lambda function offered as a tool.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LambdaToolSpec {
    /// The function's name or ARN.
    pub function: String,
    /// What it does, for the model.
    pub description: String,
    /// The JSON Schema of its arguments (its event).
    #[serde(default)]
    pub parameters: Option<Value>,
    /// A JSON file holding that schema (relative to the configuration file's folder).
    #[serde(default)]
    pub parameters_file: Option<String>,
    /// Longest one call may take.
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Largest result the model reads.
    #[serde(default)]
    pub max_result_bytes: Option<usize>,
}

impl LambdaToolSpec {
    /// Its timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout_seconds.map_or(DEFAULT_TOOL_TIMEOUT, Duration::from_secs_f64)
    }

    /// Its result cap.
    pub fn max_result_bytes(&self) -> usize {
        self.max_result_bytes.unwrap_or(DEFAULT_MAX_RESULT_BYTES)
    }
}

/// A declared source's field is wrong: its dotted path (`openapi.petstore.auth`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceError {
    /// The dotted field.
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

impl ToolSources {
    /// Checks every source; file paths are made relative to `folder` (the configuration
    /// file's), and a Lambda tool's `parameters_file` is read into `parameters`.
    pub fn checked(mut self, folder: Option<&Path>) -> Result<ToolSources, SourceError> {
        for (name, source) in &mut self.openapi {
            let at =
                |field: &str, reason: String| SourceError { path: format!("openapi.{name}.{field}"), reason };
            check_name(name).map_err(|r| at("", r))?;
            if source.document.trim().is_empty() {
                return Err(at("document", "must name a file or an http(s) URL".into()));
            }
            if !source.is_url() {
                source.document = beside(folder, &source.document).display().to_string();
            }
            if let Some(url) = &source.base_url {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(at("base_url", "must start with http:// or https://".into()));
                }
            }
            if source.operations.as_ref().is_some_and(Vec::is_empty) {
                return Err(at("operations", "lists no operation; leave it out to offer them all".into()));
            }
            check_limits(source.timeout_seconds, source.max_result_bytes).map_err(|(f, r)| at(f, r))?;
            if let Some(auth) = &source.auth {
                auth.check().map_err(|r| at("auth", r))?;
            }
        }
        for (name, spec) in &mut self.lambda {
            let at = |field: &str, reason: String| SourceError {
                path: format!("lambda_tools.{name}.{field}"),
                reason,
            };
            check_name(name).map_err(|r| at("", r))?;
            if spec.function.trim().is_empty() {
                return Err(at("function", "must name a function or its ARN".into()));
            }
            if spec.description.trim().is_empty() {
                return Err(at("description", "must say what the tool does, for the model".into()));
            }
            check_limits(spec.timeout_seconds, spec.max_result_bytes).map_err(|(f, r)| at(f, r))?;
            let schema = match (spec.parameters.take(), &spec.parameters_file) {
                (Some(_), Some(_)) => {
                    return Err(at(
                        "parameters_file",
                        "give `parameters` or `parameters_file`, not both".into(),
                    ));
                }
                (Some(schema), None) => schema,
                (None, Some(file)) => {
                    read_schema(&beside(folder, file)).map_err(|r| at("parameters_file", r))?
                }
                (None, None) => {
                    return Err(at(
                        "parameters",
                        "the JSON Schema of the tool's arguments is missing".into(),
                    ));
                }
            };
            if schema.get("type").and_then(Value::as_str) != Some("object") {
                return Err(at("parameters", "must be a JSON Schema with `type: object`".into()));
            }
            // Read once: checked again when another file is applied over this one.
            (spec.parameters, spec.parameters_file) = (Some(schema), None);
        }
        Ok(self)
    }
}

/// A tool or source name: what a model may call a tool.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok { Ok(()) } else { Err(format!("`{name}` must be 1 to 64 letters, digits, `_` or `-`")) }
}

fn check_limits(timeout: Option<f64>, max_bytes: Option<usize>) -> Result<(), (&'static str, String)> {
    if timeout.is_some_and(|t| !(t > 0.0 && t <= MAX_TIMEOUT_SECONDS)) {
        return Err(("timeout_seconds", format!("must be above 0 and at most {MAX_TIMEOUT_SECONDS}")));
    }
    if max_bytes == Some(0) {
        return Err(("max_result_bytes", "must be above zero".into()));
    }
    Ok(())
}

fn beside(folder: Option<&Path>, file: &str) -> PathBuf {
    match folder {
        Some(folder) if Path::new(file).is_relative() => folder.join(file),
        _ => PathBuf::from(file),
    }
}

fn read_schema(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(yaml: &str) -> Result<ToolSources, SourceError> {
        #[derive(Deserialize)]
        struct File {
            #[serde(default)]
            openapi: BTreeMap<String, OpenApiSource>,
            #[serde(default)]
            lambda_tools: BTreeMap<String, LambdaToolSpec>,
        }
        let file: File = serde_yaml_ng::from_str(yaml).unwrap();
        ToolSources { openapi: file.openapi, lambda: file.lambda_tools }.checked(Some(Path::new("/cfg")))
    }

    #[test]
    fn a_relative_document_is_read_beside_the_file() {
        let s = sources("openapi:\n  pets:\n    document: pets.yaml\n").unwrap();
        assert_eq!(s.openapi["pets"].document, "/cfg/pets.yaml");
        assert_eq!(s.openapi["pets"].timeout(), DEFAULT_TOOL_TIMEOUT);
    }

    #[test]
    fn auth_takes_exactly_one_way() {
        let two = "openapi:\n  pets:\n    document: p.yaml\n    auth: {bearer_env: A, sigv4: {service: execute-api}}\n";
        let err = sources(two).unwrap_err();
        assert_eq!(err.path, "openapi.pets.auth");
        let key = "openapi:\n  pets:\n    document: p.yaml\n    auth: {api_key: {header: x-key}}\n";
        assert!(sources(key).unwrap_err().reason.contains("exactly one of env, secret_arn"));
    }

    #[test]
    fn a_lambda_tool_needs_an_object_schema_and_limits_in_range() {
        let none = "lambda_tools:\n  quote:\n    function: f\n    description: Quotes.\n";
        assert_eq!(sources(none).unwrap_err().path, "lambda_tools.quote.parameters");
        let string =
            "lambda_tools:\n  quote:\n    function: f\n    description: Q.\n    parameters: {type: string}\n";
        assert!(sources(string).unwrap_err().reason.contains("type: object"));
        let slow = "lambda_tools:\n  quote:\n    function: f\n    description: Q.\n    parameters: {type: object}\n    timeout_seconds: 0\n";
        assert_eq!(sources(slow).unwrap_err().path, "lambda_tools.quote.timeout_seconds");
    }
}
