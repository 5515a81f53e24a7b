//! `GET /chat/{episode_id}/messages`: the caller's recorded conversation, a page at a time, so a
//! page reloaded in the browser can show it again (docs/web-client.md, "Reading a conversation
//! back").
//!
//! Pages go backwards: the first is the newest messages, and its `next` cursor asks for the
//! page before it, until a page without `next` reaches the first message. Within a page the
//! messages are oldest first, in the order they were said, so a client appends the first page
//! and puts each older one before what it shows. The caller is identified as for `POST /chat`,
//! and an episode the caller has not got (never recorded, expired, or another user's: every key
//! starts with the user) is a 404 that says no more, so an id cannot be probed for existence.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::sync::Arc;

use super::request::{checked_id, query_params, user_of};
use super::{ApiError, Caller, ChatService};
use crate::event::{AgentUsage, Status};
use crate::store::{EpisodeKey, StoreError, StoredMessage};

/// Messages per page when the request names no `limit`.
pub(crate) const DEFAULT_PAGE_MESSAGES: usize = 50;
/// The most messages one page may ask for.
pub(crate) const MAX_PAGE_MESSAGES: usize = 200;

/// One page of a conversation, as sent.
#[derive(Debug, Serialize)]
struct Page<'a> {
    episode_id: &'a str,
    messages: Vec<MessageView<'a>>,
    /// The cursor of the older page; absent on the page that holds the first message.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
    /// On the newest page, the episode's latest turn while it still runs: its reply is not in
    /// the messages yet, and a client rejoins its stream (`GET …/turns/{turn_id}/events`).
    #[serde(skip_serializing_if = "Option::is_none")]
    running_turn: Option<String>,
    /// On the newest page, the tool calls that wait for the user's approval (docs/approvals.md).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    interrupts: Vec<crate::event::Interrupt>,
}

/// One stored message, as sent.
#[derive(Debug, Serialize)]
struct MessageView<'a> {
    turn_id: &'a str,
    seq: u32,
    role: &'static str,
    agent: &'a str,
    content: &'a str,
    status: Status,
    created_at: u64,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    usage: &'a [AgentUsage],
    /// What the agent reported about the answer (`answer_meta` fields, `choices`, `handoff`).
    #[serde(skip_serializing_if = "Option::is_none")]
    meta: Option<&'a serde_json::Map<String, serde_json::Value>>,
}

impl<'a> From<&'a StoredMessage> for MessageView<'a> {
    fn from(m: &'a StoredMessage) -> MessageView<'a> {
        MessageView {
            turn_id: &m.turn_id,
            seq: m.seq,
            role: m.role.as_str(),
            agent: &m.agent,
            content: &m.content,
            status: m.status,
            created_at: m.created_at,
            usage: &m.usage,
            meta: m.meta.as_ref(),
        }
    }
}

/// What a request asked for: `limit` and `before`, checked.
#[derive(Debug, PartialEq, Eq)]
struct PageRequest {
    limit: usize,
    before: Option<String>,
}

fn bad_limit() -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_limit",
        format!("`limit` must be a whole number from 1 to {MAX_PAGE_MESSAGES}"),
    )
}

fn bad_cursor(e: StoreError) -> ApiError {
    let reason = match e {
        StoreError::InvalidKey(reason) => reason,
        other => other.to_string(),
    };
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_cursor", format!("`before`: {reason}"))
}

/// Reads `limit` and `before` from a query string; any other parameter, or one given twice, is
/// refused, so a misspelt `limit` is not silently the default.
fn page_request(uri: &Uri) -> Result<PageRequest, ApiError> {
    let [limit, before] = query_params(uri, ["limit", "before"])?;
    let limit = match limit {
        None => DEFAULT_PAGE_MESSAGES,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=MAX_PAGE_MESSAGES).contains(&n) && text.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(bad_limit()),
        },
    };
    if let Some(cursor) = &before {
        crate::store::MessageCursor::parse(cursor).map_err(bad_cursor)?;
    }
    Ok(PageRequest { limit, before })
}

