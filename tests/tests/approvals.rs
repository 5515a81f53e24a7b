//! Approvals through the real endpoint (`serve`'s code on loopback sockets, the scripted model
//! server over HTTP), against both stores: a call two agents deep paused on one instance and
//! resumed on another, a resume retried, raced and cut mid-call, and every refusal of a bad
//! answer. A side-effecting tool counts its runs: the guarantee is that an approved call runs
//! never twice (an unknown outcome is reported), and a call no one approved never.
//!
//! "Two instances" are two chat services over one store: what two Lambda instances share.

use std::sync::Arc;
use std::time::Duration;

use baton::approval::{ApprovalStore, DEFAULT_APPROVAL_TTL, Decision, ResumeError};
use baton::event::{Event, Interrupt, Status};
use baton::http::EndpointLimits;
use baton::model::scripted::{Reply, ScriptedServer};
use baton::store::{Clock, EpisodeKey, ManualClock, Store};
use baton::wiring::Backends;
use baton_tests::counting::CountingStore;
use baton_tests::stores::{StoreHarness, test_clock};
use baton_tests::tools::CountingTools;
use baton_tests::{Endpoint, start_endpoint_over};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};

baton_tests::for_both_stores!(
    a_call_two_agents_deep_pauses_and_resumes_on_another_instance_running_once,
    a_retried_resume_is_refused_and_runs_nothing_again,
    racing_resumes_run_the_approved_call_once,
    a_resume_cut_mid_call_is_not_run_again_by_its_retry,
    a_rejection_reaches_the_model_and_nothing_runs,
    bad_answers_are_refused_before_anything_runs,
    an_interrupt_answered_after_it_expired_is_gone,
    a_resume_after_the_tool_changed_is_refused_naming_it,
    a_new_message_answers_waiting_approvals_as_rejected,
    a_routing_tool_that_needs_approval_pauses_the_routed_turn_and_its_answer_is_the_answer,
    a_turn_that_does_not_pause_costs_no_approvals_store_call,
    a_resume_that_loses_its_write_to_a_dismissal_is_told_it_was_answered,
    a_resume_that_loses_its_write_to_another_resume_is_told_it_is_in_progress,
    a_stale_resume_whose_claim_lapsed_stores_nothing,
);

/// A routing entry agent whose routing tool `ask_billing` needs approval.
const ROUTING: &str = "\
entry: desk
agents:
  - name: desk
    model: desk
    instruction: Route the customer's requests.
    agents: [billing, catalog]
    routing:
      fallback: catalog
    needs_approval:
      ask_billing:
        reason: Billing questions open a case.
  - name: billing
    model: billing
    description: Invoices and refunds.
    instruction: Answer billing questions.
    output: text_and_events
  - name: catalog
    model: catalog
    description: Products and prices.
    instruction: Answer product questions.
    output: text_and_events
";

const TEAM: &str = "\
entry: lead
agents:
  - name: lead
    model: lead
    instruction: Hand offers to deals.
    agents: [deals]
  - name: deals
    model: deals
    description: Finds and clips offers.
    instruction: Clip what the user asks for.
    tools: [look, clip]
    needs_approval:
      clip:
        reason: Clipping changes the user's card.
        editable: [offer_id]
";

/// The same team after a change: `deals` lost `clip` (and its rule).
fn team_without_clip() -> String {
    let (head, _) = TEAM.split_once("    tools: [look, clip]").unwrap();
    format!("{head}    tools: [look]\n")
}

const BOUND: Duration = Duration::from_secs(20);

struct Setup<H> {
    _harness: H,
    clock: Arc<ManualClock>,
    server: ScriptedServer,
    tools: CountingTools,
    store: Arc<dyn Store>,
    a: Endpoint,
    b: Endpoint,
}

async fn endpoint(
    server: &ScriptedServer,
    yaml: &str,
    store: Arc<dyn Store>,
    tools: &CountingTools,
) -> Endpoint {
    let config = baton_tests::scripted_runtime_config(server).with_yaml(yaml, "team.yaml").unwrap();
    let backends = Backends::over_store(store.clone()).with_extension(Arc::new(tools.clone()));
    start_endpoint_over(&config, store, backends, EndpointLimits::default()).await
}

