//! A turn after its request (docs/durable-turns.md): `GET /chat/{episode_id}/turns/{turn_id}/events`
//! and `GET /chat/{episode_id}/events` rejoin a turn's stream after a client's last event id,
//! and `POST /chat/{episode_id}/turns/{turn_id}/cancel` stops a running turn, from any
//! instance.
//!
//! The last event id comes in the `Last-Event-ID` header (what `EventSource` sends when it
//! reconnects) or, for a first `EventSource` connection that cannot set headers, the
//! `last_event_id` query parameter; the header wins. It must be `<turn_id>:<seq>` of this turn:
//! a malformed one, one of another turn, or a seq past the end of a turn that has ended (or
//! that this process runs) is a 400 `invalid_last_event_id`, never a silent replay from the
//! start, which would show the client its answer twice. No id replays the turn from its first
//! event.
//!
//! As for the conversation, a turn the caller has not got (never logged, expired, or another
//! user's: every key starts with the user) is a 404 that says no more.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use super::platform::Deadline;
use super::request::{checked_id, query_params, user_of};
use super::wire::{BatonSse, Wire};
use super::{ApiError, Caller, ChatService};
use crate::event::Status;
use crate::store::{CancelOutcome, EpisodeKey, TurnStatus};
use crate::turn::{Cursor, LiveTurn};

/// The header a reconnecting SSE client sends its last event id in.
pub(crate) const LAST_EVENT_ID: &str = "last-event-id";

/// The query parameter that carries it when a header cannot.
pub(crate) const LAST_EVENT_ID_QUERY: &str = "last_event_id";

fn bad_last_id(reason: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_last_event_id", reason.into())
}

fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such turn")
}

/// A last event id, `<turn_id>:<seq>`, as its turn and seq (a decimal number, compared as one).
pub(crate) fn parse_last_event_id(value: &str) -> Result<(String, u64), ApiError> {
    let (turn, seq) = value
        .rsplit_once(':')
        .ok_or_else(|| bad_last_id(format!("{value:?} is not an event id of the form <turn_id>:<seq>")))?;
    let well_formed = !seq.is_empty()
        && seq.len() <= 20
        && seq.bytes().all(|b| b.is_ascii_digit())
        && !seq.starts_with('0');
    let seq = well_formed.then(|| seq.parse::<u64>().ok()).flatten().ok_or_else(|| {
        bad_last_id(format!(
            "the seq of {value:?} must be a whole number from 1, without sign or leading zeros"
        ))
    })?;
    let turn = checked_id("turn_id", turn.to_owned())
        .map_err(|_| bad_last_id(format!("{value:?} does not name a turn")))?;
    Ok((turn, seq))
}

/// The last event id of a request: the header, else the query parameter; `None` when neither.
fn last_event_id(headers: &HeaderMap, uri: &Uri) -> Result<Option<(String, u64)>, ApiError> {
    if let Some(value) = headers.get(LAST_EVENT_ID) {
        let value = value.to_str().map_err(|_| bad_last_id("the Last-Event-ID header is not text"))?;
        // An empty header is what `EventSource` sends before it has an id.
        return if value.is_empty() { Ok(None) } else { parse_last_event_id(value).map(Some) };
    }
    let [found] = query_params(uri, [LAST_EVENT_ID_QUERY])?;
    found.filter(|v| !v.is_empty()).map(|v| parse_last_event_id(&v)).transpose()
}

impl ChatService {
    /// Answers `GET /chat/{episode_id}/turns/{turn_id}/events` (`turn_id` given) and
    /// `GET /chat/{episode_id}/events` (the turn of the last event id, else the episode's latest)
    /// of `caller`: an SSE stream of the turn's events after the last event id, then its live rest
    /// until `completed`, or until `deadline` (a Lambda invocation's) or the endpoint's turn
    /// limit, whichever is first; or a 4xx/5xx JSON error. Shared by `serve` and the Lambda.
    pub(crate) async fn turn_events(
        &self,
        caller: &Caller,
        episode_id: String,
        turn_id: Option<String>,
        headers: &HeaderMap,
        uri: &Uri,
        deadline: Option<tokio::time::Instant>,
    ) -> Response {
        match self.resume(caller, episode_id, turn_id, headers, uri, deadline).await {
            Ok(response) => response,
            Err(e) => e.into_response(),
        }
    }

