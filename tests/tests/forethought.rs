//! The Forethought support agent against the Forethought test server over real HTTP: the
//! documented request, chunked and JSON answers, conversation continuity with an injected clock,
//! `prior_context`, and vendor failures.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use baton::agent::{Agent, AgentRequest};
use baton::event::Event;
use baton_reference::support::SUPPORT_APOLOGY;
use baton_reference::support::agent::ForethoughtAgent;
use baton_reference::support::forethought::{ForethoughtClient, ForethoughtConfig, PriorContextMode};
use baton_reference::support::scripted::{ForethoughtServer, FtReply};
use baton_reference::support::sessions::{ManualClock, MemorySupportSessions, SupportSessions};
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
        self.sessions.conversation("u1", "ep1", "support").await.unwrap().map(|c| c.conversation_id)
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

// The documented answer: `widget_components` (see the "Solve API Developer Reference").

/// The reference's example body, as it prints it: a `button` component asking for a branch.
fn documented_button_example() -> serde_json::Value {
    json!({
        "widget_components": [
            {
                "type": "button",
                "message": "<p style=\"\" dir=\"ltr\">please select one branch</p>",
                "buttons": [
                    {"display_name": "branch 1", "value": "15442886_a721_4a02_9b85_9ff7cf7fc051"},
                    {"display_name": "branch 2", "value": "824e5122_2e92_46f4_bfd8_a96e1782295b"}
                ],
                "output_variable": "27d5459e_5110_42a7_9ce1_5a844230639c"
            }
        ],
        "conversation_id": "CONVERSATION_ID"
    })
}

fn choices_of(events: &[Event]) -> Vec<&baton::event::Choices> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Choices { choices, .. } => Some(choices.as_ref()),
            _ => None,
        })
        .collect()
}

fn meta_of(events: &[Event]) -> serde_json::Value {
    events
        .iter()
        .find_map(|e| match e {
            Event::AnswerMeta { meta, .. } => Some(serde_json::Value::Object(meta.as_ref().clone())),
            _ => None,
        })
        .expect("an answer_meta event")
}

#[tokio::test]
async fn conformance_the_documented_button_example_reads_as_text_and_choices() {
    let r = rig().await;
    r.ft.push(FtReply::body(documented_button_example()));
    let events = r.ask("which branch?").await;
    assert_eq!(events[0], Event::ResponseId { agent: "support[1]".into(), id: "ft_CONVERSATION_ID".into() });
    assert_eq!(answer(&events), "please select one branch\n1. branch 1\n2. branch 2");
    let choices = choices_of(&events);
    assert_eq!(choices.len(), 1);
    assert_eq!(choices[0].prompt, "please select one branch");
    let labels: Vec<(&str, &str)> =
        choices[0].options.iter().map(|o| (o.label.as_str(), o.value.as_str())).collect();
    assert_eq!(
        labels,
        [
            ("branch 1", "15442886_a721_4a02_9b85_9ff7cf7fc051"),
            ("branch 2", "824e5122_2e92_46f4_bfd8_a96e1782295b")
        ]
    );
    assert_eq!(meta_of(&events), json!({"feedback_ref": "CONVERSATION_ID"}));
    assert_eq!(error_code(&events), None);
    assert_eq!(r.stored_id().await.as_deref(), Some("CONVERSATION_ID"));
}

#[tokio::test]
async fn a_pick_by_number_or_label_continues_the_conversation_with_the_value() {
    for (reply, picked) in [("2", "branch 2"), ("  Branch 1 ", "branch 1"), ("2.", "branch 2")] {
        let r = rig().await;
        r.ft.push(FtReply::body(documented_button_example())).push(FtReply::json("Branch noted."));
        r.ask("which branch?").await;
        let events = r.ask(reply).await;
        let req = &r.ft.requests()[1];
        assert_eq!((req.method.as_str(), req.conversation_id.as_deref()), ("PUT", Some("CONVERSATION_ID")));
        let value = if picked == "branch 1" {
            "15442886_a721_4a02_9b85_9ff7cf7fc051"
        } else {
            "824e5122_2e92_46f4_bfd8_a96e1782295b"
        };
        assert_eq!(req.body["query"], picked, "{reply:?}");
        assert_eq!(req.body["context_variables"], json!({"27d5459e_5110_42a7_9ce1_5a844230639c": value}));
        assert_eq!(answer(&events), "Branch noted.");
        // The prompt was answered: the same words again are an ordinary query.
        r.ft.push(FtReply::json("ok"));
        r.ask(reply).await;
        assert_eq!(r.ft.requests()[2].body["context_variables"], json!({}), "{reply:?}");
    }
}

#[tokio::test]
async fn a_reply_that_matches_no_option_is_an_ordinary_query() {
    let r = rig().await;
    r.ft.push(FtReply::body(documented_button_example())).push(FtReply::json("Points take 48 hours."));
    r.ask("which branch?").await;
    r.ask("3").await;
    let req = &r.ft.requests()[1];
    assert_eq!((req.method.as_str(), req.body["query"].as_str()), ("PUT", Some("3")));
    assert_eq!(req.body["context_variables"], json!({}));
}

