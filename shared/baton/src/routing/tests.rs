use super::policy::Routed;
use super::*;
use crate::agent::{AgentRequest, Item};
use crate::event::Event;
use crate::model::ToolChoice;
use crate::model::scripted::{Reply, ScriptedModel};
use futures::StreamExt;
use guard::{GuardAction, PlannedCall};
use serde_json::json;

const ASK_SUPPORT: &str = "ask_support";
const ASK_SHOPPING: &str = "ask_shopping";

fn turn(message: &str) -> AgentRequest {
    AgentRequest { query: message.into(), ..Default::default() }
}

type Step = Item<Option<Routed>>;

/// A routing decision as the tests read it: the calls as the guards left them.
struct Route {
    calls: Vec<PlannedCall>,
    actions: Vec<GuardAction>,
}

fn decided(steps: &[Step]) -> Route {
    let Some(Item::Done(Some(routed))) = steps.last() else { panic!("{steps:?}") };
    let calls = routed
        .decision
        .calls
        .iter()
        .map(|c| PlannedCall::from_arguments(&c.call.name, c.call.parse_arguments().unwrap(), ""))
        .collect();
    Route { calls, actions: routed.repairs.clone() }
}

async fn route_of(model: Arc<ScriptedModel>, message: &str) -> (Vec<Step>, Route) {
    let router = Router::new(model, RoutingPolicy::new(testing::settings()), "Route.");
    let steps: Vec<Step> = router.route(&turn(message)).collect().await;
    let route = decided(&steps);
    (steps, route)
}