    async fn resume(
        &self,
        caller: &Caller,
        episode_id: String,
        turn_id: Option<String>,
        headers: &HeaderMap,
        uri: &Uri,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Response, ApiError> {
        let user = user_of(caller, headers)?;
        let episode = checked_id("episode_id", episode_id)?;
        let key = EpisodeKey::new(user, episode)?;
        let last = last_event_id(headers, uri)?;
        let turn_id = match (turn_id, &last) {
            (Some(turn), Some((named, _))) if *named != turn => {
                return Err(bad_last_id(format!(
                    "the last event id names turn {named}, not this turn {turn}"
                )));
            }
            (Some(turn), _) => checked_id("turn_id", turn)?,
            (None, Some((named, _))) => named.clone(),
            (None, None) => self.latest_turn(&key).await?.ok_or_else(not_found)?,
        };
        let after = last.map_or(0, |(_, seq)| seq);
        let store = self.turns.history().store();
        let live = self.turns.live().get(&key, &turn_id);
        // Whether `last_seq` is the turn's last for sure: a turn this process runs knows it
        // exactly, an ended one has it in its record; the record of a turn running elsewhere
        // may lag its stream by a batch.
        let (last_seq, exact, ended) = match &live {
            Some(turn) => (turn.last_seq(), true, turn.ended().is_some()),
            None => {
                let record = store.turn_record(&key, &turn_id).await?.ok_or_else(not_found)?;
                let ended = matches!(record.effective_status(store.clock().now_ms()), TurnStatus::Ended(_));
                (record.last_seq, ended, ended)
            }
        };
        if after > last_seq && exact {
            return Err(bad_last_id(format!(
                "the last event id names event {after}, but the turn has {last_seq} events so far"
            )));
        }
        if ended && after == last_seq {
            // Nothing follows the final event: `204` tells an `EventSource` to stop reconnecting
            // (an empty `200` would have it reconnect forever).
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        Ok(self.follow_response(key, live, turn_id, Cursor { after }, deadline, Box::new(BatonSse)))
    }

    /// The response (through `wire`) of `key`'s turn `turn_id` after `cursor` (`live`: the turn, when this
    /// process runs it), until its `completed`, or until `deadline` (a Lambda invocation's) or
    /// the endpoint's turn limit, whichever is first: what a resume and a retried request get.
    pub(super) fn follow_response(
        &self,
        key: EpisodeKey,
        live: Option<Arc<LiveTurn>>,
        turn_id: String,
        cursor: Cursor,
        deadline: Option<tokio::time::Instant>,
        wire: Box<dyn Wire>,
    ) -> Response {
        let turn_deadline = tokio::time::Instant::now() + self.endpoint.turn_deadline;
        let until = deadline.map_or(turn_deadline, |d| d.min(turn_deadline));
        let episode = key.episode_id().to_owned();
        let events = self.turns.follow(key, live, turn_id.clone(), cursor, until);
        wire.response(&episode, turn_id, events, self.heartbeat)
    }

    /// The episode's latest turn: the newest this process runs or the store has logged (turn
    /// ids sort by creation time).
    pub(super) async fn latest_turn(&self, key: &EpisodeKey) -> Result<Option<String>, ApiError> {
        let live = self.turns.live().latest(key);
        let logged = if self.turns.log().enabled {
            self.turns.history().store().latest_turn(key).await?
        } else {
            None
        };
        Ok(live.into_iter().chain(logged).max())
    }

    /// The episode's latest turn if it still runs (here or on another instance); `None` when
    /// it has ended, or when that cannot be read (the conversation is still served).
    pub(super) async fn running_turn(&self, key: &EpisodeKey) -> Option<String> {
        let latest = self.latest_turn(key).await.ok().flatten()?;
        if let Some(turn) = self.turns.live().get(key, &latest) {
            return turn.ended().is_none().then_some(latest);
        }
        let store = self.turns.history().store();
        let record = store.turn_record(key, &latest).await.ok().flatten()?;
        (record.effective_status(store.clock().now_ms()) == TurnStatus::Running).then_some(latest)
    }

    /// Asks `key`'s turn `turn_id` to stop: at once when this process runs it, else through the
    /// store's cancel flag (the A2A `CancelTask` too). A turn stopped here is flagged in the store
    /// too, so its record says a stop was asked whichever instance took the request.
    pub(super) async fn request_cancel(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
    ) -> Result<CancelOutcome, ApiError> {
        Ok(match self.turns.live().get(key, turn_id) {
            Some(turn) => match turn.ended() {
                Some(status) => CancelOutcome::AlreadyEnded(status.as_str().to_owned()),
                None => {
                    turn.cancel();
                    if self.turns.log().enabled {
                        if let Err(e) = self.turns.history().store().request_cancel(key, turn_id).await {
                            // The turn stops anyway: the flag is for the record.
                            tracing::warn!(episode = %key, turn = %turn_id, error = %e, "cancel flag not stored");
                        }
                    }
                    CancelOutcome::Requested
                }
            },
            None if self.turns.log().enabled => {
                self.turns.history().store().request_cancel(key, turn_id).await?
            }
            None => CancelOutcome::Unknown,
        })
    }

    /// Answers `POST /chat/{episode_id}/turns/{turn_id}/cancel` of `caller`: 202 with
    /// `"cancel": "requested"` when the turn runs and is now asked to stop (again, too), 202 with
    /// `"cancel": "done"` when it has ended `cancelled` (idempotent), 409 `turn_ended` when it
    /// ended otherwise, 404 when the caller has no such turn. The turn stops at once when this process
    /// runs it, else at its producer's next look at the store (within a second).
    pub(crate) async fn cancel_turn(
        &self,
        caller: &Caller,
        episode_id: String,
        turn_id: String,
        headers: &HeaderMap,
    ) -> Response {
        let cancelled = async {
            let user = user_of(caller, headers)?;
            let episode = checked_id("episode_id", episode_id)?;
            let turn_id = checked_id("turn_id", turn_id)?;
            let key = EpisodeKey::new(user, episode.clone())?;
            let outcome = self.request_cancel(&key, &turn_id).await?;
            match outcome {
                CancelOutcome::Requested => {
                    tracing::info!(episode = %key, turn = %turn_id, "cancel requested");
                    let body =
                        serde_json::json!({"episode_id": episode, "turn_id": turn_id, "cancel": "requested"});
                    Ok((StatusCode::ACCEPTED, axum::Json(body)).into_response())
                }
                // Asking again once the stop took effect (or another stop did) is no error.
                CancelOutcome::AlreadyEnded(status) if status == Status::Cancelled.as_str() => {
                    let body =
                        serde_json::json!({"episode_id": episode, "turn_id": turn_id, "cancel": "done"});
                    Ok((StatusCode::ACCEPTED, axum::Json(body)).into_response())
                }
                CancelOutcome::AlreadyEnded(status) => Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "turn_ended",
                    format!("the turn has ended already (status {status})"),
                )),
                CancelOutcome::Unknown => Err(not_found()),
            }
        };
        cancelled.await.unwrap_or_else(|e: ApiError| e.into_response())
    }
}