#[tokio::test]
async fn a_form_lists_its_fields_and_the_reply_fills_them() {
    let r = rig().await;
    r.ft.push(FtReply::widgets(json!([{
        "type": "form", "message": "<p>We need two details</p>", "output_variable": "cv_form",
        "form_fields": [{"display_name": "Email", "output_variable": "cv_email"}, {"display_name": "Receipt number"}]
    }])))
    .push(FtReply::json("Thanks."));
    let events = r.ask("my receipt is missing").await;
    assert!(answer(&events).starts_with("We need two details\n- Email\n- Receipt number"), "{events:?}");
    let fields: Vec<(&str, &str)> =
        choices_of(&events)[0].fields.iter().map(|f| (f.name.as_str(), f.label.as_str())).collect();
    assert_eq!(fields, [("cv_email", "Email"), ("cv_form", "Receipt number")]);
    r.ask("kim@example.com\nR-42").await;
    assert_eq!(
        r.ft.requests()[1].body["context_variables"],
        json!({"cv_email": "kim@example.com", "cv_form": "R-42"})
    );
}

#[tokio::test]
async fn each_component_is_its_own_text_event_and_unknown_types_are_skipped() {
    let r = rig().await;
    r.ft.push(FtReply::widgets(json!([
        {"type": "text", "message": "<p>Receipts scan best&nbsp;in <b>good</b> light.</p>"},
        {"type": "carousel", "message": "<p>not shown</p>"},
        {"type": "text", "message": "<ol><li>Flatten it</li><li>Try again</li></ol><p>See <a href=\"https://help.example.com/scan\">the guide</a>.</p>"}
    ])));
    let events = r.ask("my receipt didn't scan").await;
    let texts: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        texts,
        [
            "Receipts scan best in good light.",
            "\n\n1. Flatten it\n2. Try again\n\nSee the guide (https://help.example.com/scan)."
        ]
    );
    assert_eq!(error_code(&events), None);
}

#[tokio::test]
async fn hostile_vendor_html_reaches_the_caller_as_inert_text() {
    let r = rig().await;
    r.ft.push(FtReply::widgets(json!([{
        "type": "button",
        "message": "<p onclick=\"steal()\">Hi <script>alert(1)</script><img src=x onerror=alert(2) alt=\"\">there</p>",
        "buttons": [{"display_name": "<b onmouseover=alert(3)>ok</b>", "value": "v"}],
        "output_variable": "cv"
    }, {
        "type": "text", "message": "<a href=\"javascript:alert(4)\">click me</a> &lt;script&gt;"
    }])));
    let events = r.ask("hi").await;
    let text = answer(&events);
    assert_eq!(text, "Hi there\n1. ok\n\nclick me <script>");
    for gone in ["alert", "onclick", "onerror", "javascript", "<b", "<p"] {
        assert!(!text.contains(gone), "{gone} in {text:?}");
    }
    assert_eq!(choices_of(&events)[0].options[0].label, "ok");
}

#[tokio::test]
async fn the_outcome_is_reported_and_should_escalate_is_a_handoff() {
    let r = rig().await;
    r.ft.push(FtReply::body(json!({
        "conversation_id": "c-7",
        "widget_components": [{"type": "text", "message": "<p>Let me get a person.</p>"}],
        "is_solved": false, "should_escalate": true, "intent": "missing_points", "workflow_id": "wf-9"
    })));
    let events = r.ask("my points are missing").await;
    let handoffs: Vec<&Event> = events.iter().filter(|e| matches!(e, Event::Handoff { .. })).collect();
    assert_eq!(
        handoffs,
        [&Event::Handoff { agent: "support[1]".into(), reason: Some("should_escalate".into()) }]
    );
    assert_eq!(
        meta_of(&events),
        json!({"is_solved": false, "should_escalate": true, "intent": "missing_points", "workflow_id": "wf-9", "feedback_ref": "c-7"})
    );
    r.ft.push(FtReply::json("Solved."));
    let calm = r.ask("thanks").await;
    assert!(!calm.iter().any(|e| matches!(e, Event::Handoff { .. })), "no handoff without should_escalate");
}

#[tokio::test]
async fn an_answer_with_nothing_to_show_is_an_in_band_error_never_silence() {
    let r = rig().await;
    r.ft.push(FtReply::widgets(json!([{"type": "text", "message": "<p> <script>x</script></p>"}])));
    let events = r.ask("hello?").await;
    assert_eq!(error_code(&events), Some("support_empty_answer"));
    assert_eq!(answer(&events), baton_reference::support::SUPPORT_EMPTY);
    assert_eq!(r.stored_id().await.as_deref(), Some("conv-1"), "the conversation is still kept");
}

#[tokio::test]
async fn a_body_of_neither_shape_is_an_invalid_response() {
    let r = rig().await;
    r.ft.push(FtReply::body(json!({"answer": "hi"})));
    let events = r.ask("hello?").await;
    assert_eq!(error_code(&events), Some("support_invalid_response"));
    assert!(matches!(events.last(), Some(Event::Text { text, .. }) if text == SUPPORT_APOLOGY));
}

