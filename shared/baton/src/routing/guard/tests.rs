use super::*;
use crate::conversation::PriorReply;

const ASK_SUPPORT: &str = "ask_support";
const ASK_SHOPPING: &str = "ask_shopping";

use serde_json::json;

/// The reference roles: `ask_support` (agent `support`) for follow-ups, `ask_shopping` as the
/// fallback, `orchestrator` routing.
fn reference_roles() -> Roles {
    Roles {
        followup_tool: Some("ask_support".into()),
        followup_agent: Some("support".into()),
        summary_argument: Some("support_summary".into()),
        fallback_tool: "ask_shopping".into(),
        fallback_agent: "shopping".into(),
        own_agent: "orchestrator".into(),
        images: vec![
            (ImageKind::Receipt, "ask_support".into(), "support".into()),
            (ImageKind::Product, "ask_shopping".into(), "shopping".into()),
        ],
    }
}

fn call(tool: &str, query: &str) -> PlannedCall {
    PlannedCall::from_arguments(tool, json!({"query": query, "intent_count": 2}), "")
}

fn route(message: &str, calls: Vec<PlannedCall>) -> (Vec<(String, String)>, Vec<GuardAction>) {
    let (calls, actions) = apply_guards(
        &RoutingInput {
            message,
            previous: None,
            roles: &reference_roles(),
            guards: &Guards::default(),
            smalltalk: Lexicon::reference(),
            image: None,
            attached: false,
        },
        calls,
    );
    (calls.into_iter().map(|c| (c.tool, c.query)).collect(), actions)
}

fn pair(tool: &str, query: &str) -> (String, String) {
    (tool.to_owned(), query.to_owned())
}

#[test]
fn duplicates_from_the_llama_capture_are_removed() {
    let junk = "<name>query</name>\n<type>string</type>";
    let msg = "my receipt didn't scan and find me coffee deals";
    let (calls, actions) =
        route(msg, vec![call(ASK_SUPPORT, junk), call(ASK_SHOPPING, junk), call(ASK_SHOPPING, junk)]);
    assert_eq!(calls, [pair(ASK_SUPPORT, msg), pair(ASK_SHOPPING, msg)]);
    assert!(actions.contains(&GuardAction::DuplicateRemoved { tool: ASK_SHOPPING.into() }));
}

#[test]
fn a_mixed_call_unrelated_to_the_message_is_dropped() {
    // The model invents a second call beyond the one intent it reports; once it is dropped,
    // the single call gets the exact text.
    let msg = "where are my points from the Target receipt";
    let one_intent =
        |tool, query| PlannedCall::from_arguments(tool, json!({"query": query, "intent_count": 1}), "");
    let (calls, actions) = route(
        msg,
        vec![
            one_intent(ASK_SUPPORT, "points from the Target receipt"),
            one_intent(ASK_SHOPPING, "weather forecast"),
        ],
    );
    assert_eq!(calls, [pair(ASK_SUPPORT, msg)]);
    assert!(matches!(actions[0], GuardAction::NoOverlapDropped { .. }));
}

#[test]
fn a_counted_intent_with_a_rewritten_query_is_kept_and_repaired() {
    let msg = "my receipt didn't scan and find me coffee deals";
    let (calls, actions) =
        route(msg, vec![call(ASK_SUPPORT, "assist this person"), call(ASK_SHOPPING, "coffee deals")]);
    assert_eq!(calls, [pair(ASK_SUPPORT, msg), pair(ASK_SHOPPING, "coffee deals")]);
    assert!(!actions.iter().any(|a| matches!(a, GuardAction::NoOverlapDropped { .. })));
}

#[test]
fn verbatim_rules() {
    // Single intent: the exact text, whatever the model wrote.
    let (calls, _) = route("Where are my points?", vec![call(ASK_SUPPORT, "user asks about points")]);
    assert_eq!(calls, [pair(ASK_SUPPORT, "Where are my points?")]);
    // Mixed, at most four words: exact text for both.
    let (calls, _) =
        route("points and deals", vec![call(ASK_SUPPORT, "points"), call(ASK_SHOPPING, "deals")]);
    assert_eq!(calls, [pair(ASK_SUPPORT, "points and deals"), pair(ASK_SHOPPING, "points and deals")]);
    // Mixed and longer: the model's split where it overlaps.
    let msg = "my receipt didn't scan and find me coffee deals";
    let (calls, _) =
        route(msg, vec![call(ASK_SUPPORT, "receipt didn't scan"), call(ASK_SHOPPING, "coffee deals")]);
    assert_eq!(calls, [pair(ASK_SUPPORT, "receipt didn't scan"), pair(ASK_SHOPPING, "coffee deals")]);
}