fn shown_text(steps: &[Step]) -> String {
    steps
        .iter()
        .filter_map(|s| match s {
            Item::Event(Event::Text { text, .. }) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn failsafe_reasks_once_and_merges_the_missing_call() {
    let model = Arc::new(ScriptedModel::new("orch", None));
    model.push(
        Reply::text("On it.")
            .tool_call(ASK_SUPPORT, json!({"query": "receipt didn't scan", "intent_count": 2})),
    );
    model.push(
        Reply::text("")
            .tool_call(ASK_SUPPORT, json!({"query": "receipt didn't scan", "intent_count": 2}))
            .tool_call(ASK_SHOPPING, json!({"query": "coffee deals", "intent_count": 2})),
    );
    let (_, route) = route_of(model.clone(), "my receipt didn't scan and find me coffee deals").await;
    let calls: Vec<(&str, &str)> = route.calls.iter().map(|c| (c.tool.as_str(), c.query.as_str())).collect();
    assert_eq!(calls, [(ASK_SUPPORT, "receipt didn't scan"), (ASK_SHOPPING, "coffee deals")]);
    assert_eq!(route.actions[0], GuardAction::FailsafeReasked { intents: 2, calls: 1, added: 1 });
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "one re-ask, no more");
    let instruction = requests[1].system_text_last();
    assert!(
        instruction.contains("2 separate requests")
            && instruction.contains("ask_support(\"receipt didn't scan\")")
    );
    assert!(instruction.contains("most likely for ask_shopping"), "{instruction}");
    assert_eq!(requests[1].tool_choice, Some(ToolChoice::Required));
}

#[tokio::test]
async fn failsafe_is_bounded_to_one_retry() {
    let model = Arc::new(ScriptedModel::new(
        "orch",
        Some(Reply::text("").tool_call(ASK_SUPPORT, json!({"query": "points", "intent_count": 3}))),
    ));
    let (_, route) = route_of(model.clone(), "points").await;
    assert_eq!(model.requests().len(), 2);
    assert_eq!(route.calls.len(), 1);
}

#[tokio::test]
async fn a_refused_direct_answer_shows_only_its_first_sentence() {
    let model = Arc::new(ScriptedModel::new(
        "orch",
        Some(Reply::text("Returns are easy. You have 90 days and a full refund.")),
    ));
    let (steps, route) = route_of(model, "what is the return policy on shoes").await;
    assert_eq!(shown_text(&steps), "Returns are easy.");
    assert_eq!(route.calls[0].tool, ASK_SHOPPING);
    assert!(route.actions.contains(&GuardAction::FastpathRejected));
}

#[tokio::test]
async fn a_preamble_longer_than_a_sentence_is_shown_whole_once_calls_follow() {
    let model = Arc::new(ScriptedModel::new(
        "orch",
        Some(
            Reply::text("Sure. Let me look.")
                .tool_call(ASK_SHOPPING, json!({"query": "shoes", "intent_count": 1})),
        ),
    ));
    let (steps, route) = route_of(model, "find me shoes").await;
    assert_eq!(shown_text(&steps), "Sure. Let me look.");
    assert!(!route.calls.is_empty(), "the preamble is shown and the calls follow");
}

#[tokio::test]
async fn smalltalk_streams_its_whole_answer_live() {
    let model =
        Arc::new(ScriptedModel::new("orch", Some(Reply::text("Hi! Good to see you. How can I help?"))));
    let (steps, route) = route_of(model, "hello").await;
    let texts = steps.iter().filter(|s| matches!(s, Item::Event(Event::Text { .. }))).count();
    assert!(texts > 3, "word by word, not held");
    assert!(route.calls.is_empty());
}

#[tokio::test]
async fn a_refused_direct_answer_is_reasked_and_the_new_calls_are_guarded() {
    let model = Arc::new(ScriptedModel::new("orch", None));
    model.push(Reply::text("Points usually post in a day. Check back tomorrow."));
    model.push(Reply::text("").tool_call(
        ASK_SUPPORT,
        json!({"query": "points missing", "intent_count": 1,
                                           "support_category": "missing_points"}),
    ));
    let (steps, route) = route_of(model.clone(), "hi, where are my points?").await;
    assert_eq!(shown_text(&steps), "Points usually post in a day.", "the refused rest is withheld");
    assert_eq!(route.calls.len(), 1);
    assert_eq!(route.calls[0].tool, ASK_SUPPORT);
    assert_eq!(route.calls[0].arguments["query"], "hi, where are my points?", "through the guards");
    assert_eq!(route.calls[0].arguments["support_category"], "missing_points");
    assert!(route.actions.contains(&GuardAction::FastpathReasked { calls: 1 }));
    assert!(!route.actions.contains(&GuardAction::FastpathRejected));
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].tool_choice, Some(ToolChoice::Required));
    assert!(requests[1].system_text_last().contains("not only a greeting"));
}

#[tokio::test]
async fn a_direct_answer_to_an_echo_reply_is_reasked_and_keeps_the_models_category() {
    let model = Arc::new(ScriptedModel::new("orch", None));
    model.push(Reply::text("Paper receipts post in 48 hours."));
    model.push(Reply::text("").tool_call(
        ASK_SUPPORT,
        json!({"query": "the paper one", "intent_count": 1, "support_category": "missing_points"}),
    ));
    let router = Router::new(model.clone(), RoutingPolicy::new(testing::settings()), "Route.");
    let request = AgentRequest {
        query: "the paper one".into(),
        previous: Some(crate::conversation::PreviousTurn {
            user_message: "my points are missing".into(),
            replies: vec![crate::conversation::PriorReply {
                agent: "support".into(),
                text: "Was it a paper receipt or an e-receipt?".into(),
                ..Default::default()
            }],
        }),
        ..Default::default()
    };
    let steps: Vec<Step> = router.route(&request).collect().await;
    let route = decided(&steps);
    assert_eq!(model.requests().len(), 2, "re-asked");
    assert_eq!(route.calls.len(), 1);
    assert_eq!(route.calls[0].tool, ASK_SUPPORT);
    assert_eq!(route.calls[0].arguments["support_category"], "missing_points");
    assert!(route.calls[0].prior_context.as_deref().unwrap().contains("paper receipt"));
    assert!(route.actions.contains(&GuardAction::FastpathReasked { calls: 1 }));
}

