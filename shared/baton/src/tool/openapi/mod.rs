//! HTTP tools from an OpenAPI 3.0 document (`openapi:` in a configuration, `docs/tools.md`):
//! each operation, or each one a source lists, is a tool named by its `operationId`, whose
//! arguments are its path, query and header parameters and its JSON body (`body`).
//!
//! The document is read once, at start (a file, or a URL); whatever is wrong with it, or with
//! the source's credential, is a start-up error naming the source. A call's failures (the
//! server unreachable or slow, an error status, a result over the cap) are tool errors the
//! model reads, naming the tool; no secret is in them.
//!
//! # Layout
//! - this file: `OpenApiTool` and `load`, a source's tools;
//! - `document`: the document parsed into operations and their arguments' JSON Schema;
//! - `call`: one call, from arguments to request to result;
//! - `auth`: `Credential`, [`SecretSource`] and `AuthHooks`, how requests are authenticated.

mod auth;
mod call;
mod document;
pub(crate) mod spec;

pub use auth::SecretSource;
pub(crate) use auth::{AuthHooks, Credential};

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{Tool, ToolContext, ToolError};
use spec::OpenApiSource;

/// How long reading a document from a URL may take at start.
const DOCUMENT_TIMEOUT: Duration = Duration::from_secs(20);
/// The largest document read from a URL.
const MAX_DOCUMENT_BYTES: usize = 8 * 1024 * 1024;

/// What the tools of one source share.
#[derive(Debug)]
struct Source {
    http: reqwest::Client,
    base_url: String,
    credential: Credential,
    timeout: Duration,
    max_result_bytes: usize,
}

/// One operation of an OpenAPI document, as a tool.
#[derive(Debug)]
pub(crate) struct OpenApiTool {
    operation: document::Operation,
    source: Arc<Source>,
}

#[async_trait::async_trait]
impl Tool for OpenApiTool {
    fn name(&self) -> &str {
        &self.operation.id
    }

    fn description(&self) -> &str {
        &self.operation.description
    }

    fn parameters(&self) -> Value {
        self.operation.schema.clone()
    }

    fn kind(&self) -> &'static str {
        "openapi"
    }

    async fn call(&self, arguments: Value, _: &ToolContext) -> Result<Value, ToolError> {
        call::call(&self.source, &self.operation, arguments).await
    }
}

/// The tool names source `spec` offers, reaching nothing: its `operations:` list, else the
/// `operationId`s of its document when it is a file; `None` for a URL document without a list
/// (known only once read, by [`load`]). For `orchestrator check` without `--connect`.
pub(crate) fn offline_names(name: &str, spec: &OpenApiSource) -> Result<Option<Vec<String>>, String> {
    if let Some(listed) = &spec.operations {
        return Ok(Some(listed.clone()));
    }
    if spec.is_url() {
        return Ok(None);
    }
    let at = |reason: String| format!("OpenAPI source `{name}` ({}): {reason}", spec.document);
    let text = std::fs::read_to_string(&spec.document).map_err(|e| at(format!("cannot read it: {e}")))?;
    let doc = document::parse(&text).map_err(at)?;
    let operations = document::operations(&doc, None).map_err(at)?;
    Ok(Some(operations.into_iter().map(|op| op.id).collect()))
}

/// The tools of source `name`: its document read and parsed, its credential resolved. The error
/// is one sentence naming the source and what to fix.
pub(crate) async fn load(
    name: &str,
    spec: &OpenApiSource,
    hooks: &AuthHooks,
) -> Result<Vec<Arc<dyn Tool>>, String> {
    let at = |reason: String| format!("OpenAPI source `{name}` ({}): {reason}", spec.document);
    let text = read_document(spec).await.map_err(at)?;
    let doc = document::parse(&text).map_err(at)?;
    let operations = document::operations(&doc, spec.operations.as_deref()).map_err(at)?;
    let base_url = base_url(spec, &doc).map_err(at)?;
    let credential = Credential::resolve(spec.auth.as_ref(), hooks)
        .await
        .map_err(|e| format!("OpenAPI source `{name}`: its auth cannot be used: {e}"))?;
    let http = reqwest::Client::builder()
        .connect_timeout(spec.timeout().min(Duration::from_secs(10)))
        // A backstop: the call's own timeout (a tool_timeout error) comes first.
        .timeout(spec.timeout() + Duration::from_secs(1))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| at(format!("cannot build its HTTP client: {e}")))?;
    let source = Arc::new(Source {
        http,
        base_url,
        credential,
        timeout: spec.timeout(),
        max_result_bytes: spec.max_result_bytes(),
    });
    Ok(operations
        .into_iter()
        .map(|operation| Arc::new(OpenApiTool { operation, source: source.clone() }) as Arc<dyn Tool>)
        .collect())
}

async fn read_document(spec: &OpenApiSource) -> Result<String, String> {
    if !spec.is_url() {
        return std::fs::read_to_string(&spec.document).map_err(|e| format!("cannot read it: {e}"));
    }
    let fetch = async {
        let response = reqwest::Client::builder()
            .timeout(DOCUMENT_TIMEOUT)
            .build()
            .map_err(|e| e.to_string())?
            .get(&spec.document)
            .send()
            .await
            .map_err(|e| format!("cannot reach it: {}", call::transport_reason(&e)))?;
        if !response.status().is_success() {
            return Err(format!("reading it answered HTTP {}", response.status().as_u16()));
        }
        let body = call::read_capped(response, MAX_DOCUMENT_BYTES)
            .await?
            .ok_or_else(|| format!("it is larger than {MAX_DOCUMENT_BYTES} bytes"))?;
        String::from_utf8(body).map_err(|_| "it is not UTF-8 text".to_owned())
    };
    tokio::time::timeout(DOCUMENT_TIMEOUT, fetch)
        .await
        .unwrap_or_else(|_| Err(format!("it was not read within {} s", DOCUMENT_TIMEOUT.as_secs())))
}

/// Where requests go: the source's `base_url`, or the document's first server URL (relative to
/// the document's own URL when it is relative).
fn base_url(spec: &OpenApiSource, doc: &openapiv3::OpenAPI) -> Result<String, String> {
    if let Some(url) = &spec.base_url {
        return Ok(url.trim_end_matches('/').to_owned());
    }
    let server = doc.servers.first().map(|s| s.url.as_str()).unwrap_or_default();
    let absolute = if server.starts_with("http://") || server.starts_with("https://") {
        Some(server.to_owned())
    } else if spec.is_url() && !server.contains('{') {
        reqwest::Url::parse(&spec.document).and_then(|u| u.join(server)).ok().map(String::from)
    } else {
        None
    };
    absolute.map(|u| u.trim_end_matches('/').to_owned()).ok_or_else(|| {
        format!("its first server URL (`{server}`) is not an absolute URL: set `base_url` on the source")
    })
}

#[cfg(test)]
mod tests;