#[test]
fn fastpath_is_kept_only_for_smalltalk() {
    assert_eq!(route("thanks!", vec![]), (vec![], vec![]));
    let (calls, actions) = route("what's the return policy for shoes", vec![]);
    assert_eq!(calls, [pair(ASK_SHOPPING, "what's the return policy for shoes")]);
    assert_eq!(actions, [GuardAction::FastpathRejected]);
}

#[test]
fn a_short_echo_of_a_support_question_goes_to_support() {
    let previous = PreviousTurn {
        user_message: "my receipt didn't scan".into(),
        replies: vec![PriorReply {
            agent: "support".into(),
            text: "Sorry! Was it a paper receipt or an e-receipt?".into(),
            ..Default::default()
        }],
    };
    let input = RoutingInput {
        message: "an e-receipt",
        previous: Some(&previous),
        roles: &reference_roles(),
        guards: &Guards::default(),
        smalltalk: Lexicon::reference(),
        image: None,
        attached: false,
    };
    let (calls, actions) = apply_guards(&input, vec![call(ASK_SHOPPING, "e-receipt deals")]);
    assert_eq!(calls.len(), 1);
    assert_eq!((calls[0].tool.as_str(), calls[0].query.as_str()), (ASK_SUPPORT, "an e-receipt"));
    assert!(calls[0].prior_context.as_deref().unwrap().contains("paper receipt"));
    assert_eq!(actions[0], GuardAction::EchoFollowup);
    // "thanks" after the same question is an acknowledgement, not an echo.
    let ack = RoutingInput {
        message: "thanks",
        previous: Some(&previous),
        roles: &reference_roles(),
        guards: &Guards::default(),
        smalltalk: Lexicon::reference(),
        image: None,
        attached: false,
    };
    assert_eq!(apply_guards(&ack, vec![]).0, vec![]);
}

#[test]
fn an_intent_switch_to_support_fills_prior_context() {
    let previous = PreviousTurn {
        user_message: "find me coffee deals".into(),
        replies: vec![PriorReply {
            agent: "shopping".into(),
            text: "2x points on Brand A coffee.".into(),
            ..Default::default()
        }],
    };
    let input = RoutingInput {
        message: "I bought it but got no points",
        previous: Some(&previous),
        roles: &reference_roles(),
        guards: &Guards::default(),
        smalltalk: Lexicon::reference(),
        image: None,
        attached: false,
    };
    let (calls, actions) = apply_guards(&input, vec![call(ASK_SUPPORT, "no points")]);
    let context = calls[0].prior_context.as_deref().unwrap();
    assert!(context.contains("find me coffee deals") && context.contains("Brand A"), "{context}");
    assert_eq!(calls[0].arguments["prior_context"], context);
    assert!(actions.contains(&GuardAction::PriorContextFilled { tool: ASK_SUPPORT.into() }));
}

#[test]
fn support_summary_is_capped() {
    let mut c = call(ASK_SUPPORT, "points");
    c.arguments["support_summary"] = json!("é".repeat(400));
    let (calls, actions) = apply_guards(
        &RoutingInput {
            message: "points",
            previous: None,
            roles: &reference_roles(),
            guards: &Guards::default(),
            smalltalk: Lexicon::reference(),
            image: None,
            attached: false,
        },
        vec![c],
    );
    assert_eq!(calls[0].arguments["support_summary"].as_str().unwrap().chars().count(), 300);
    assert!(actions.contains(&GuardAction::SummaryCapped));
}

#[test]
fn a_direct_answer_with_a_classified_image_goes_to_the_agent_of_its_kind() {
    for (kind, tool) in [(ImageKind::Receipt, ASK_SUPPORT), (ImageKind::Product, ASK_SHOPPING)] {
        // Smalltalk words too: the image is the question.
        for message in ["thanks!", "what is this worth"] {
            let input = RoutingInput { image: Some(kind), attached: true, ..input(message, None) };
            let (calls, actions) = apply_guards(&input, vec![]);
            assert_eq!(calls.len(), 1, "{kind:?} {message}");
            assert_eq!((calls[0].tool.as_str(), calls[0].query.as_str()), (tool, message));
            assert_eq!(actions, [GuardAction::ImageRouted { image: kind, tool: tool.into() }]);
        }
    }
    // An image of no configured kind is not smalltalk either: it goes to the fallback agent.
    let other = RoutingInput { image: Some(ImageKind::Other), attached: true, ..input("thanks!", None) };
    let (calls, actions) = apply_guards(&other, vec![]);
    assert_eq!(calls[0].tool, ASK_SHOPPING);
    assert_eq!(actions, [GuardAction::FastpathRejected]);
    // The model's own calls stand whatever the image.
    let called =
        RoutingInput { image: Some(ImageKind::Receipt), attached: true, ..input("find deals on this", None) };
    let (calls, _) = apply_guards(&called, vec![call(ASK_SHOPPING, "find deals on this")]);
    assert_eq!(calls[0].tool, ASK_SHOPPING);
}