impl<H: StoreHarness> Setup<H> {
    async fn start() -> Setup<H> {
        let clock = test_clock();
        let harness = H::start(clock.clone()).await;
        let server = ScriptedServer::start().await.unwrap();
        let tools = CountingTools::new(&["look", "clip"]);
        let store = harness.store();
        let a = endpoint(&server, TEAM, store.clone(), &tools).await;
        let b = endpoint(&server, TEAM, store.clone(), &tools).await;
        Setup { _harness: harness, clock, server, tools, store, a, b }
    }

    fn clips(&self) -> usize {
        self.tools.runs("clip")
    }

    /// Turn 1 on instance A: the lead asks deals, which looks and clips at once; the clip waits.
    async fn pause(&self) -> Interrupt {
        self.server.push("lead", Reply::text("").tool_call("agent__deals", json!({"text": "clip o-1"})));
        self.server.push(
            "deals",
            Reply::text("")
                .tool_call("look", json!({"offer_id": "o-1"}))
                .tool_call("clip", json!({"offer_id": "o-1"})),
        );
        let (status, events) =
            post(&self.a, "alice", json!({"message": "clip o-1", "episode_id": "e1"})).await;
        assert_eq!(status, 200);
        let events = events.unwrap();
        let asked: Vec<&Interrupt> = events
            .iter()
            .filter_map(|e| match e {
                Event::ApprovalRequired(i) => Some(&**i),
                _ => None,
            })
            .collect();
        assert_eq!(asked.len(), 1, "{events:#?}");
        let Some(Event::Completed { status, interrupts, .. }) = events.last() else { panic!("{events:#?}") };
        assert_eq!(*status, Status::Interrupted);
        assert_eq!(interrupts.to_vec(), vec![asked[0].clone()], "completed lists what waits");
        let interrupt = asked[0].clone();
        assert_eq!((interrupt.tool.as_str(), interrupt.agent.as_str()), ("clip", "deals[1]"));
        assert_eq!(interrupt.path, ["lead", "deals[1]"]);
        assert_eq!(interrupt.reason, "Clipping changes the user's card.");
        assert_eq!(interrupt.editable, ["offer_id"]);
        let now_s = self.clock.now_ms() / 1000;
        assert_eq!(interrupt.expires_at, now_s + 24 * 3600, "the default TTL, by the store's clock");
        assert_eq!(self.clips(), 0, "the call that needs approval was not made");
        assert_eq!(self.tools.runs("look"), 1, "its sibling ran");
        interrupt
    }
}

/// POSTs `body` to `endpoint` as `user`: the status, and the events (or the JSON error).
async fn post(endpoint: &Endpoint, user: &str, body: Value) -> (u16, Result<Vec<Event>, Value>) {
    let request =
        reqwest::Client::new().post(&endpoint.url).header(baton::http::USER_HEADER, user).json(&body);
    let response = tokio::time::timeout(BOUND, request.send()).await.expect("an answer").unwrap();
    let status = response.status().as_u16();
    if status != 200 {
        return (status, Err(response.json().await.unwrap_or(Value::Null)));
    }
    let events =
        tokio::time::timeout(BOUND, sse(response).collect::<Vec<_>>()).await.expect("the stream ends");
    (status, Ok(events))
}

fn sse(response: reqwest::Response) -> impl futures::Stream<Item = Event> + Send {
    response.bytes_stream().eventsource().map(|e| {
        let e = e.expect("valid SSE framing");
        baton::event::decode_sse(&e.event, &e.data).expect("valid event")
    })
}

fn resume(id: &str, decision: Value) -> Value {
    let mut answer = json!({"interrupt_id": id});
    answer.as_object_mut().unwrap().extend(decision.as_object().unwrap().clone());
    json!({"episode_id": "e1", "resume": [answer]})
}

fn approve(id: &str) -> Value {
    resume(id, json!({"decision": "approve"}))
}