impl ChatService {
    /// Answers `GET /chat/{episode_id}/messages` of `caller` (`uri` carries the query): a page of
    /// the caller's episode as JSON, or a 4xx/5xx JSON error. Shared by `serve` and the Lambda.
    pub(crate) async fn messages(
        &self,
        caller: &Caller,
        episode_id: String,
        headers: &HeaderMap,
        uri: &Uri,
    ) -> Response {
        match self.messages_page(caller, episode_id, headers, uri).await {
            Ok(mut response) => {
                // A person's conversation: never kept by a shared cache.
                let h = response.headers_mut();
                h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
                response
            }
            Err(e) => e.into_response(),
        }
    }

    async fn messages_page(
        &self,
        caller: &Caller,
        episode_id: String,
        headers: &HeaderMap,
        uri: &Uri,
    ) -> Result<Response, ApiError> {
        let user = user_of(caller, headers)?;
        let episode_id = checked_id("episode_id", episode_id)?;
        let request = page_request(uri)?;
        let key = EpisodeKey::new(user, episode_id)?;
        let store = self.turns.history().store();
        let (episode, page) = tokio::join!(
            store.episode(&key),
            store.messages_page(&key, request.before.as_deref(), request.limit)
        );
        if episode?.is_none() {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "episode_not_found",
                "no conversation with this id for this user",
            ));
        }
        let (messages, next) = page.map_err(|e| match e {
            StoreError::InvalidKey(_) => bad_cursor(e),
            other => other.into(),
        })?;
        let running_turn = match request.before {
            None => self.running_turn(&key).await,
            Some(_) => None,
        };
        // Only an episode whose last turn paused has approvals waiting: no read otherwise.
        let paused = request.before.is_none()
            && messages.last().is_some_and(|m| m.status == crate::event::Status::Interrupted);
        let interrupts = match paused {
            true => self.turns.approvals().pending(&key).await.unwrap_or_else(|e| {
                tracing::warn!(episode = %key, error = %e, "pending approvals not read");
                Vec::new()
            }),
            false => Vec::new(),
        };
        let messages = messages.iter().map(Into::into).collect();
        let body = Page { episode_id: key.episode_id(), messages, next, running_turn, interrupts };
        Ok(axum::Json(body).into_response())
    }
}

/// `GET /chat/{episode_id}/messages` on `serve` ([`ChatService::messages`]).
pub(super) async fn route(
    State(service): State<Arc<ChatService>>,
    Path(episode_id): Path<String>,
    caller: Caller,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    service.messages(&caller, episode_id, &headers, &uri).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(query: &str) -> Result<PageRequest, &'static str> {
        let uri: Uri = format!("/chat/e/messages{query}").parse().unwrap();
        page_request(&uri).map_err(|e| e.code)
    }

    #[test]
    fn limit_defaults_and_is_bounded() {
        assert_eq!(asked(""), Ok(PageRequest { limit: DEFAULT_PAGE_MESSAGES, before: None }));
        assert_eq!(asked("?limit=1").unwrap().limit, 1);
        assert_eq!(asked("?limit=200").unwrap().limit, MAX_PAGE_MESSAGES);
        for bad in ["0", "201", "-1", "+5", "ten", "", "1.5", "99999999999999999999999"] {
            assert_eq!(asked(&format!("?limit={bad}")), Err("invalid_limit"), "limit={bad}");
        }
    }

    #[test]
    fn a_cursor_must_be_one_the_endpoint_returns() {
        let good = "0193a1b2-7c3f-7000-8000-000000000001.2";
        assert_eq!(asked(&format!("?before={good}")).unwrap().before.as_deref(), Some(good));
        for bad in ["", "x", "t.", ".1", "t.12345", "t.-1", "t.1a", "a%23b.1", "a.b.1"] {
            assert_eq!(asked(&format!("?before={bad}")), Err("invalid_cursor"), "before={bad}");
        }
    }

    #[test]
    fn unknown_or_repeated_parameters_are_refused() {
        assert_eq!(asked("?limt=5"), Err("invalid_query"));
        assert_eq!(asked("?limit=5&limit=6"), Err("invalid_query"));
    }
}
