//! A call held for approval two agents deep: the pause, what is stored, and resumes that
//! approve, reject, retry, race and change the configuration; on the embedded store and
//! in-process scripted models (the HTTP path and DynamoDB: `tests/tests/approvals.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use super::record::PendingApprovals;
use super::*;
use crate::agent::{Agent, ApprovalPolicy, ApprovalRule, LlmAgent, LoopLimits};
use crate::agent_tool::{AgentTool, AgentToolOptions, OutputMode};
use crate::event::{Event, Status};
use crate::history::History;
use crate::model::scripted::{Reply, ScriptedModel};
use crate::orchestrator::{Orchestrator, TurnOptions, TurnRequest};
use crate::store::embedded::EmbeddedStore;
use crate::store::{EpisodeKey, Store, SystemClock};
use crate::tool::testing::FnTool;
use crate::tool::{JsonSchema, Tool, ToolRegistry};

/// A tool with a side effect: it counts its runs in `runs`.
fn counting(name: &str, runs: Arc<AtomicUsize>) -> Arc<dyn Tool> {
    let parameters =
        json!({"type": "object", "properties": {"offer_id": {"type": "string"}}, "required": ["offer_id"]});
    FnTool::new(name, "Clips an offer to the user's card.", parameters, move |arguments, _| {
        let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
        async move { Ok(json!({"clipped": arguments["offer_id"], "runs": n})) }
    })
}

struct Team {
    orchestrator: Arc<Orchestrator>,
    lead: Arc<ScriptedModel>,
    deals: Arc<ScriptedModel>,
    clips: Arc<AtomicUsize>,
    looks: Arc<AtomicUsize>,
}

fn limits() -> LoopLimits {
    LoopLimits { max_steps: 4, tool_timeout: Duration::from_secs(5), ..LoopLimits::default() }
}

/// lead → agent__deals → {look, clip}; `clip` needs approval (offer_id editable).
fn team(rule_schema: Option<Value>) -> Team {
    let (clips, looks) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let deals_model = Arc::new(ScriptedModel::new("deals-model", None));
    let lead_model = Arc::new(ScriptedModel::new("lead-model", None));
    let tools: Vec<Arc<dyn Tool>> = vec![counting("look", looks.clone()), counting("clip", clips.clone())];
    let rule = ApprovalRule {
        when: rule_schema.map(|s| Arc::new(JsonSchema::compile(&s).unwrap())),
        reason: "Clipping changes the card.".into(),
        editable: vec!["offer_id".into()],
    };
    let deals = LlmAgent::new(
        "deals",
        "find deals",
        deals_model.clone(),
        Arc::new(ToolRegistry::new(tools).unwrap()),
        limits(),
    )
    .with_approvals(Arc::new(ApprovalPolicy::new([("clip".to_owned(), rule)].into())));
    let options = AgentToolOptions { output: OutputMode::Events, ..AgentToolOptions::default() };
    let deals: Arc<dyn Agent> = Arc::new(deals);
    let deals_tool: Arc<dyn Tool> = Arc::new(AgentTool::new(deals.clone(), options).unwrap());
    let lead = LlmAgent::new(
        "lead",
        "lead",
        lead_model.clone(),
        Arc::new(ToolRegistry::new(vec![deals_tool.clone()]).unwrap()),
        limits(),
    )
    .with_child(deals_tool.name(), deals);
    let orchestrator = Arc::new(Orchestrator::new(Arc::new(lead) as Arc<dyn Agent>, "lead-model"));
    Team { orchestrator, lead: lead_model, deals: deals_model, clips, looks }
}

struct Place {
    _dir: tempfile::TempDir,
    history: History,
    approvals: ApprovalStore,
    key: EpisodeKey,
}