#[tokio::test]
async fn smalltalk_with_an_image_is_reasked() {
    let model = Arc::new(ScriptedModel::new("orch", None));
    model.push(Reply::text("You're welcome!"));
    model.push(Reply::text("").tool_call(ASK_SHOPPING, json!({"query": "thanks!", "intent_count": 1})));
    let router = Router::new(model.clone(), RoutingPolicy::new(testing::settings()), "Route.");
    let request = AgentRequest {
        query: "thanks!".into(),
        image: Some(crate::image::Image::described("a cat on a sofa")),
        ..Default::default()
    };
    let steps: Vec<Step> = router.route(&request).collect().await;
    let route = decided(&steps);
    assert_eq!(model.requests().len(), 2, "the image's note makes it more than smalltalk");
    assert_eq!(route.calls[0].tool, ASK_SHOPPING);
    assert_eq!(route.calls[0].query, "thanks!", "the user's words, not the note");
}

#[tokio::test]
async fn smalltalk_in_another_language_is_answered_without_a_reask() {
    let model = Arc::new(ScriptedModel::new("orch", Some(Reply::text("¡Hola! ¿En qué te ayudo?"))));
    let (_, route) = route_of(model.clone(), "hola, ¿qué tal?").await;
    assert!(route.calls.is_empty());
    assert_eq!(model.requests().len(), 1);
}

#[tokio::test]
async fn the_models_prior_context_reaches_either_agent() {
    let orchestrator = Arc::new(ScriptedModel::new(
        "orch",
        Some(Reply::text("").tool_call(
            ASK_SHOPPING,
            json!({"query": "then show me offers from that brand", "intent_count": 1,
                   "prior_context": "Their Tide receipt was rejected as a duplicate."}),
        )),
    ));
    let support = Arc::new(ScriptedModel::new("sup", Some(Reply::text("Support."))));
    let shopping = Arc::new(ScriptedModel::new("shop", Some(Reply::text("Tide: 500 points."))));
    let agent = testing::routed(
        orchestrator,
        testing::plain("support", support.clone()),
        testing::plain("shopping", shopping.clone()),
        [None, None],
    );
    let o = Arc::new(crate::orchestrator::Orchestrator::new(agent, "orch"));
    let turn = crate::orchestrator::TurnRequest::new("ep", "t1", "u", "then show me offers from that brand");
    let _: Vec<Event> = o.run_turn(turn).collect().await;
    let asked = shopping.requests()[0].last_user_text().to_owned();
    assert!(
        asked.contains("Tide receipt was rejected") && asked.contains("offers from that brand"),
        "{asked}"
    );
    assert!(support.requests().is_empty());
}

#[tokio::test]
async fn the_router_routes_the_request_the_entry_agents_loop_sends() {
    let call = json!({"query": "find me shoes", "intent_count": 1});
    let model = Arc::new(ScriptedModel::new("orch", Some(Reply::text("").tool_call(ASK_SHOPPING, call))));
    let support = Arc::new(ScriptedModel::new("sup", Some(Reply::text("Support."))));
    let shopping = Arc::new(ScriptedModel::new("shop", Some(Reply::text("Shoes."))));
    let agent = testing::routed(
        model.clone(),
        testing::plain("support", support),
        testing::plain("shopping", shopping),
        [None, None],
    );
    let request = AgentRequest {
        query: "find me shoes".into(),
        history: vec![crate::model::Message::user("hi"), crate::model::Message::assistant("Hello!")],
        ..Default::default()
    };
    let _: Vec<Event> = agent.run(request.clone(), "orchestrator".into()).collect().await;
    let router = Router::new(model.clone(), RoutingPolicy::new(testing::settings()), "Route.");
    let _: Vec<Step> = router.route(&request).collect().await;
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "one routing call each");
    assert_eq!(requests[1], requests[0], "the router sends what the agent's first step sent");
    assert_eq!(requests[0].messages.len(), 4, "instruction, history, the user's message");
}