fn input<'a>(message: &'a str, previous: Option<&'a PreviousTurn>) -> RoutingInput<'a> {
    static ROLES: std::sync::LazyLock<Roles> = std::sync::LazyLock::new(reference_roles);
    static GUARDS: std::sync::LazyLock<Guards> = std::sync::LazyLock::new(Guards::default);
    RoutingInput {
        message,
        previous,
        roles: &ROLES,
        guards: &GUARDS,
        smalltalk: Lexicon::reference(),
        image: None,
        attached: false,
    }
}

fn support_asked(question: &str) -> PreviousTurn {
    PreviousTurn {
        user_message: "my receipt didn't scan".into(),
        replies: vec![PriorReply { agent: "support".into(), text: question.into(), ..Default::default() }],
    }
}

#[test]
fn duplicates_go_first_so_an_echo_keeps_the_models_fields() {
    let previous = support_asked("Was it a paper receipt or an e-receipt?");
    let model = || {
        PlannedCall::from_arguments(
            ASK_SUPPORT,
            json!({"query": "paper receipt", "intent_count": 1, "support_category": "ereceipts",
                   "support_summary": "receipt did not scan"}),
            "",
        )
    };
    let (calls, actions) =
        apply_guards(&input("the paper one", Some(&previous)), vec![model(), model(), model()]);
    assert_eq!(calls.len(), 1);
    let args = &calls[0].arguments;
    assert_eq!(args["support_category"], "ereceipts");
    assert_eq!(args["support_summary"], "receipt did not scan");
    assert_eq!(args["query"], "the paper one");
    assert!(args["prior_context"].as_str().unwrap().contains("paper receipt or an e-receipt"));
    assert!(!actions.contains(&GuardAction::EchoFollowup), "the model did route it: {actions:?}");
    assert_eq!(actions.iter().filter(|a| matches!(a, GuardAction::DuplicateRemoved { .. })).count(), 2);
}

#[test]
fn an_echo_rerouted_from_another_tool_keeps_the_models_support_fields() {
    let previous = support_asked("Was it a paper receipt or an e-receipt?");
    let calls = vec![
        PlannedCall::from_arguments(ASK_SHOPPING, json!({"query": "paper deals", "intent_count": 2}), ""),
        PlannedCall::from_arguments(
            ASK_SUPPORT,
            json!({"query": "paper", "intent_count": 2, "support_category": "ereceipts",
                   "prior_context": "asked paper or e-receipt"}),
            "",
        ),
    ];
    let (calls, actions) = apply_guards(&input("the paper one", Some(&previous)), calls);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].arguments["support_category"], "ereceipts");
    assert_eq!(calls[0].arguments["prior_context"], "asked paper or e-receipt", "the model's own");
    assert_eq!(calls[0].arguments["intent_count"], 1);
    assert_eq!(actions[0], GuardAction::EchoFollowup);
}

#[test]
fn a_paraphrase_sharing_one_word_gets_the_users_own_clause() {
    let msg = "my referral bonus never showed up and find me toothpaste deals";
    let paraphrase = call(ASK_SUPPORT, "user's friend bonus was never credited");
    let (calls, actions) = route(msg, vec![paraphrase, call(ASK_SHOPPING, "toothpaste deals")]);
    assert_eq!(
        calls,
        [pair(ASK_SUPPORT, "my referral bonus never showed up"), pair(ASK_SHOPPING, "toothpaste deals")]
    );
    assert!(matches!(&actions[0], GuardAction::QueryVerbatim { was, .. } if was.contains("credited")));
}

#[test]
fn a_split_in_the_users_words_is_kept_whatever_its_inflection() {
    let msg = "my receipts never scanned and find me coffee deals";
    let (calls, actions) =
        route(msg, vec![call(ASK_SUPPORT, "receipt didn't scan"), call(ASK_SHOPPING, "coffee deal")]);
    assert_eq!(calls, [pair(ASK_SUPPORT, "receipt didn't scan"), pair(ASK_SHOPPING, "coffee deal")]);
    assert!(actions.is_empty(), "{actions:?}");
}

#[test]
fn a_split_with_no_clause_of_its_own_gets_the_whole_message() {
    let msg = "my receipt didn't scan and find me coffee deals";
    let (calls, _) =
        route(msg, vec![call(ASK_SUPPORT, "assist this person"), call(ASK_SHOPPING, "coffee deals")]);
    assert_eq!(calls[0], pair(ASK_SUPPORT, msg));
}