fn place() -> Place {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(EmbeddedStore::open(dir.path().join("s.redb"), Arc::new(SystemClock)).unwrap());
    let history = History::new(store.clone(), 40);
    let approvals = ApprovalStore::new(store, DEFAULT_APPROVAL_TTL);
    Place { _dir: dir, history, approvals, key: EpisodeKey::new("u1", "e1").unwrap() }
}

async fn turn(team: &Team, place: &Place, message: &str, approvals: TurnApprovals) -> Vec<Event> {
    let mut turn = TurnRequest::new("e1", crate::store::new_turn_id(), "u1", message);
    turn.approvals = approvals;
    let options = TurnOptions { history: Some((&place.history, None)), deadline: None, cancel: None };
    team.orchestrator.start(turn, options).await.unwrap().events.collect().await
}

fn completed(events: &[Event]) -> (Status, Vec<Interrupt>) {
    match events.last() {
        Some(Event::Completed { status, interrupts, .. }) => (*status, interrupts.to_vec()),
        other => panic!("no completed at the end: {other:?}"),
    }
}

/// Turn 1: the lead calls deals, which calls look and clip at once; clip waits.
async fn paused(team: &Team, place: &Place) -> Interrupt {
    team.lead.push(Reply::text("").tool_call("agent__deals", json!({"text": "clip the coffee offer"})));
    team.deals.push(
        Reply::text("")
            .tool_call("look", json!({"offer_id": "o-1"}))
            .tool_call("clip", json!({"offer_id": "o-1"})),
    );
    let events = turn(team, place, "clip the coffee offer", place.approvals.pausing()).await;
    let (status, interrupts) = completed(&events);
    assert_eq!(status, Status::Interrupted, "{events:#?}");
    assert_eq!(interrupts.len(), 1);
    let interrupt = interrupts[0].clone();
    assert_eq!((interrupt.tool.as_str(), interrupt.agent.as_str()), ("clip", "deals[1]"));
    assert_eq!(interrupt.path, ["lead", "deals[1]"]);
    assert_eq!(interrupt.arguments, json!({"offer_id": "o-1"}));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::ApprovalRequired(i) if i.interrupt_id == interrupt.interrupt_id)),
        "the client is told before completed"
    );
    assert_eq!(team.clips.load(Ordering::SeqCst), 0, "a call that needs approval is not made");
    assert_eq!(team.looks.load(Ordering::SeqCst), 1, "its sibling ran");
    interrupt
}

async fn resume(
    team: &Team,
    place: &Place,
    answers: Vec<(String, Decision)>,
) -> Result<Vec<Event>, ResumeError> {
    let entry = team.orchestrator.entry().clone();
    let check = |paused: &_, decisions: &_| entry.check_resume(paused, decisions);
    let approvals = place.approvals.resume(&place.key, answers, "req", u64::MAX, check).await?;
    Ok(turn(team, place, "answers", approvals).await)
}

