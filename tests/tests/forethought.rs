//! The Forethought support agent against the Forethought test server over real HTTP: the
//! documented request, chunked and JSON answers, conversation continuity with an injected clock,
//! `prior_context`, and vendor failures.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use baton::agent::{Agent, AgentRequest};
use baton::event::Event;
use baton::support::SUPPORT_APOLOGY;
use baton::support::agent::ForethoughtAgent;
use baton::support::forethought::{ForethoughtClient, ForethoughtConfig, PriorContextMode};
use baton::support::scripted::{ForethoughtServer, FtReply};
use baton::support::sessions::{ManualClock, MemorySupportSessions, SupportSessions};
use baton_tests::{FT_TOKEN, forethought_config, text_of};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::Semaphore;

const MINUTE: Duration = Duration::from_secs(60);

struct Rig {
    ft: ForethoughtServer,
    sessions: Arc<MemorySupportSessions>,
    clock: Arc<ManualClock>,
    agent: ForethoughtAgent,
}

async fn rig_with(configure: impl FnOnce(&mut ForethoughtConfig)) -> Rig {
    let ft = ForethoughtServer::start().await.unwrap();
    let mut config = forethought_config(&ft);
    configure(&mut config);
    let sessions = Arc::new(MemorySupportSessions::default());
    let clock = Arc::new(ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)));
    let agent =
        ForethoughtAgent::new(ForethoughtClient::new(config).unwrap(), sessions.clone(), clock.clone());
    Rig { ft, sessions, clock, agent }
}

async fn rig() -> Rig {
    rig_with(|_| {}).await
}

impl Rig {
    fn request(&self, query: &str, prior_context: Option<&str>) -> AgentRequest {
        AgentRequest {
            user_id: "u1".into(),
            episode_id: "ep1".into(),
            query: query.into(),
            prior_context: prior_context.map(str::to_owned),
            ..Default::default()
        }
    }

    async fn ask(&self, query: &str) -> Vec<Event> {
        self.agent.run(self.request(query, None), "support[1]".into()).collect().await
    }

    async fn stored_id(&self) -> Option<String> {
        self.sessions.conversation("u1", "ep1").await.unwrap().map(|c| c.conversation_id)
    }
}

fn answer(events: &[Event]) -> String {
    text_of(events, "support[1]")
}

fn error_code(events: &[Event]) -> Option<&str> {
    events.iter().find_map(|e| match e {
        Event::Error { code, .. } => Some(code.as_str()),
        _ => None,
    })
}

#[tokio::test]
async fn a_start_sends_the_documented_request_and_streams_the_chunks() {
    let r = rig().await;
    r.ft.push(FtReply::chunks(["Receipts scan best ", "in good light."]));
    let events = r.ask("my receipt didn't scan").await;
    let req = &r.ft.requests()[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.authorization.as_deref(), Some(format!("Bearer {FT_TOKEN}").as_str()));
    assert_eq!(
        req.body,
        json!({"query": "my receipt didn't scan", "user_id": "u1", "channel": "headless", "context_variables": {}})
    );
    let texts: Vec<&Event> = events.iter().filter(|e| matches!(e, Event::Text { .. })).collect();
    assert_eq!(texts.len(), 2, "one text event per chunk");
    assert_eq!(answer(&events), "Receipts scan best in good light.");
    assert_eq!(events[0], Event::ResponseId { agent: "support[1]".into(), id: "ft_conv-1".into() });
    assert_eq!(r.stored_id().await.as_deref(), Some("conv-1"));
}

#[tokio::test]
async fn chunks_reach_the_caller_before_the_vendor_sends_the_rest() {
    let r = rig().await;
    let gate = Arc::new(Semaphore::new(0));
    r.ft.push(FtReply::chunks(["first, ", "second, ", "third."]).gate_before(1, gate.clone()));
    let mut events = r.agent.run(r.request("q", None), "support[1]".into());
    let first_text = loop {
        match events.next().await.unwrap() {
            Event::Text { text, .. } => break text,
            _ => continue,
        }
    };
    assert_eq!(first_text, "first, ");
    assert_eq!(r.ft.requests()[0].chunks_sent, 1, "the vendor had sent one chunk only");
    gate.add_permits(1);
    let rest: Vec<Event> = events.collect().await;
    assert_eq!(answer(&rest), "second, third.");
}

#[tokio::test]
async fn a_single_json_answer_and_an_sse_framed_one_are_read_too() {
    let r = rig().await;
    r.ft.push(FtReply::json("Points arrive within 48 hours."));
    assert_eq!(answer(&r.ask("where are my points").await), "Points arrive within 48 hours.");
    r.ft.push(FtReply::chunks(["One. ", "Two."]).sse());
    assert_eq!(answer(&r.ask("and then?").await), "One. Two.");
}

#[tokio::test]
async fn within_55_minutes_the_conversation_is_continued() {
    let r = rig().await;
    r.ft.push(FtReply::text("Started.")).push(FtReply::text("Continued."));
    r.ask("first").await;
    r.clock.advance(55 * MINUTE - Duration::from_secs(1));
    let events = r.ask("second").await;
    let req = &r.ft.requests()[1];
    assert_eq!(req.method, "PUT");
    assert_eq!(req.conversation_id.as_deref(), Some("conv-1"));
    assert_eq!(req.body["query"], "second", "a continued conversation needs no recap");
    assert_eq!(answer(&events), "Continued.");
}