/// `GET /chat/{episode_id}/events`: the episode's latest turn rejoined.
pub(super) async fn events_route(
    State(service): State<Arc<ChatService>>,
    Path(episode_id): Path<String>,
    caller: Caller,
    Deadline(deadline): Deadline,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    service.turn_events(&caller, episode_id, None, &headers, &uri, deadline).await
}

/// `GET /chat/{episode_id}/turns/{turn_id}/events`: that turn rejoined.
pub(super) async fn turn_events_route(
    State(service): State<Arc<ChatService>>,
    Path((episode_id, turn_id)): Path<(String, String)>,
    caller: Caller,
    Deadline(deadline): Deadline,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    service.turn_events(&caller, episode_id, Some(turn_id), &headers, &uri, deadline).await
}

/// `POST /chat/{episode_id}/turns/{turn_id}/cancel`: a running turn stopped.
pub(super) async fn cancel_route(
    State(service): State<Arc<ChatService>>,
    Path((episode_id, turn_id)): Path<(String, String)>,
    caller: Caller,
    headers: HeaderMap,
) -> Response {
    service.cancel_turn(&caller, episode_id, turn_id, &headers).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(value: &str) -> Result<(String, u64), &'static str> {
        parse_last_event_id(value).map_err(|e| e.code)
    }

    #[test]
    fn last_event_ids_are_a_turn_and_a_number() {
        assert_eq!(parsed("0193-ab:7"), Ok(("0193-ab".into(), 7)));
        assert_eq!(parsed("t:10"), Ok(("t".into(), 10)), "a number, not text: 10 > 9");
        assert_eq!(parsed("a:b:12"), Ok(("a:b".into(), 12)), "the seq follows the last colon");
        for bad in [
            "",
            "t",
            "t:",
            ":3",
            "t:-2",
            "t:+2",
            "t:0",
            "t:007",
            "t:1.5",
            "t:x",
            "t :1",
            "t:99999999999999999999999",
            "t/1:2",
        ] {
            assert_eq!(parsed(bad), Err("invalid_last_event_id"), "{bad:?}");
        }
    }

    #[test]
    fn the_header_wins_and_the_query_is_checked() {
        let uri: Uri = "/chat/e/events?last_event_id=t:2".parse().unwrap();
        let mut headers = HeaderMap::new();
        assert_eq!(last_event_id(&headers, &uri).unwrap(), Some(("t".into(), 2)));
        headers.insert(LAST_EVENT_ID, "t:5".parse().unwrap());
        assert_eq!(last_event_id(&headers, &uri).unwrap(), Some(("t".into(), 5)));
        headers.insert(LAST_EVENT_ID, "".parse().unwrap());
        assert_eq!(last_event_id(&headers, &uri).unwrap(), None, "EventSource's empty id is no id");
        let code =
            |q: &str| last_event_id(&HeaderMap::new(), &q.parse().unwrap()).map(|_| ()).map_err(|e| e.code);
        assert_eq!(code("/x?limit=3"), Err("invalid_query"));
        assert_eq!(code("/x?last_event_id=t:1&last_event_id=t:2"), Err("invalid_query"));
        assert_eq!(code("/x?last_event_id=t%3A-1"), Err("invalid_last_event_id"));
        assert_eq!(code("/x"), Ok(()));
    }
}
