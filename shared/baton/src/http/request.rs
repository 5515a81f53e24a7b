//! A chat request before its turn starts: the JSON error a refused request gets, who the caller
//! is, and the checks a body and its ids pass.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::ChatService;
use crate::orchestrator::TurnRequest;
use crate::store::StoreError;

/// A request refused before the stream started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status (4xx for bad input, 5xx for a failing store).
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// What was wrong.
    pub message: String,
    /// The turn the error is about (`turn_in_progress`: the one to rejoin), in the JSON too.
    pub turn_id: Option<String>,
    /// When to try again (`Retry-After`, whole seconds).
    pub retry_after: Option<std::time::Duration>,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into(), turn_id: None, retry_after: None }
    }

    /// The same error about turn `turn_id`.
    pub fn with_turn_id(mut self, turn_id: impl Into<String>) -> ApiError {
        self.turn_id = Some(turn_id.into());
        self
    }

    /// The same error telling the client to try again after `after`.
    pub fn with_retry_after(mut self, after: std::time::Duration) -> ApiError {
        self.retry_after = Some(after);
        self
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        let status = match &e {
            StoreError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            StoreError::InvalidKey(_) => StatusCode::BAD_REQUEST,
            StoreError::Conflict { .. } => StatusCode::CONFLICT,
            StoreError::Corrupt { .. } | StoreError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.code(), e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = serde_json::json!({"code": self.code, "message": self.message});
        if let Some(turn_id) = self.turn_id {
            error["turn_id"] = turn_id.into();
        }
        let mut response = (self.status, axum::Json(serde_json::json!({"error": error}))).into_response();
        if let Some(after) = self.retry_after {
            let seconds = after.as_secs_f64().ceil().max(1.0) as u64;
            response.headers_mut().insert(header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

/// A chat request in typed form: the JSON body of `POST /chat`, or what a protocol's request
/// (AG-UI, the AI SDK, an A2A message) stands for, checked by [`ChatService::validate_body`].
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ChatBody {
    pub(super) message: Option<serde_json::Value>,
    pub(super) episode_id: Option<String>,
    pub(super) request_id: Option<String>,
    pub(super) image: Option<serde_json::Value>,
    pub(super) on_disconnect: Option<serde_json::Value>,
    pub(super) on_busy: Option<serde_json::Value>,
    pub(super) resume: Option<serde_json::Value>,
}

#[cfg(test)]
impl ChatBody {
    /// The request as the JSON body of `POST /chat` would have it (its fields given).
    pub(super) fn to_json(&self) -> serde_json::Value {
        let string = |s: &Option<String>| s.clone().map(serde_json::Value::String);
        let fields = [
            ("message", self.message.clone()),
            ("episode_id", string(&self.episode_id)),
            ("request_id", string(&self.request_id)),
            ("image", self.image.clone()),
            ("on_disconnect", self.on_disconnect.clone()),
            ("resume", self.resume.clone()),
        ];
        fields.into_iter().filter_map(|(k, v)| Some((k.to_owned(), v?))).collect()
    }
}

/// Who a request is from, established before its body is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// Verified by the platform (IAM) or a token (JWT): the turn's user is this id, whatever the
    /// request says.
    Verified(String),
    /// Local, unauthenticated mode: the `x-baton-user` header names the user (default `local`).
    Local,
}

impl Caller {
    /// A verified caller from a platform or token identity. Ids become storage keys, so any
    /// character outside the safe alphabet is percent-encoded (injective: `%` is never kept as
    /// is, so two identities never map to one user).
    pub fn verified(identity: &str) -> Result<Caller, ApiError> {
        let mut id = String::with_capacity(identity.len());
        for b in identity.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'@') {
                id.push(b as char);
            } else {
                id.push_str(&format!("%{b:02X}"));
            }
        }
        if id.is_empty() || id.len() > 256 {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "the verified identity is empty or too long",
            ));
        }
        Ok(Caller::Verified(id))
    }
}