#[test]
fn a_refused_direct_answer_after_a_switch_gets_the_previous_turn() {
    let previous = PreviousTurn {
        user_message: "where are my points".into(),
        replies: vec![PriorReply {
            agent: "support".into(),
            text: "They post within 48 hours.".into(),
            ..Default::default()
        }],
    };
    let (calls, actions) = apply_guards(&input("then find me snack deals", Some(&previous)), vec![]);
    assert_eq!(calls[0].tool, ASK_SHOPPING);
    let context = calls[0].arguments["prior_context"].as_str().unwrap();
    assert!(context.contains("where are my points") && context.contains("48 hours"), "{context}");
    assert!(actions.contains(&GuardAction::PriorContextFilled { tool: ASK_SHOPPING.into() }));
    // Without a switch (shopping answered before), nothing is added.
    let same = PreviousTurn {
        user_message: "coffee deals".into(),
        replies: vec![PriorReply { agent: "shopping".into(), text: "Brand A.".into(), ..Default::default() }],
    };
    let (calls, _) = apply_guards(&input("then find me snack deals", Some(&same)), vec![]);
    assert_eq!(calls[0].prior_context, None);
}

#[test]
fn only_a_real_request_or_an_image_answered_directly_is_refused() {
    assert!(refuses_direct_answer(&input("hi, where are my points?", None)));
    assert!(!refuses_direct_answer(&input("hola, ¿qué tal?", None)));
    assert!(!refuses_direct_answer(&input("👍", None)));
    assert!(refuses_direct_answer(&RoutingInput { attached: true, ..input("thanks!", None) }));
}

#[test]
fn a_direct_answer_to_an_echo_reply_is_reasked_like_any_other() {
    // So the model's call carries what it knows (the category); the echo rule is the last resort.
    let previous = support_asked("Was it a paper receipt or an e-receipt?");
    assert!(refuses_direct_answer(&input("the paper one", Some(&previous))));
    let (calls, actions) = apply_guards(&input("the paper one", Some(&previous)), vec![]);
    assert_eq!((calls[0].tool.as_str(), calls[0].query.as_str()), (ASK_SUPPORT, "the paper one"));
    assert_eq!(actions[0], GuardAction::EchoFollowup);
}

#[test]
fn a_reply_that_asks_something_new_keeps_the_models_call() {
    let previous = support_asked("Which store was it, FreshMart?");
    for message in ["what deals at FreshMart?", "deals at FreshMart?", "any FreshMart coupons"] {
        let (calls, actions) =
            apply_guards(&input(message, Some(&previous)), vec![call(ASK_SHOPPING, message)]);
        assert_eq!(calls.len(), 1, "{message}");
        assert_eq!(calls[0].tool, ASK_SHOPPING, "{message}");
        assert!(!actions.contains(&GuardAction::EchoFollowup), "{message}: {actions:?}");
    }
    // The answer it asked for still goes back to support.
    let (calls, _) =
        apply_guards(&input("FreshMart", Some(&previous)), vec![call(ASK_SHOPPING, "FreshMart")]);
    assert_eq!(calls[0].tool, ASK_SUPPORT);
}

#[test]
fn echo_corpus() {
    #[derive(serde::Deserialize)]
    struct Reply {
        question: String,
        reply: String,
        echo: bool,
    }
    let corpus: Vec<Reply> =
        serde_yaml_ng::from_str(include_str!("../../../../../data/routing/echo-corpus.yaml")).unwrap();
    assert!(
        corpus.iter().filter(|r| r.echo).count() >= 15 && corpus.iter().filter(|r| !r.echo).count() >= 15
    );
    for r in &corpus {
        let previous = support_asked(&r.question);
        let echo = echo::echoes_followup_question(&input(&r.reply, Some(&previous))).is_some();
        assert_eq!(echo, r.echo, "{:?} after {:?}", r.reply, r.question);
    }
}

#[test]
fn a_query_that_is_the_message_plus_batons_image_note_is_the_users_exact_text() {
    let msg = "my receipt didn't scan and find me coffee deals";
    let noted = format!("{msg}\n[The user attached an image of a receipt: a Kroger receipt]");
    let (calls, actions) =
        route(msg, vec![call(ASK_SUPPORT, &noted), call(ASK_SHOPPING, "find me coffee deals")]);
    assert_eq!(calls, [pair(ASK_SUPPORT, msg), pair(ASK_SHOPPING, "find me coffee deals")]);
    assert!(matches!(&actions[0], GuardAction::QueryVerbatim { was, .. } if was.contains("[The user")));
    assert!(is_message_with_notes(&format!("{msg} [note one] [note two]"), msg));
    assert!(!is_message_with_notes(msg, msg), "no note: an ordinary query");
    assert!(!is_message_with_notes("coffee deals [The user attached an image.]", msg));
}