fn text(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn status(events: &[Event]) -> Status {
    match events.last() {
        Some(Event::Completed { status, .. }) => *status,
        other => panic!("the last event is {other:?}"),
    }
}

fn code(error: &Value) -> &str {
    error["error"]["code"].as_str().unwrap_or_default()
}

async fn messages(endpoint: &Endpoint, user: &str) -> Value {
    let url = format!("{}/chat/e1/messages", endpoint.url);
    let response =
        reqwest::Client::new().get(url).header(baton::http::USER_HEADER, user).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

async fn a_call_two_agents_deep_pauses_and_resumes_on_another_instance_running_once<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let interrupt = s.pause().await;
    let page = messages(&s.b, "alice").await;
    assert_eq!(page["interrupts"][0]["interrupt_id"], interrupt.interrupt_id.as_str(), "{page}");
    assert_eq!(page["messages"].as_array().unwrap().last().unwrap()["status"], "interrupted");

    s.server.push("deals", Reply::text("Clipped o-2."));
    s.server.push("lead", Reply::text("Your offer is clipped."));
    let body =
        resume(&interrupt.interrupt_id, json!({"decision": "approve", "arguments": {"offer_id": "o-2"}}));
    let (code, events) = post(&s.b, "alice", body).await;
    assert_eq!(code, 200, "{events:?}");
    let events = events.unwrap();
    assert_eq!(status(&events), Status::Ok, "{events:#?}");
    assert_eq!(text(&events), "Your offer is clipped.");
    assert_eq!(s.clips(), 1, "the approved call ran once, on instance B");
    assert_eq!(s.tools.runs("look"), 1, "the finished sibling did not run again");
    let clip = events.iter().find_map(|e| match e {
        Event::ToolResult { name, result, .. } if name == "clip" => Some(result.clone()),
        _ => None,
    });
    assert_eq!(*clip.unwrap(), json!({"done": "o-2", "run": 1}), "with the edited argument");
    // deals' model read both results in call order; the lead's read deals' answer.
    let deals = s.server.requests_for("deals");
    let last = serde_json::to_string(&deals.last().unwrap().body["messages"]).unwrap();
    assert!(last.contains(r#"\"done\":\"o-1\""#) && last.contains(r#"\"done\":\"o-2\""#), "{last}");
    let lead =
        serde_json::to_string(&s.server.requests_for("lead").last().unwrap().body["messages"]).unwrap();
    assert!(lead.contains("Clipped o-2."), "{lead}");
    let page = messages(&s.a, "alice").await;
    assert!(page.get("interrupts").is_none(), "nothing waits any more: {page}");
}

async fn a_retried_resume_is_refused_and_runs_nothing_again<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let interrupt = s.pause().await;
    s.server.push("deals", Reply::text("Clipped."));
    s.server.push("lead", Reply::text("Done."));
    let (first, _) = post(&s.a, "alice", approve(&interrupt.interrupt_id)).await;
    assert_eq!(first, 200);
    for endpoint in [&s.a, &s.b] {
        let (again, error) = post(endpoint, "alice", approve(&interrupt.interrupt_id)).await;
        assert_eq!((again, code(&error.unwrap_err())), (409, "interrupt_answered"));
    }
    assert_eq!(s.clips(), 1);
}

async fn racing_resumes_run_the_approved_call_once<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let interrupt = s.pause().await;
    s.tools.set_delay(Duration::from_millis(300));
    s.server.push("deals", Reply::text("Clipped."));
    s.server.push("lead", Reply::text("Done."));
    let body = approve(&interrupt.interrupt_id);
    let (a, b) = tokio::join!(post(&s.a, "alice", body.clone()), post(&s.b, "alice", body));
    let statuses = [a.0, b.0];
    assert!(statuses.contains(&200), "{a:?} {b:?}");
    let loser = if a.0 == 200 { b } else { a };
    assert_eq!(loser.0, 409, "{loser:?}");
    let loser_code = code(loser.1.as_ref().unwrap_err()).to_owned();
    assert!(["resume_in_progress", "interrupt_answered"].contains(&loser_code.as_str()), "{loser_code}");
    assert_eq!(s.clips(), 1, "one of two racing requests ran it");
}

async fn a_resume_cut_mid_call_is_not_run_again_by_its_retry<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let interrupt = s.pause().await;
    s.tools.set_delay(Duration::from_secs(30));
    let mut body = approve(&interrupt.interrupt_id);
    body["on_disconnect"] = json!("cancel");
    let request = reqwest::Client::new().post(&s.a.url).header(baton::http::USER_HEADER, "alice").json(&body);
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = Box::pin(sse(response));
    // Read until the approved call has started, then cut the connection mid-call.
    loop {
        let event = tokio::time::timeout(BOUND, stream.next()).await.unwrap().expect("the call starts");
        if matches!(&event, Event::ToolCallStart { name, .. } if name == "clip") {
            break;
        }
    }
    baton_tests::wait_until("the call runs", || async { s.clips() == 1 }).await;
    drop(stream);
    s.tools.set_delay(Duration::ZERO);
    // The retry: the claim was released when the cut turn was dropped; the call is not run again.
    s.server.push("deals", Reply::text("It may be clipped; please check."));
    s.server.push("lead", Reply::text("Please check your card."));
    let mut retried = None;
    for _ in 0..50 {
        let (code, events) = post(&s.b, "alice", approve(&interrupt.interrupt_id)).await;
        if code == 200 {
            retried = Some(events.unwrap());
            break;
        }
        assert_eq!(self::code(&events.unwrap_err()), "resume_in_progress");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let events = retried.expect("the claim is released within 5 s of the cut");
    assert_eq!(s.clips(), 1, "a started call never runs twice");
    let unknown = events.iter().any(|e| {
        matches!(e, Event::ToolResult { name, result, is_error: true, .. }
            if name == "clip" && result["error"]["code"] == "outcome_unknown")
    });
    assert!(unknown, "the model is told the outcome is unknown: {events:#?}");
    assert_eq!(status(&events), Status::Ok);
}

async fn a_rejection_reaches_the_model_and_nothing_runs<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let interrupt = s.pause().await;
    s.server.push("deals", Reply::text("Left it."));
    s.server.push("lead", Reply::text("Okay, nothing clipped."));
    let body = resume(&interrupt.interrupt_id, json!({"decision": "reject", "message": "wrong store"}));
    let (code, events) = post(&s.b, "alice", body).await;
    assert_eq!(code, 200);
    assert_eq!(text(&events.unwrap()), "Okay, nothing clipped.");
    assert_eq!(s.clips(), 0);
    let deals =
        serde_json::to_string(&s.server.requests_for("deals").last().unwrap().body["messages"]).unwrap();
    assert!(deals.contains("rejected_by_user") && deals.contains("wrong store"), "{deals}");
}