#[tokio::test]
async fn the_older_response_shape_still_works() {
    let r = rig().await;
    r.ft.push(FtReply::response_json("Points arrive within 48 hours."));
    let events = r.ask("where are my points").await;
    assert_eq!(answer(&events), "Points arrive within 48 hours.");
    assert_eq!(
        meta_of(&events),
        json!({"is_solved": false, "should_escalate": false, "feedback_ref": "conv-1"})
    );
}

#[tokio::test]
async fn a_documented_body_past_max_answer_bytes_is_an_error() {
    let r = rig().await;
    let big = "x".repeat(baton_reference::support::forethought::MAX_ANSWER_BYTES);
    r.ft.push(FtReply::json(&big));
    let events = r.ask("q").await;
    assert_eq!(error_code(&events), Some("support_invalid_response"));
}

// The reference's rules, as the test server keeps them.

#[tokio::test]
async fn the_server_takes_one_request_per_conversation_at_a_time() {
    let ft = ForethoughtServer::start().await.unwrap();
    let client = ForethoughtClient::new(forethought_config(&ft)).unwrap();
    let request = baton_reference::support::forethought::SolveRequest {
        query: "q".into(),
        user_id: "u1".into(),
        context_variables: Default::default(),
    };
    ft.push(FtReply::json("started"));
    let started: Vec<_> = client.start(&request).collect().await;
    assert!(started.iter().all(Result::is_ok));
    ft.push(FtReply::json("slow").delayed(Duration::from_millis(300))).push(FtReply::json("second"));
    let (first, second) =
        tokio::join!(client.continue_conversation("conv-1", &request).collect::<Vec<_>>(), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            client.continue_conversation("conv-1", &request).collect::<Vec<_>>().await
        });
    assert_eq!(first[0].as_ref().unwrap().text, "slow");
    let refused = second[0].as_ref().unwrap_err();
    assert!(refused.is_conversation_busy(), "{refused:?}");
    assert_eq!(refused.code(), "support_conversation_busy");
    assert_eq!(ft.requests()[2].refused, Some(409));
    // Once the first is answered the conversation takes requests again.
    let third: Vec<_> = client.continue_conversation("conv-1", &request).collect().await;
    assert_eq!(third[0].as_ref().unwrap().text, "second");
}

#[tokio::test]
async fn a_conversation_ends_after_an_hour_without_activity_and_the_agent_starts_anew() {
    let clock = Arc::new(ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)));
    let ft = ForethoughtServer::start_with_clock(clock.clone()).await.unwrap();
    let mut config = forethought_config(&ft);
    // Continue whatever is stored, so the server's rule is what ends the conversation.
    config.continue_window = Duration::from_secs(24 * 3600);
    let sessions = Arc::new(MemorySupportSessions::default());
    let agent =
        ForethoughtAgent::new(ForethoughtClient::new(config).unwrap(), sessions.clone(), clock.clone());
    let ask = |q: &str| {
        let request = AgentRequest {
            user_id: "u1".into(),
            episode_id: "ep1".into(),
            query: q.into(),
            ..Default::default()
        };
        agent.run(request, "support[1]".into()).collect::<Vec<Event>>()
    };
    ft.push(FtReply::json("one")).push(FtReply::json("two")).push(FtReply::json("three"));
    ask("first").await;
    clock.advance(59 * MINUTE);
    assert_eq!(answer(&ask("second").await), "two");
    clock.advance(60 * MINUTE);
    let events = ask("third").await;
    let kinds: Vec<(String, Option<u16>)> =
        ft.requests().iter().map(|q| (q.method.clone(), q.refused)).collect();
    assert_eq!(
        kinds,
        [("POST".into(), None), ("PUT".into(), None), ("PUT".into(), Some(404)), ("POST".into(), None)]
    );
    assert_eq!(answer(&events), "three");
    assert_eq!(
        sessions.conversation("u1", "ep1", "support").await.unwrap().unwrap().conversation_id,
        "conv-2"
    );
}

#[tokio::test]
async fn csat_goes_to_the_conversations_csat_endpoint() {
    let ft = ForethoughtServer::start().await.unwrap();
    let client = ForethoughtClient::new(forethought_config(&ft)).unwrap();
    ft.push(FtReply::json("hi"));
    let request = baton_reference::support::forethought::SolveRequest {
        query: "q".into(),
        user_id: "u1".into(),
        context_variables: Default::default(),
    };
    let _: Vec<_> = client.start(&request).collect().await;
    client.csat("conv-1", 5).await.unwrap();
    let sent = ft.requests().pop().unwrap();
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str(), sent.refused),
        ("POST", "/solve/api/v1/conversation/conv-1/csat", None)
    );
    assert_eq!(sent.body, json!({"rating": 5}));
    assert_eq!(sent.authorization.as_deref(), Some(format!("Bearer {FT_TOKEN}").as_str()));
    let unknown = client.csat("conv-404", 1).await.unwrap_err();
    assert_eq!(unknown.code(), "support_rejected_request");
}