#[tokio::test]
async fn after_55_minutes_a_new_conversation_starts_with_the_last_6_support_turns() {
    let r = rig().await;
    for i in 1..=7 {
        r.ft.push(FtReply::text(&format!("answer {i}")));
        r.ask(&format!("question {i}")).await;
        r.clock.advance(MINUTE);
    }
    assert!(r.ft.requests()[1..].iter().all(|q| q.method == "PUT"));
    // Exactly 55 minutes since the last use (one minute passed after turn 7): too old.
    r.clock.advance(54 * MINUTE);
    r.ft.push(FtReply::text("Fresh start."));
    r.ask("question 8").await;
    let req = r.ft.requests().pop().unwrap();
    assert_eq!(req.method, "POST");
    let query = req.body["query"].as_str().unwrap();
    let expected_turns: String =
        (2..=7).map(|i| format!("User: question {i}\nSupport: answer {i}\n")).collect();
    assert_eq!(
        query,
        format!("Earlier in this conversation:\n{expected_turns}\nCurrent question: question 8")
    );
    assert_eq!(r.stored_id().await.as_deref(), Some("conv-2"), "the new id is stored");

    r.clock.advance(MINUTE);
    r.ft.push(FtReply::text("Still here."));
    r.ask("question 9").await;
    let req = r.ft.requests().pop().unwrap();
    assert_eq!((req.method.as_str(), req.conversation_id.as_deref()), ("PUT", Some("conv-2")));
}

#[tokio::test]
async fn a_conversation_forethought_no_longer_knows_is_restarted_with_the_recap() {
    let r = rig().await;
    r.ft.push(FtReply::text("Hello.")).push(FtReply::status(404, "conversation not found"));
    r.ft.push(FtReply::text("New conversation."));
    r.ask("first").await;
    let events = r.ask("second").await;
    let methods: Vec<String> = r.ft.requests().iter().map(|q| q.method.clone()).collect();
    assert_eq!(methods, ["POST", "PUT", "POST"]);
    assert!(r.ft.requests()[2].body["query"].as_str().unwrap().contains("User: first\nSupport: Hello."));
    assert_eq!(answer(&events), "New conversation.");
    assert_eq!(error_code(&events), None);
    assert_eq!(r.stored_id().await.as_deref(), Some("conv-2"));
}

#[tokio::test]
async fn prior_context_goes_in_front_of_the_query_by_default() {
    let r = rig().await;
    r.ft.push(FtReply::text("ok"));
    r.agent
        .run(r.request("did it arrive?", Some("the user scanned a FreshMart receipt")), "s".into())
        .collect::<Vec<_>>()
        .await;
    let body = &r.ft.requests()[0].body;
    assert_eq!(body["query"], "Context from earlier: the user scanned a FreshMart receipt\n\ndid it arrive?");
    assert_eq!(body["context_variables"], json!({}));
}

#[tokio::test]
async fn prior_context_can_go_in_a_context_variable() {
    let r = rig_with(|c| {
        c.prior_context = PriorContextMode::ContextVariable("ftcv_prior_context".into());
        c.context_variables.insert("ftcv_app".into(), json!("rewards"));
    })
    .await;
    r.ft.push(FtReply::text("ok"));
    r.agent
        .run(r.request("did it arrive?", Some("a FreshMart receipt")), "s".into())
        .collect::<Vec<_>>()
        .await;
    let body = &r.ft.requests()[0].body;
    assert_eq!(body["query"], "did it arrive?");
    assert_eq!(
        body["context_variables"],
        json!({"ftcv_app": "rewards", "ftcv_prior_context": "a FreshMart receipt"})
    );
}

async fn assert_failure(reply: impl Into<FtReply>, code: &str) {
    let r = rig_with(|c| c.timeouts.first_byte = Duration::from_millis(300)).await;
    r.ft.push(reply);
    let events = r.ask("where are my points").await;
    assert_eq!(error_code(&events), Some(code), "{events:?}");
    assert!(matches!(events.last(), Some(Event::Text { text, .. }) if text == SUPPORT_APOLOGY), "{events:?}");
    assert_eq!(r.stored_id().await, None, "a failed start stores no conversation");
}

#[tokio::test]
async fn a_rejected_request_is_an_error_event_and_an_apology() {
    assert_failure(FtReply::status(401, "invalid token"), "support_rejected_request").await;
}

#[tokio::test]
async fn a_vendor_server_error_is_an_error_event_and_an_apology() {
    assert_failure(FtReply::status(503, "maintenance"), "support_server_error").await;
}

#[tokio::test]
async fn a_vendor_that_never_answers_times_out() {
    assert_failure(FtReply::Hang, "support_timeout").await;
}

#[tokio::test]
async fn a_vendor_that_stalls_mid_answer_times_out_and_keeps_what_arrived() {
    let r = rig().await;
    r.ft.push(FtReply::chunks(["Part one. ", "Part two."]).stall_after(1));
    let events = r.ask("q").await;
    assert_eq!(error_code(&events), Some("support_timeout"));
    assert!(answer(&events).starts_with("Part one. "), "{events:?}");
}