async fn bad_answers_are_refused_before_anything_runs<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let interrupt = s.pause().await;
    let id = interrupt.interrupt_id.as_str();
    let requests_before = s.server.requests_for("deals").len();
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        ("alice", approve("int_unknown"), 404, "interrupt_not_found"),
        ("bob", approve(id), 404, "interrupt_not_found"),
        ("alice", json!({"episode_id": "e1", "message": "hi", "resume": []}), 400, "invalid_resume"),
        ("alice", json!({"resume": [{"interrupt_id": id, "decision": "approve"}]}), 400, "invalid_resume"),
        ("alice", resume(id, json!({"decision": "maybe"})), 400, "invalid_resume"),
        ("alice", resume(id, json!({"decision": "approve", "mesage": "typo"})), 400, "invalid_resume"),
        (
            "alice",
            json!({"episode_id": "e1", "resume": [{"interrupt_id": id, "decision": "approve"},
            {"interrupt_id": id, "decision": "reject"}]}),
            400,
            "invalid_resume",
        ),
        (
            "alice",
            resume(id, json!({"decision": "approve", "arguments": {"price": 1}})),
            400,
            "invalid_arguments",
        ),
        (
            "alice",
            resume(id, json!({"decision": "approve", "arguments": {"offer_id": "nope"}})),
            400,
            "invalid_arguments",
        ),
    ];
    for (user, body, want_status, want_code) in cases {
        let (got, error) = post(&s.a, user, body.clone()).await;
        let error = error.expect_err("refused");
        assert_eq!((got, code(&error)), (want_status, want_code), "{body}: {error}");
        if want_code == "invalid_arguments" {
            let message = error["error"]["message"].as_str().unwrap();
            assert!(message.contains("offer_id") || message.contains("price"), "names the field: {message}");
        }
    }
    assert_eq!(s.clips(), 0);
    assert_eq!(s.server.requests_for("deals").len(), requests_before, "no model was called");
    // Still pending, and still answerable.
    s.server.push("deals", Reply::text("Clipped."));
    s.server.push("lead", Reply::text("Done."));
    let (ok, _) = post(&s.b, "alice", approve(id)).await;
    assert_eq!(ok, 200);
    assert_eq!(s.clips(), 1);
}