/// A request that passed validation.
#[derive(Debug, Clone)]
pub struct ValidRequest {
    /// The turn to run.
    pub turn: TurnRequest,
    /// The client's id for this request, for idempotent retries.
    pub request_id: Option<String>,
    /// What happens when the client leaves, if the request says (else the service's default).
    pub on_disconnect: Option<crate::turn::DisconnectPolicy>,
    /// What happens if the episode's turn runs when this one arrives, if the request says (else
    /// the service's default).
    pub on_busy: Option<crate::turn::OnBusy>,
    /// A resume request's answers to the episode's pending approvals, in the request's order.
    pub resume: Option<Vec<(String, crate::approval::Decision)>>,
}

/// Most answers one resume request may carry.
pub(super) const MAX_RESUME_ANSWERS: usize = 64;

/// The `resume` list of a chat request (docs/approvals.md): `[{interrupt_id, decision:
/// "approve" | "reject", message?, arguments?}]`, each id once; a 400 `invalid_resume` naming
/// the entry and field otherwise (edited arguments are checked later, against the interrupt).
pub(super) fn parse_resume(
    value: serde_json::Value,
    max_chars: usize,
) -> Result<Vec<(String, crate::approval::Decision)>, ApiError> {
    use crate::approval::Decision;
    let bad = |message: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_resume", message);
    let serde_json::Value::Array(entries) = value else {
        return Err(bad("`resume` must be a list of `{interrupt_id, decision}` answers".into()));
    };
    if entries.is_empty() || entries.len() > MAX_RESUME_ANSWERS {
        return Err(bad(format!("`resume` must hold 1 to {MAX_RESUME_ANSWERS} answers")));
    }
    let mut answers: Vec<(String, Decision)> = Vec::with_capacity(entries.len());
    for (i, entry) in entries.into_iter().enumerate() {
        let serde_json::Value::Object(mut entry) = entry else {
            return Err(bad(format!("`resume[{i}]` must be an object")));
        };
        if let Some(unknown) =
            entry.keys().find(|k| !["interrupt_id", "decision", "message", "arguments"].contains(&k.as_str()))
        {
            return Err(bad(format!("`resume[{i}].{unknown}` is not a field of an answer")));
        }
        let id = match entry.remove("interrupt_id") {
            Some(serde_json::Value::String(id)) => checked_id("interrupt_id", id)
                .map_err(|_| bad(format!("`resume[{i}].interrupt_id` is not a valid id")))?,
            _ => return Err(bad(format!("`resume[{i}].interrupt_id` must be a string"))),
        };
        if answers.iter().any(|(seen, _)| *seen == id) {
            return Err(bad(format!("interrupt `{id}` is answered twice")));
        }
        let message = match entry.remove("message") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(m)) if m.chars().count() <= max_chars => Some(m),
            Some(serde_json::Value::String(_)) => {
                return Err(bad(format!("`resume[{i}].message` is longer than {max_chars} characters")));
            }
            Some(_) => return Err(bad(format!("`resume[{i}].message` must be a string"))),
        };
        let arguments = match entry.remove("arguments") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::Object(map)) => Some(map),
            Some(_) => return Err(bad(format!("`resume[{i}].arguments` must be an object"))),
        };
        let decision = match entry.remove("decision").as_ref().and_then(|d| d.as_str()) {
            Some("approve") if message.is_none() => Decision::Approve { arguments },
            Some("reject") if arguments.is_none() => Decision::Reject { message },
            Some("approve") => return Err(bad(format!("`resume[{i}].message` goes with a rejection"))),
            Some("reject") => return Err(bad(format!("`resume[{i}].arguments` go with an approval"))),
            _ => return Err(bad(format!("`resume[{i}].decision` must be \"approve\" or \"reject\""))),
        };
        answers.push((id, decision));
    }
    Ok(answers)
}

pub(super) fn body_too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("the body is larger than {limit} bytes"),
    )
}