#[tokio::test]
async fn an_approved_call_deep_in_the_team_runs_once_and_each_loop_goes_on_bottom_up() {
    let (team, place) = (team(None), place());
    let interrupt = paused(&team, &place).await;
    let stored = place.approvals.pending(&place.key).await.unwrap();
    assert_eq!(stored, vec![interrupt.clone()], "the record lists what waits");
    let reply = place.history.store().recent_messages(&place.key, 10).await.unwrap();
    assert_eq!(reply.last().unwrap().status, Status::Interrupted, "history shows the turn as interrupted");

    team.deals.push(Reply::text("Clipped o-2."));
    team.lead.push(Reply::text("Done: your offer is clipped."));
    let edits = json!({"offer_id": "o-2"}).as_object().cloned();
    let events =
        resume(&team, &place, vec![(interrupt.interrupt_id.clone(), Decision::Approve { arguments: edits })])
            .await
            .unwrap();
    assert_eq!(completed(&events).0, Status::Ok, "{events:#?}");
    assert_eq!(team.clips.load(Ordering::SeqCst), 1);
    assert_eq!(team.looks.load(Ordering::SeqCst), 1, "the finished sibling is not run again");
    // deals read both results, in call order, the clip with the edited argument.
    let deals_request = team.deals.requests().last().cloned().unwrap();
    let results: Vec<Value> = deals_request
        .messages
        .iter()
        .filter_map(|m| match m {
            crate::model::Message::Tool { content, .. } => serde_json::from_str(content).ok(),
            _ => None,
        })
        .collect();
    assert_eq!(results, vec![json!({"clipped": "o-1", "runs": 1}), json!({"clipped": "o-2", "runs": 1})]);
    // The lead read deals' answer as its tool result, and answered.
    let lead_request = team.lead.requests().last().cloned().unwrap();
    assert!(format!("{:?}", lead_request.messages).contains("Clipped o-2."));
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            Event::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Done: your offer is clipped.");
    // The resumed instance kept its name.
    assert!(events.iter().any(|e| matches!(e, Event::AgentStarted { agent, .. } if agent == "deals[1]")));

    // A retry of the same answer: refused, nothing run again.
    let again =
        resume(&team, &place, vec![(interrupt.interrupt_id.clone(), Decision::Approve { arguments: None })])
            .await;
    assert!(matches!(again, Err(ResumeError::Answered(..))), "{again:?}");
    assert_eq!(team.clips.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_rejection_tells_the_model_what_the_person_said_and_nothing_runs() {
    let (team, place) = (team(None), place());
    let interrupt = paused(&team, &place).await;
    team.deals.push(Reply::text("Not clipped."));
    team.lead.push(Reply::text("Okay, I left it."));
    let decision = Decision::Reject { message: Some("not that one".into()) };
    let events = resume(&team, &place, vec![(interrupt.interrupt_id.clone(), decision)]).await.unwrap();
    assert_eq!(completed(&events).0, Status::Ok);
    assert_eq!(team.clips.load(Ordering::SeqCst), 0);
    let seen = format!("{:?}", team.deals.requests().last().unwrap().messages);
    assert!(seen.contains("rejected_by_user") && seen.contains("not that one"), "{seen}");
}

#[tokio::test]
async fn a_rule_on_the_arguments_holds_back_only_the_calls_it_matches() {
    let (team, place) = (
        team(Some(json!({"properties": {"offer_id": {"const": "o-9"}}, "required": ["offer_id"]}))),
        place(),
    );
    team.lead.push(Reply::text("").tool_call("agent__deals", json!({"text": "clip"})));
    team.deals.push(Reply::text("").tool_call("clip", json!({"offer_id": "o-1"})));
    team.deals.push(Reply::text("Clipped."));
    team.lead.push(Reply::text("Done."));
    let events = turn(&team, &place, "clip", place.approvals.pausing()).await;
    assert_eq!(completed(&events).0, Status::Ok, "o-1 does not match the rule");
    assert_eq!(team.clips.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn where_no_one_can_approve_the_call_is_refused_with_a_clear_error_result() {
    let (team, place) = (team(None), place());
    team.lead.push(Reply::text("").tool_call("agent__deals", json!({"text": "clip"})));
    team.deals.push(Reply::text("").tool_call("clip", json!({"offer_id": "o-1"})));
    team.deals.push(Reply::text("I could not clip it."));
    team.lead.push(Reply::text("Sorry."));
    let events = turn(&team, &place, "clip", TurnApprovals::default()).await;
    assert_eq!(completed(&events).0, Status::Ok);
    assert_eq!(team.clips.load(Ordering::SeqCst), 0);
    let refused = events.iter().find_map(|e| match e {
        Event::ToolResult { name, result, is_error: true, .. } if name == "clip" => Some(result.clone()),
        _ => None,
    });
    assert_eq!(refused.unwrap()["error"]["code"], "approval_required");
}

#[tokio::test]
async fn answers_are_checked_before_anything_runs() {
    let (team, place) = (team(None), place());
    let interrupt = paused(&team, &place).await;
    let id = interrupt.interrupt_id.clone();
    // Unknown id; a field that may not be edited; a schema violation of an editable field.
    let unknown =
        resume(&team, &place, vec![("int_nope".into(), Decision::Approve { arguments: None })]).await;
    assert!(matches!(unknown, Err(ResumeError::NotFound(_))), "{unknown:?}");
    let edits = json!({"price": 1}).as_object().cloned();
    let not_editable =
        resume(&team, &place, vec![(id.clone(), Decision::Approve { arguments: edits })]).await;
    assert!(
        matches!(&not_editable, Err(ResumeError::InvalidArguments(m)) if m.contains("price")),
        "{not_editable:?}"
    );
    let claimed_then_refused = {
        let edits = json!({"offer_id": 7}).as_object().cloned();
        resume(&team, &place, vec![(id.clone(), Decision::Approve { arguments: edits })]).await
    };
    assert!(
        matches!(&claimed_then_refused, Err(ResumeError::InvalidArguments(m)) if m.contains("offer_id")),
        "{claimed_then_refused:?}"
    );
    assert_eq!(team.clips.load(Ordering::SeqCst), 0);
    // A refused resume released its claim: the next request may resume.
    let other = place
        .approvals
        .claim(&place.key, &[(id.clone(), Decision::Approve { arguments: None })], "other", u64::MAX)
        .await;
    assert!(other.is_ok(), "{other:?}");
}

#[tokio::test]
async fn a_resume_whose_tool_changed_is_refused_and_names_it() {
    let (team, place) = (team(None), place());
    let interrupt = paused(&team, &place).await;
    // The same team, but deals' clip tool is gone.
    let deals = LlmAgent::new(
        "deals",
        "find deals",
        Arc::new(ScriptedModel::new("m", None)),
        Arc::new(ToolRegistry::new(vec![]).unwrap()),
        limits(),
    );
    let deals: Arc<dyn Agent> = Arc::new(deals);
    let deals_tool: Arc<dyn Tool> =
        Arc::new(AgentTool::new(deals.clone(), AgentToolOptions::default()).unwrap());
    let lead = LlmAgent::new(
        "lead",
        "lead",
        Arc::new(ScriptedModel::new("m", None)),
        Arc::new(ToolRegistry::new(vec![deals_tool.clone()]).unwrap()),
        limits(),
    )
    .with_child(deals_tool.name(), deals);
    let answers = vec![(interrupt.interrupt_id.clone(), Decision::Approve { arguments: None })];
    let claimed = place.approvals.claim(&place.key, &answers, "req", u64::MAX).await.unwrap();
    let refused = lead.check_resume(claimed.root(), &answers.into_iter().collect());
    assert!(
        matches!(&refused, Err(ResumeError::ConfigChanged(m)) if m.contains("`look`") || m.contains("`clip`")),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_resume_whose_agent_tool_starts_another_agent_or_none_is_refused_and_names_it() {
    let (team, place) = (team(None), place());
    let interrupt = paused(&team, &place).await;
    let answers = vec![(interrupt.interrupt_id.clone(), Decision::Approve { arguments: None })];
    let claimed = place.approvals.claim(&place.key, &answers, "req", u64::MAX).await.unwrap();
    let decisions = answers.into_iter().collect();
    // The lead's tool of the paused call, `agent__deals`, now runs an agent named `bargains`.
    let bargains: Arc<dyn Agent> = Arc::new(LlmAgent::new(
        "bargains",
        "find bargains",
        Arc::new(ScriptedModel::new("m", None)),
        Arc::new(ToolRegistry::new(vec![]).unwrap()),
        limits(),
    ));
    let options = AgentToolOptions { tool_name: Some("agent__deals".into()), ..AgentToolOptions::default() };
    let renamed: Arc<dyn Tool> = Arc::new(AgentTool::new(bargains.clone(), options).unwrap());
    let lead = |child: Option<Arc<dyn Agent>>| {
        let registry = Arc::new(ToolRegistry::new(vec![renamed.clone()]).unwrap());
        let lead = LlmAgent::new("lead", "lead", Arc::new(ScriptedModel::new("m", None)), registry, limits());
        match child {
            Some(child) => lead.with_child("agent__deals", child),
            None => lead,
        }
    };
    let refused = lead(Some(bargains)).check_resume(claimed.root(), &decisions);
    assert!(
        matches!(&refused, Err(ResumeError::ConfigChanged(m)) if m.contains("now starts the agent `bargains`, not `deals`")),
        "{refused:?}"
    );
    // A tool of that name no child agent is named for cannot resume the paused child.
    let refused = lead(None).check_resume(claimed.root(), &decisions);
    assert!(
        matches!(&refused, Err(ResumeError::ConfigChanged(m)) if m.contains("`agent__deals` no longer starts the agent `deals`")),
        "{refused:?}"
    );
}

#[tokio::test]
async fn two_requests_racing_to_resume_claim_it_once() {
    let (team, place) = (team(None), place());
    let interrupt = paused(&team, &place).await;
    let answers = vec![(interrupt.interrupt_id.clone(), Decision::Approve { arguments: None })];
    let (a, b) = tokio::join!(
        place.approvals.claim(&place.key, &answers, "a", u64::MAX),
        place.approvals.claim(&place.key, &answers, "b", u64::MAX)
    );
    assert_eq!([a.is_ok(), b.is_ok()].iter().filter(|ok| **ok).count(), 1, "exactly one claims it");
    let loser = if a.is_ok() { b } else { a };
    assert!(matches!(loser, Err(ResumeError::InProgress)), "{loser:?}");
}

#[tokio::test]
async fn a_call_an_earlier_attempt_started_is_never_started_again() {
    let (team, place) = (team(None), place());
    let interrupt = paused(&team, &place).await;
    let answers = vec![(interrupt.interrupt_id.clone(), Decision::Approve { arguments: None })];
    // An attempt that recorded the start, then died (its claim lapsed).
    let first = place.approvals.claim(&place.key, &answers, "dead", 1).await.unwrap();
    first.record(&interrupt.interrupt_id, Outcome::Started).await.unwrap();
    team.deals.push(Reply::text("It may or may not be clipped."));
    team.lead.push(Reply::text("Please check your card."));
    let events = resume(&team, &place, answers).await.unwrap();
    assert_eq!(team.clips.load(Ordering::SeqCst), 0, "not run a second time");
    let unknown = events.iter().any(
        |e| matches!(e, Event::ToolResult { result, .. } if result["error"]["code"] == "outcome_unknown"),
    );
    assert!(unknown, "{events:#?}");
}

#[tokio::test]
async fn a_new_message_while_approvals_wait_answers_them_as_rejected() {
    let (team, place) = (team(None), place());
    let interrupt = paused(&team, &place).await;
    team.lead.push(Reply::text("Hello again."));
    let events = turn(&team, &place, "never mind, hi", place.approvals.pausing()).await;
    assert_eq!(completed(&events).0, Status::Ok);
    assert!(place.approvals.pending(&place.key).await.unwrap().is_empty());
    let late =
        resume(&team, &place, vec![(interrupt.interrupt_id, Decision::Approve { arguments: None })]).await;
    assert!(matches!(&late, Err(ResumeError::Answered(_, how)) if how == "dismissed"), "{late:?}");
    assert_eq!(team.clips.load(Ordering::SeqCst), 0);
}

#[test]
fn a_tree_lists_its_interrupts_depth_first_and_its_instances() {
    let interrupt = |id: &str| Interrupt {
        agent: "a[1]".into(),
        interrupt_id: id.into(),
        path: vec![],
        call_id: "c".into(),
        tool: "t".into(),
        arguments: json!({}),
        reason: String::new(),
        editable: vec![],
        expires_at: 10,
    };
    let call = |state| SuspendedCall {
        call: crate::model::ToolCall { id: "c".into(), name: "t".into(), arguments: "{}".into() },
        schema: Value::Null,
        state,
    };
    let child = Suspension {
        agent: "a".into(),
        instance: "a[3]".into(),
        depth: 1,
        query: String::new(),
        state: Default::default(),
        messages: vec![],
        step: 0,
        last: false,
        calls: vec![call(CallState::Pending { interrupt: interrupt("int_2") })],
    };
    let root = Suspension {
        instance: "lead".into(),
        calls: vec![
            call(CallState::Pending { interrupt: interrupt("int_1") }),
            call(CallState::Done { content: "{}".into(), is_error: false, answer: None, streamed: false }),
            call(CallState::Child { suspension: Box::new(child) }),
        ],
        ..Suspension {
            agent: "lead".into(),
            instance: String::new(),
            depth: 0,
            query: String::new(),
            state: Default::default(),
            messages: vec![],
            step: 1,
            last: false,
            calls: vec![],
        }
    };
    let ids: Vec<String> = root.interrupts().into_iter().map(|i| i.interrupt_id).collect();
    assert_eq!(ids, ["int_1", "int_2"]);
    assert_eq!(root.instances(), ["lead", "a[3]"]);
    let record = PendingApprovals { root: Some(root), expires_at: 10, ..Default::default() };
    assert_eq!(record.pending(9).len(), 2);
    assert!(record.pending(10).is_empty(), "expired interrupts are not pending");
    let decoded: Suspension =
        serde_json::from_value(serde_json::to_value(record.root.as_ref().unwrap()).unwrap()).unwrap();
    assert_eq!(&decoded, record.root.as_ref().unwrap(), "the stored form reads back");
}

#[test]
fn edits_merge_over_the_model_arguments_and_rejections_read_plainly() {
    let edits = json!({"offer_id": "o-2"}).as_object().cloned();
    let merged =
        approved_arguments(&json!({"offer_id": "o-1", "note": "x"}), &Decision::Approve { arguments: edits });
    assert_eq!(merged, json!({"offer_id": "o-2", "note": "x"}));
    let said = rejected_result("clip", Some("  not now "));
    assert_eq!(said["error"]["code"], "rejected_by_user");
    assert!(said["error"]["message"].as_str().unwrap().ends_with("they said: not now"));
    assert!(!rejected_result("clip", Some("   ")).to_string().contains("said"));
}

#[tokio::test]
async fn a_resume_that_died_before_the_call_started_is_run_once_by_the_next() {
    let (team, place) = (team(None), place());
    let interrupt = paused(&team, &place).await;
    let answers = vec![(interrupt.interrupt_id.clone(), Decision::Approve { arguments: None })];
    // An attempt that claimed the record and died before the call (its claim lapsed at once).
    place.approvals.claim(&place.key, &answers, "dead", 1).await.unwrap();
    team.deals.push(Reply::text("Clipped."));
    team.lead.push(Reply::text("Done."));
    let events = resume(&team, &place, answers).await.unwrap();
    assert_eq!(completed(&events).0, Status::Ok);
    assert_eq!(team.clips.load(Ordering::SeqCst), 1, "run by the next attempt, once");
}

#[tokio::test]
async fn a_resume_that_died_after_the_call_ended_reuses_its_recorded_result() {
    let (team, place) = (team(None), place());
    let interrupt = paused(&team, &place).await;
    let answers = vec![(interrupt.interrupt_id.clone(), Decision::Approve { arguments: None })];
    let first = place.approvals.claim(&place.key, &answers, "dead", 1).await.unwrap();
    let recorded =
        Outcome::Done { content: json!({"clipped": "o-1", "runs": 1}).to_string(), is_error: false };
    first.record(&interrupt.interrupt_id, recorded).await.unwrap();
    team.deals.push(Reply::text("Clipped."));
    team.lead.push(Reply::text("Done."));
    let events = resume(&team, &place, answers).await.unwrap();
    assert_eq!(completed(&events).0, Status::Ok);
    assert_eq!(team.clips.load(Ordering::SeqCst), 0, "not run again");
    let seen = format!("{:?}", team.deals.requests().last().unwrap().messages);
    assert!(seen.contains(r#"\"clipped\":\"o-1\""#), "the model read the recorded result: {seen}");
}

#[tokio::test]
async fn two_interrupts_of_one_turn_can_be_answered_one_by_one() {
    let (team, place) = (team(None), place());
    team.lead.push(Reply::text("").tool_call("agent__deals", json!({"text": "clip both"})));
    team.deals.push(
        Reply::text("")
            .tool_call("clip", json!({"offer_id": "o-1"}))
            .tool_call("clip", json!({"offer_id": "o-2"})),
    );
    let events = turn(&team, &place, "clip both", place.approvals.pausing()).await;
    let (status, waiting) = completed(&events);
    assert_eq!((status, waiting.len()), (Status::Interrupted, 2));
    let (first, second) = (waiting[0].interrupt_id.clone(), waiting[1].interrupt_id.clone());

    // The first answered alone: it runs; the turn pauses again on the second, which is re-announced.
    let events =
        resume(&team, &place, vec![(first.clone(), Decision::Approve { arguments: None })]).await.unwrap();
    let (status, waiting) = completed(&events);
    assert_eq!(status, Status::Interrupted, "{events:#?}");
    assert_eq!(waiting.iter().map(|i| i.interrupt_id.clone()).collect::<Vec<_>>(), vec![second.clone()]);
    assert!(events.iter().any(|e| matches!(e, Event::ApprovalRequired(i) if i.interrupt_id == second)));
    assert_eq!(team.clips.load(Ordering::SeqCst), 1);
    let again = resume(&team, &place, vec![(first.clone(), Decision::Approve { arguments: None })]).await;
    assert!(matches!(again, Err(ResumeError::Answered(..))), "the first is answered: {again:?}");

    // The second: the loop goes on with both results; the first call is not run again.
    team.deals.push(Reply::text("Clipped both."));
    team.lead.push(Reply::text("Both clipped."));
    let events = resume(&team, &place, vec![(second, Decision::Approve { arguments: None })]).await.unwrap();
    assert_eq!(completed(&events).0, Status::Ok, "{events:#?}");
    assert_eq!(team.clips.load(Ordering::SeqCst), 2);
    let seen = format!("{:?}", team.deals.requests().last().unwrap().messages);
    assert!(seen.contains(r#"\"clipped\":\"o-1\""#) && seen.contains(r#"\"clipped\":\"o-2\""#), "{seen}");
}

#[tokio::test]
async fn an_interrupt_dismissed_by_a_message_whose_turn_pauses_again_stays_answered() {
    let (team, place) = (team(None), place());
    let first = paused(&team, &place).await;
    // The new message's own turn pauses on a new interrupt.
    team.lead.push(Reply::text("").tool_call("agent__deals", json!({"text": "clip o-3"})));
    team.deals.push(Reply::text("").tool_call("clip", json!({"offer_id": "o-3"})));
    let events = turn(&team, &place, "clip o-3 instead", place.approvals.pausing()).await;
    let (status, waiting) = completed(&events);
    assert_eq!((status, waiting.len()), (Status::Interrupted, 1));
    assert_ne!(waiting[0].interrupt_id, first.interrupt_id);
    let late = resume(&team, &place, vec![(first.interrupt_id, Decision::Approve { arguments: None })]).await;
    assert!(matches!(&late, Err(ResumeError::Answered(_, how)) if how == "dismissed"), "{late:?}");
    assert_eq!(team.clips.load(Ordering::SeqCst), 0);
}