async fn an_interrupt_answered_after_it_expired_is_gone<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let interrupt = s.pause().await;
    s.clock.advance(Duration::from_secs(24 * 3600 + 1));
    let (got, error) = post(&s.a, "alice", approve(&interrupt.interrupt_id)).await;
    assert_eq!((got, code(&error.unwrap_err())), (410, "interrupt_expired"));
    assert_eq!(s.clips(), 0);
    let key = EpisodeKey::new("alice", "e1").unwrap();
    assert!(s.store.approvals(&key).await.unwrap().is_some(), "the record outlives its interrupts");
}

async fn a_resume_after_the_tool_changed_is_refused_naming_it<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let interrupt = s.pause().await;
    let changed = endpoint(&s.server, &team_without_clip(), s.store.clone(), &s.tools).await;
    let (got, error) = post(&changed, "alice", approve(&interrupt.interrupt_id)).await;
    let error = error.unwrap_err();
    assert_eq!((got, code(&error)), (409, "config_changed"), "{error}");
    assert!(error["error"]["message"].as_str().unwrap().contains("`clip`"), "{error}");
    assert_eq!(s.clips(), 0);
    // The refusal released its claim: on the unchanged deployment the answer still works.
    s.server.push("deals", Reply::text("Clipped."));
    s.server.push("lead", Reply::text("Done."));
    assert_eq!(post(&s.a, "alice", approve(&interrupt.interrupt_id)).await.0, 200);
    assert_eq!(s.clips(), 1);
}

async fn a_new_message_answers_waiting_approvals_as_rejected<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let interrupt = s.pause().await;
    s.server.push("lead", Reply::text("Hello!"));
    let (ok, events) = post(&s.b, "alice", json!({"message": "never mind", "episode_id": "e1"})).await;
    assert_eq!((ok, status(&events.unwrap())), (200, Status::Ok));
    let (got, error) = post(&s.a, "alice", approve(&interrupt.interrupt_id)).await;
    let error = error.unwrap_err();
    assert_eq!((got, code(&error)), (409, "interrupt_answered"));
    assert!(error["error"]["message"].as_str().unwrap().contains("dismissed"), "{error}");
    assert_eq!(s.clips(), 0);
}

/// A resume that read the record just before a new message dismissed its interrupt: its
/// conditional write loses, and the answer says what happened (answered), not "try again".
async fn a_resume_that_loses_its_write_to_a_dismissal_is_told_it_was_answered<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let interrupt = s.pause().await;
    let key = EpisodeKey::new("alice", "e1").unwrap();
    let counting = CountingStore::new(s.store.clone());
    let dismissing = (ApprovalStore::new(s.store.clone(), DEFAULT_APPROVAL_TTL), key.clone());
    counting.before_next_save_approvals(move || {
        Box::pin(async move { assert_eq!(dismissing.0.dismiss(&dismissing.1).await.unwrap(), 1) })
    });
    let late = ApprovalStore::new(counting.clone(), DEFAULT_APPROVAL_TTL);
    let answers = [(interrupt.interrupt_id.clone(), Decision::Approve { arguments: None })];
    let got = late.claim(&key, &answers, "late", u64::MAX).await;
    assert!(matches!(&got, Err(ResumeError::Answered(_, how)) if how == "dismissed"), "{got:?}");
    assert_eq!(counting.calls_of("save_approvals"), 1, "the lost write is not made again");
    assert_eq!(s.clips(), 0);
}

/// A resume whose write loses to another resume's claim is told another request resumes now.
async fn a_resume_that_loses_its_write_to_another_resume_is_told_it_is_in_progress<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let interrupt = s.pause().await;
    let key = EpisodeKey::new("alice", "e1").unwrap();
    let answers = [(interrupt.interrupt_id.clone(), Decision::Approve { arguments: None })];
    let counting = CountingStore::new(s.store.clone());
    let winner = (ApprovalStore::new(s.store.clone(), DEFAULT_APPROVAL_TTL), key.clone(), answers.clone());
    counting.before_next_save_approvals(move || {
        Box::pin(async move {
            winner.0.claim(&winner.1, &winner.2, "first", u64::MAX).await.unwrap();
        })
    });
    let loser = ApprovalStore::new(counting.clone(), DEFAULT_APPROVAL_TTL);
    let got = loser.claim(&key, &answers, "second", u64::MAX).await;
    assert!(matches!(got, Err(ResumeError::InProgress)), "{got:?}");
}