/// Chat requests are JSON: anything else is refused before the body is read. Besides saying what
/// the endpoint speaks, this makes a cross-site browser POST a CORS-preflighted request, so a web
/// page cannot start turns on a local unauthenticated `serve` with a plain form or `text/plain`.
pub(super) fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the request as JSON with `content-type: application/json`",
        ))
    }
}

/// The user a request acts for: the verified identity, else (local mode) the `x-baton-user`
/// header, else `local`.
pub(super) fn user_of(caller: &Caller, headers: &HeaderMap) -> Result<String, ApiError> {
    match (caller, headers.get(super::USER_HEADER)) {
        (Caller::Verified(id), _) => Ok(id.clone()),
        (Caller::Local, None) => Ok("local".to_owned()),
        (Caller::Local, Some(v)) => {
            checked_id(super::USER_HEADER, v.to_str().map_err(|_| bad_id(super::USER_HEADER))?.to_owned())
        }
    }
}

pub(super) fn bad_id(field: &str) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_id",
        format!("`{field}` must be 1 to 128 characters of letters, digits, '-', '_', '.', ':' or '@'"),
    )
}

/// Ids end up in storage keys: keep them to a safe alphabet.
/// The query parameters of `uri`, each at most once and each one of `known` (in that order;
/// `None` for one not given): a misspelt parameter or one given twice is a 400
/// `invalid_query`, never silently ignored.
pub(super) fn query_params<const N: usize>(
    uri: &axum::http::Uri,
    known: [&str; N],
) -> Result<[Option<String>; N], ApiError> {
    let bad = |message: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", message);
    let axum::extract::Query(pairs) = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map_err(|e| bad(format!("the query string is malformed: {e}")))?;
    let mut found: [Option<String>; N] = std::array::from_fn(|_| None);
    for (name, value) in pairs {
        let Some(at) = known.iter().position(|k| *k == name) else {
            let takes = known.map(|k| format!("`{k}`")).join(" and ");
            return Err(bad(format!("unknown query parameter {name:?}: this endpoint takes {takes}")));
        };
        if found[at].replace(value).is_some() {
            return Err(bad(format!("the query parameter `{name}` is given twice")));
        }
    }
    Ok(found)
}

pub(super) fn checked_id(field: &str, id: String) -> Result<String, ApiError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '@'));
    if ok { Ok(id) } else { Err(bad_id(field)) }
}

/// A JSON request body, read within the body limit and the body-read timeout.
pub(super) async fn read_body(
    service: &ChatService,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, ApiError> {
    let limit = service.limits.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(body_too_large(limit));
    }
    require_json(headers)?;
    // A total bound on the body, not an idle one: a client trickling a byte now and then would
    // reset any per-read timer forever. hyper closes the connection after this answer, since
    // the rest of the body was not read.
    let timeout = service.endpoint.body_read_timeout;
    let read = match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Ok(read) => read,
        Err(_) => {
            tracing::info!(timeout_ms = timeout.as_millis() as u64, "request body too slow");
            return Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!("the request body did not arrive within {} ms", timeout.as_millis()),
            ));
        }
    };
    read.map_err(|e| {
        let too_large = std::iter::successors(Some(&e as &dyn std::error::Error), |e| e.source())
            .any(|e| e.is::<http_body_util::LengthLimitError>());
        if too_large {
            body_too_large(limit)
        } else {
            ApiError::new(StatusCode::BAD_REQUEST, "unreadable_body", format!("could not read the body: {e}"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verified_identities_are_encoded_injectively_into_safe_ids() {
        let id = |s| match Caller::verified(s).unwrap() {
            Caller::Verified(id) => id,
            Caller::Local => unreachable!(),
        };
        assert_eq!(id("auth0|123"), "auth0%7C123");
        assert_eq!(id("a#EP#b"), "a%23EP%23b", "no key injection");
        assert_ne!(id("a%7C"), id("a|"));
        assert!(Caller::verified("").is_err());
    }
}
