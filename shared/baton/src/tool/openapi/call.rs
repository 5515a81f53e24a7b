//! One call of an [`super::OpenApiTool`]: the model's arguments (already checked against the
//! operation's schema) become a request, the answer a result (JSON, or text), read up to the
//! source's cap.

use futures::StreamExt;
use serde_json::{Map, Value};

use super::Source;
use super::document::{Location, Operation};
use crate::redact;
use crate::tool::ToolError;

/// Calls `op` with `arguments`.
pub(super) async fn call(source: &Source, op: &Operation, arguments: Value) -> Result<Value, ToolError> {
    let secrets = source.credential.secrets();
    let failed =
        |reason: String| ToolError::Failed { tool: op.id.clone(), reason: redact::redact(&reason, &secrets) };
    let unknown = |reason: String| ToolError::OutcomeUnknown {
        tool: op.id.clone(),
        reason: redact::redact(&reason, &secrets),
    };
    let run = async {
        let mut request = request(source, op, &arguments).map_err(failed)?;
        source
            .credential
            .apply(&mut request)
            .await
            .map_err(|e| failed(format!("cannot sign the request: {e}")))?;
        // Never twice: a request that could not be sent is refused here (the model may call
        // again); one that was sent may have acted, so its lost answer is an unknown outcome and
        // nothing sends it again (reqwest retries nothing; hyper re-sends only a request that
        // never left on a pooled connection the server had closed).
        let response = source.http.execute(request).await.map_err(|e| {
            if e.is_connect() {
                failed(format!(
                    "the server could not be reached ({}), so the call was not made",
                    transport_reason(&e)
                ))
            } else {
                unknown(format!(
                    "the connection broke after the request was sent ({}); the call may have run, so it was not sent again",
                    transport_reason(&e)
                ))
            }
        })?;
        let status = response.status();
        let json = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.contains("json"));
        let body = read_capped(response, source.max_result_bytes)
            .await
            .map_err(|reason| unknown(format!("{reason}; the call ran, with an unknown result")))?
            .ok_or(ToolError::TooLarge { tool: op.id.clone(), limit: source.max_result_bytes })?;
        let text = String::from_utf8_lossy(&body);
        if !status.is_success() {
            // The model reads why (a 4xx names what to fix), with no credential in it.
            return Err(failed(format!(
                "the server answered HTTP {}: {}",
                status.as_u16(),
                redact::excerpt(&text, &secrets)
            )));
        }
        Ok(match json.then(|| serde_json::from_slice::<Value>(&body).ok()).flatten() {
            Some(value) => value,
            None if body.is_empty() => serde_json::json!({"status": status.as_u16()}),
            None => Value::String(redact::redact(&text, &secrets)),
        })
    };
    match tokio::time::timeout(source.timeout, run).await {
        Ok(result) => result,
        Err(_) => Err(ToolError::Timeout { tool: op.id.clone(), timeout: source.timeout }),
    }
}

/// The request for `op` with `arguments`.
fn request(source: &Source, op: &Operation, arguments: &Value) -> Result<reqwest::Request, String> {
    let empty = Map::new();
    let args = arguments.as_object().unwrap_or(&empty);
    let mut path = op.path.clone();
    let mut query: Vec<(String, String)> = Vec::new();
    let mut headers = reqwest::header::HeaderMap::new();
    for param in &op.params {
        let Some(value) = args.get(&param.name).filter(|v| !v.is_null()) else { continue };
        match param.location {
            Location::Path => {
                path = path.replace(&format!("{{{}}}", param.name), &encode_segment(&joined(value)));
            }
            Location::Query => match value {
                // `form` style, exploded (the default): one pair per item.
                Value::Array(items) => query.extend(items.iter().map(|v| (param.name.clone(), scalar(v)))),
                value => query.push((param.name.clone(), scalar(value))),
            },
            Location::Header => {
                let name =
                    reqwest::header::HeaderName::try_from(param.name.as_str()).map_err(|e| e.to_string())?;
                let value = reqwest::header::HeaderValue::from_str(&joined(value))
                    .map_err(|_| format!("the header `{}` cannot carry that value", param.name))?;
                headers.insert(name, value);
            }
        }
    }
    let mut url =
        reqwest::Url::parse(&format!("{}{path}", source.base_url)).map_err(|e| format!("bad URL: {e}"))?;
    if !query.is_empty() {
        url.query_pairs_mut().extend_pairs(&query);
    }
    let mut builder = source.http.request(op.method.clone(), url).headers(headers);
    if let Some(body) = op.body.as_ref().and_then(|b| args.get(b)) {
        builder = builder.json(body);
    }
    builder = builder.header(reqwest::header::ACCEPT, "application/json, text/plain;q=0.9, */*;q=0.1");
    builder.build().map_err(|e| format!("cannot build the request: {e}"))
}

/// A value as one parameter's text: strings as they are, other scalars as JSON, objects as JSON.
fn scalar(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A value in `simple` style: an array's items joined with commas.
fn joined(value: &Value) -> String {
    match value {
        Value::Array(items) => items.iter().map(scalar).collect::<Vec<_>>().join(","),
        other => scalar(other),
    }
}

/// `text` percent-encoded as one path segment (everything but RFC 3986's unreserved characters).
fn encode_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~' | b',') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Why a request got no answer, in words (no Rust type, no URL with credentials).
pub(super) fn transport_reason(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        "it timed out".into()
    } else if error.is_connect() {
        "the connection was refused or could not be made".into()
    } else {
        let mut reason = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(inner) = source {
            reason = inner.to_string();
            source = inner.source();
        }
        reason
    }
}

/// The body of `response`, or `None` when it is larger than `limit` bytes (not read further).
pub(super) async fn read_capped(
    response: reqwest::Response,
    limit: usize,
) -> Result<Option<Vec<u8>>, String> {
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Ok(None);
    }
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| format!("the answer broke off: {}", transport_reason(&e)))?;
        if body.len() + chunk.len() > limit {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_value_is_one_encoded_segment() {
        assert_eq!(encode_segment("a b/c"), "a%20b%2Fc");
        assert_eq!(encode_segment("1,2"), "1,2");
    }
}