/// Instance A resumes and stalls inside the approved call past its claim; B takes the resume
/// over (the call is not run again: `outcome_unknown`) and answers. When A wakes, it stores
/// nothing: the conversation holds B's answer only, and A's client is told why.
async fn a_stale_resume_whose_claim_lapsed_stores_nothing<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let interrupt = s.pause().await;
    s.tools.set_delay(Duration::from_secs(3));
    let request = reqwest::Client::new()
        .post(&s.a.url)
        .header(baton::http::USER_HEADER, "alice")
        .json(&approve(&interrupt.interrupt_id));
    let stale = tokio::spawn(async move {
        let response = request.send().await.unwrap();
        tokio::time::timeout(BOUND, sse(response).collect::<Vec<_>>()).await.expect("A's stream ends")
    });
    baton_tests::wait_until("A runs the approved call", || async { s.clips() == 1 }).await;
    // Past A's claim (the turn deadline) by the store's clock: B may take the resume over.
    s.clock.advance(Duration::from_secs(3600));
    s.server.push("deals", Reply::text("It may be clipped; please check."));
    s.server.push("lead", Reply::text("Please check your card."));
    let (code, events) = post(&s.b, "alice", approve(&interrupt.interrupt_id)).await;
    assert_eq!(code, 200, "{events:?}");
    assert_eq!(text(&events.unwrap()), "Please check your card.");
    s.server.push("deals", Reply::text("Clipped o-1."));
    s.server.push("lead", Reply::text("Stale answer."));
    let stale = stale.await.unwrap();
    assert_eq!(status(&stale), Status::Error, "{stale:#?}");
    assert!(stale.iter().any(|e| matches!(e, Event::Error { code, .. } if code == "resume_superseded")));
    assert_eq!(s.clips(), 1, "the call ran once");
    let page = messages(&s.b, "alice").await;
    let stored = page["messages"].to_string();
    assert!(stored.contains("Please check your card."), "{page}");
    assert!(!stored.contains("Stale answer") && !stored.contains("could not be saved"), "{page}");
}

async fn a_routing_tool_that_needs_approval_pauses_the_routed_turn_and_its_answer_is_the_answer<
    H: StoreHarness,
>() {
    let s = Setup::<H>::start().await;
    let desk = endpoint(&s.server, ROUTING, s.store.clone(), &s.tools).await;
    let routed =
        Reply::text("").tool_call("ask_billing", json!({"query": "where is my refund", "intent_count": 1}));
    s.server.push("desk", routed);
    let (_, events) =
        post(&desk, "alice", json!({"message": "where is my refund", "episode_id": "e1"})).await;
    let events = events.unwrap();
    let Some(Event::Completed { status: Status::Interrupted, interrupts, .. }) = events.last() else {
        panic!("{events:#?}")
    };
    assert_eq!((interrupts[0].tool.as_str(), interrupts[0].agent.as_str()), ("ask_billing", "desk"));
    assert!(s.server.requests_for("billing").is_empty(), "the routed agent did not run");
    s.server.push("billing", Reply::text("Your refund was sent on Monday."));
    let (code, events) = post(&desk, "alice", approve(&interrupts[0].interrupt_id)).await;
    assert_eq!(code, 200);
    let events = events.unwrap();
    assert_eq!(status(&events), Status::Ok, "{events:#?}");
    assert_eq!(text(&events), "Your refund was sent on Monday.");
    assert_eq!(
        s.server.requests_for("desk").len(),
        1,
        "the routed answer is the answer: no second desk call"
    );
}

async fn a_turn_that_does_not_pause_costs_no_approvals_store_call<H: StoreHarness>() {
    let s = Setup::<H>::start().await;
    let store = baton_tests::counting::CountingStore::new(s.store.clone());
    let counted = endpoint(&s.server, TEAM, store.clone(), &s.tools).await;
    s.server.push("lead", Reply::text("Hello!"));
    let (ok, events) = post(&counted, "alice", json!({"message": "hi", "episode_id": "e1"})).await;
    assert_eq!((ok, status(&events.unwrap())), (200, Status::Ok));
    messages(&counted, "alice").await;
    s.server.push("lead", Reply::text("Hello again!"));
    assert_eq!(post(&counted, "alice", json!({"message": "hi again", "episode_id": "e1"})).await.0, 200);
    assert_eq!(store.calls_of("approvals") + store.calls_of("save_approvals"), 0, "{:?}", store.calls());
}
