//! The offline model: deterministic and rule-based, so the whole pipeline runs on a fresh machine
//! with no API key. It is a demo and test aid, never a claim about routing quality.
//!
//! - Offered the orchestrator tools, it answers smalltalk directly (the fastpath) and otherwise
//!   routes by the configured support keywords: clauses that name a support keyword go to
//!   `ask_support`, the rest to `ask_shopping`, each call carrying the user's own words.
//! - Offered `search_offers` (the shopping agent), it searches with the user's words.
//! - Offered other tools (a configured agent's tools and agents), it answers smalltalk
//!   directly and otherwise calls the tools whose name and description share topic words with
//!   the message, each with its part of the user's words (the first tool when none matches).
//! - Given tool results, it composes an answer from them (offers as a list, an agent's answer
//!   as its text, help articles with their citation).
//! - Asked for a mini-agent decomposition (a request with a response format), it forks when
//!   parts of the message joined by clear conjunctions (`and`, `also`, `plus`, sentence ends)
//!   go to different offered tools, one sub-task per tool.
//! - Asked to aggregate mini-agents' outcomes (a user message that is JSON with `parts`), it
//!   joins the answers in order and says which parts failed or took too long.
//! - Otherwise it says plainly that it is offline and what it was asked.

use futures::stream;
use serde_json::json;

use super::ToolSpec;
use super::{ChatModel, ChatRequest, DeltaStream, FinishReason, Message, ModelDelta, ToolCall};
use crate::event::Usage;
use crate::shopping::tools::SEARCH_OFFERS;
use crate::text::{self as guard, Smalltalk};

/// The two roles of routing tools (those with an `intent_count` parameter): the one that takes a
/// `support_category` gets the support clauses, the other the rest.
const ASK_SUPPORT: &str = "support";
const ASK_SHOPPING: &str = "shopping";

/// Whether `tool` is a routing tool (`ask_<agent>`): it takes an `intent_count`.
fn is_routing_tool(tool: &ToolSpec) -> bool {
    tool.parameters.pointer("/properties/intent_count").is_some()
}

/// The routing tools offered for the support and the shopping role.
fn routing_tools(request: &ChatRequest) -> (Option<&ToolSpec>, Option<&ToolSpec>) {
    let routing: Vec<&ToolSpec> = request.tools.iter().filter(|t| is_routing_tool(t)).collect();
    let support =
        routing.iter().copied().find(|t| t.parameters.pointer("/properties/support_category").is_some());
    let shopping = routing.iter().copied().find(|t| support.is_none_or(|s| s.name != t.name));
    (support.or(shopping), shopping.or(support))
}

/// The offline model's name in `usage` and `completed` events.
pub const OFFLINE_MODEL_NAME: &str = "offline";

/// The deterministic rule-based model.
#[derive(Debug, Clone)]
pub struct OfflineModel {
    support_keywords: Vec<String>,
}

impl OfflineModel {
    /// A model routing by these (lowercase) support keywords.
    pub fn new(support_keywords: Vec<String>) -> OfflineModel {
        let support_keywords = support_keywords.into_iter().map(|k| k.to_lowercase()).collect();
        OfflineModel { support_keywords }
    }

    fn is_support(&self, clause: &str) -> bool {
        let lower = clause.to_lowercase();
        let words = guard::words(clause);
        self.support_keywords
            .iter()
            .any(|k| if k.contains(' ') { lower.contains(k.as_str()) } else { words.iter().any(|w| w == k) })
    }

    /// Splits a message into support and shopping parts, in the order they appear.
    fn route(&self, text: &str) -> Vec<(&'static str, String)> {
        let mut parts: Vec<(&'static str, String)> = Vec::new();
        for clause in clauses(text) {
            let tool = if self.is_support(&clause) { ASK_SUPPORT } else { ASK_SHOPPING };
            // No topic of its own ("hi", "also", "thanks"): fold it into its neighbour.
            let weak =
                guard::content_words(&clause).is_empty() || guard::classify_smalltalk(&clause).is_some();
            match parts.last_mut() {
                Some((last, t)) if *last == tool || weak => {
                    t.push(' ');
                    t.push_str(&clause);
                }
                _ if weak => parts.push(("", clause)),
                _ => parts.push((tool, clause)),
            }
        }
        // A leading weak clause takes the class of what follows it.
        if parts.len() > 1 && parts[0].0.is_empty() {
            let (_, lead) = parts.remove(0);
            parts[0].1 = format!("{lead} {}", parts[0].1);
        }
        match parts.len() {
            0 => vec![(ASK_SHOPPING, text.trim().to_owned())],
            1 => {
                let tool = if parts[0].0.is_empty() { ASK_SHOPPING } else { parts[0].0 };
                vec![(tool, text.trim().to_owned())]
            }
            _ => parts,
        }
    }

    fn orchestrate(&self, request: &ChatRequest) -> Answer {
        let text = request.last_user_text();
        if let Some(kind) = guard::classify_smalltalk(text) {
            return Answer::text(match kind {
                Smalltalk::Greeting => {
                    "Hi! I can help with receipts, points and your account, or find you offers. \
                     What would you like to do?"
                }
                Smalltalk::Acknowledgement => "You're welcome! Anything else I can help with?",
                Smalltalk::Chitchat => {
                    "I'm Baton's offline assistant: I answer help-center questions and look up \
                     offers. How can I help?"
                }
            });
        }
        // The user's words are routed clause by clause; an attached image's note (after them)
        // only decides a single part: a receipt note makes it support's.
        let (said, note) = match text.find("\n[The user attached an image") {
            Some(at) => (&text[..at], Some(&text[at..])),
            None => (text, None),
        };
        let mut routes = self.route(said);
        if let (Some(note), [(ASK_SHOPPING, query)]) = (note, routes.as_slice()) {
            if self.is_support(note) {
                routes = vec![(ASK_SUPPORT, query.clone())];
            }
        }
        let count = routes.len();
        let preamble = match (count, routes[0].0) {
            (1, ASK_SUPPORT) => "Let me check that for you.",
            (1, _) => "Let me look that up.",
            _ => "I'll look into both of those at once.",
        };
        let (support, shopping) = routing_tools(request);
        let calls = routes
            .into_iter()
            .enumerate()
            .filter_map(|(i, (role, query))| {
                let tool = if role == ASK_SUPPORT { support? } else { shopping? };
                let mut args = json!({"query": query, "intent_count": count});
                let categories = tool.parameters.pointer("/properties/support_category/enum");
                if categories.and_then(|c| c.as_array()).is_some_and(|c| c.iter().any(|v| v == "general")) {
                    args["support_category"] = json!("general");
                }
                if tool.parameters.pointer("/properties/support_summary").is_some() {
                    args["support_summary"] = json!(query.chars().take(300).collect::<String>());
                }
                Some(ToolCall {
                    id: format!("offline_call_{i}"),
                    name: tool.name.clone(),
                    arguments: args.to_string(),
                })
            })
            .collect();
        Answer { text: preamble.to_owned(), calls }
    }

    /// Calls the offered tools that match the message, each with its part of it.
    fn delegate(request: &ChatRequest) -> Answer {
        let text = request.last_user_text().trim();
        if guard::classify_smalltalk(text).is_some() {
            return Answer::text(
                "Hello! I'm running offline; ask me something and I'll pass it to the right helper.",
            );
        }
        let mut chosen = split_by_tool(&request.tools, text);
        // One tool: the user's exact words.
        if chosen.len() == 1 {
            chosen[0].1 = text.to_owned();
        }
        let calls = chosen
            .into_iter()
            .enumerate()
            .map(|(i, (tool, part))| {
                let spec = &request.tools[tool];
                ToolCall {
                    id: format!("offline_call_{i}"),
                    name: spec.name.clone(),
                    arguments: arguments_for(&spec.parameters, &part).to_string(),
                }
            })
            .collect();
        Answer { text: String::new(), calls }
    }

    /// A mini-agent decomposition (the request carries a response format): the parts of the
    /// message that different tools answer, each a sub-task allowed that tool; no fork when the
    /// whole message goes to one tool.
    fn decompose(request: &ChatRequest) -> Answer {
        let text = request.last_user_text().trim();
        let parts = if guard::classify_smalltalk(text).is_some() {
            Vec::new()
        } else {
            split_by_tool(&request.tools, text)
        };
        let sub_tasks: Vec<serde_json::Value> = if parts.len() < 2 {
            Vec::new()
        } else {
            parts
                .iter()
                .enumerate()
                .map(|(i, (tool, part))| {
                    json!({"id": (i + 1).to_string(), "description": part, "allowed_tools": [request.tools[*tool].name]})
                })
                .collect()
        };
        Answer::text(&json!({"should_fork": !sub_tasks.is_empty(), "sub_tasks": sub_tasks}).to_string())
    }

    /// A mini-agent aggregation (the user message is JSON with `parts`): the parts' answers in
    /// order, and a plain line for each part that failed or timed out.
    fn aggregate(parts: &[serde_json::Value]) -> Answer {
        let lines: Vec<String> = parts
            .iter()
            .map(|part| match (part["status"].as_str(), part["answer"].as_str()) {
                (Some("ok"), Some(answer)) => answer.trim().to_owned(),
                (status, _) => format!(
                    "I couldn't answer \"{}\" right now ({}).",
                    part["description"].as_str().unwrap_or("?").trim(),
                    if status == Some("timeout") { "it took too long" } else { "it failed" }
                ),
            })
            .collect();
        Answer::text(&lines.join("\n\n"))
    }

    fn compose(request: &ChatRequest) -> Answer {
        let results: Vec<&str> = request
            .messages
            .iter()
            .rev()
            .take_while(|m| !matches!(m, Message::User { .. }))
            .filter_map(|m| match m {
                Message::Tool { content, .. } => Some(content.as_str()),
                _ => None,
            })
            .collect();
        let mut text = String::new();
        for result in results.iter().rev() {
            let value: serde_json::Value = serde_json::from_str(result).unwrap_or_default();
            let separator = if text.is_empty() { "" } else { "\n\n" };
            if let Some(offers) = value["offers"].as_array() {
                text.push_str(separator);
                text.push_str(&compose_offers(value["query"].as_str().unwrap_or_default(), offers));
            } else if value["shown_to_user"] == json!(true) {
                // The user has read it already.
            } else if let Some(answer) = value["answer"].as_str() {
                text.push_str(separator);
                text.push_str(answer.trim());
            } else if let Some(article) = value["articles"].as_array().and_then(|a| a.first()) {
                text.push_str(separator);
                text.push_str(&format!(
                    "{} (Source: \"{}\", {})",
                    article["text"].as_str().unwrap_or_default().trim(),
                    article["title"].as_str().unwrap_or("?"),
                    article["citation"].as_str().unwrap_or("?"),
                ));
            } else {
                text.push_str(if text.is_empty() { "Here is what I found:" } else { "" });
                text.push_str("\n- ");
                text.push_str(result);
            }
        }
        if text.is_empty() && results.iter().any(|r| r.contains("\"shown_to_user\":true")) {
            return Answer::text("");
        }
        Answer::text(if text.is_empty() { "I found nothing to report." } else { &text })
    }
}

/// The parts of `text` each tool answers, in order of first mention: each clause goes to the
/// tool whose name and description share the most topic words with it; a clause with no topic
/// of its own joins the one before (the first tool when none matches).
fn split_by_tool(tools: &[ToolSpec], text: &str) -> Vec<(usize, String)> {
    let topics: Vec<Vec<String>> = tools
        .iter()
        .map(|t| guard::content_words(&format!("{} {}", t.name.replace(['_', '-'], " "), t.description)))
        .collect();
    let best = |clause: &str| {
        let words = guard::content_words(clause);
        topics
            .iter()
            .enumerate()
            .map(|(i, topic)| (words.iter().filter(|w| topic.contains(w)).count(), i))
            .filter(|(score, _)| *score > 0)
            .max_by_key(|(score, i)| (*score, std::cmp::Reverse(*i)))
            .map(|(_, i)| i)
    };
    // Each clause goes to its best tool; a clause with no topic of its own joins the one before.
    let mut parts: Vec<(usize, String)> = Vec::new();
    for clause in clauses(text) {
        match (best(&clause), parts.last_mut()) {
            (Some(tool), Some((last, part))) if *last == tool => {
                part.push(' ');
                part.push_str(&clause);
            }
            (None, Some((_, part))) => {
                part.push(' ');
                part.push_str(&clause);
            }
            (Some(tool), _) => parts.push((tool, clause)),
            (None, None) => parts.push((usize::MAX, clause)),
        }
    }
    let mut chosen: Vec<(usize, String)> = Vec::new();
    for (tool, part) in parts {
        let tool = if tool == usize::MAX { 0 } else { tool };
        match chosen.iter_mut().find(|(t, _)| *t == tool) {
            Some((_, existing)) => {
                existing.push(' ');
                existing.push_str(&part);
            }
            None => chosen.push((tool, part)),
        }
    }
    chosen
}

/// Arguments that satisfy a tool's `parameters` with `text` as its words: `text` when the tool
/// takes it (an agent tool), otherwise every string property that is required or named `query`
/// gets the words and other required properties a neutral value.
fn arguments_for(parameters: &serde_json::Value, text: &str) -> serde_json::Value {
    let properties = parameters["properties"].as_object().cloned().unwrap_or_default();
    if properties.contains_key("text") {
        return json!({"text": text});
    }
    let required: Vec<&str> = parameters["required"]
        .as_array()
        .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let mut arguments = serde_json::Map::new();
    for (name, schema) in &properties {
        if !required.contains(&name.as_str()) && name != "query" {
            continue;
        }
        let value = match (schema["enum"].as_array().and_then(|e| e.first()), schema["type"].as_str()) {
            (Some(first), _) => first.clone(),
            (None, Some("integer" | "number")) => {
                json!(schema["minimum"].as_f64().unwrap_or(1.0).max(1.0) as i64)
            }
            (None, Some("boolean")) => json!(false),
            (None, Some("array")) => json!([]),
            (None, Some("object")) => json!({}),
            _ => json!(text),
        };
        arguments.insert(name.clone(), value);
    }
    serde_json::Value::Object(arguments)
}

/// Offers as a short list, as a shopping agent would write them.
fn compose_offers(query: &str, offers: &[serde_json::Value]) -> String {
    if offers.is_empty() {
        return format!("I couldn't find any offers for \"{query}\" right now.");
    }
    let mut text = match offers.len() {
        1 => format!("Here is one offer for \"{query}\":"),
        n => format!("Here are {n} offers for \"{query}\":"),
    };
    for o in offers {
        text.push_str(&format!(
            "\n- {} ({}; {}, until {}) [{}]",
            o["title"].as_str().unwrap_or("?"),
            o["requirement"].as_str().unwrap_or("?"),
            o["retailer"].as_str().unwrap_or("?"),
            o["expires"].as_str().unwrap_or("?"),
            o["id"].as_str().unwrap_or("?"),
        ));
    }
    text
}

/// Splits on sentence ends and on " and " / " also " between clauses.
fn clauses(text: &str) -> Vec<String> {
    crate::text::clauses(text).into_iter().map(str::to_owned).collect()
}

struct Answer {
    text: String,
    calls: Vec<ToolCall>,
}

impl Answer {
    fn text(text: &str) -> Answer {
        Answer { text: text.to_owned(), calls: Vec::new() }
    }
}

impl ChatModel for OfflineModel {
    fn model_name(&self) -> &str {
        OFFLINE_MODEL_NAME
    }

    fn stream(&self, request: ChatRequest) -> DeltaStream {
        let orchestrating = request.tools.iter().any(is_routing_tool);
        let has_results = matches!(request.messages.last(), Some(Message::Tool { .. }));
        let may_call = request.tool_choice != Some(super::ToolChoice::None) && !request.tools.is_empty();
        let can_search = may_call && request.tools.iter().any(|t| t.name == SEARCH_OFFERS);
        let aggregated: Option<Vec<serde_json::Value>> = request
            .tools
            .is_empty()
            .then(|| serde_json::from_str::<serde_json::Value>(request.last_user_text()).ok())
            .flatten()
            .and_then(|v| v["parts"].as_array().cloned());
        let answer = if request.response_format.is_some() {
            OfflineModel::decompose(&request)
        } else if let Some(parts) = aggregated {
            OfflineModel::aggregate(&parts)
        } else if orchestrating {
            self.orchestrate(&request)
        } else if has_results {
            OfflineModel::compose(&request)
        } else if can_search {
            let query = request.last_user_text().rsplit("\n\n").next().unwrap_or_default().trim();
            Answer {
                text: String::new(),
                calls: vec![ToolCall {
                    id: "offline_call_0".into(),
                    name: SEARCH_OFFERS.into(),
                    arguments: json!({"query": query}).to_string(),
                }],
            }
        } else if may_call {
            OfflineModel::delegate(&request)
        } else {
            Answer::text(&format!(
                "I'm running offline, with no model or vendor connected, so I can't look this up \
                 for real. You asked: \"{}\".",
                request.last_user_text().trim()
            ))
        };
        let input_tokens =
            request.messages.iter().map(|m| serde_json::to_string(m).map_or(0, |s| s.len() as u64 / 4)).sum();
        let mut deltas = vec![ModelDelta::ResponseId(format!("offline-{}", uuid::Uuid::new_v4().simple()))];
        let mut output_tokens = 0;
        for word in answer.text.split_inclusive(' ') {
            output_tokens += 1;
            deltas.push(ModelDelta::Text(word.to_owned()));
        }
        let finish = if answer.calls.is_empty() { FinishReason::Stop } else { FinishReason::ToolCalls };
        for (index, call) in answer.calls.iter().enumerate() {
            deltas.push(ModelDelta::ToolCallStart { index, id: call.id.clone(), name: call.name.clone() });
        }
        for call in answer.calls {
            output_tokens += call.arguments.len() as u64 / 4;
            deltas.push(ModelDelta::ToolCall(call));
        }
        deltas.push(ModelDelta::Finish(finish));
        deltas.push(ModelDelta::Usage(Usage::tokens(input_tokens, output_tokens)));
        Box::pin(stream::iter(deltas.into_iter().map(Ok)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ToolSpec, collect};

    fn model() -> OfflineModel {
        OfflineModel::new(vec!["receipt".into(), "points".into(), "scan".into(), "e-receipt".into()])
    }

    const ASK_SUPPORT: &str = "ask_support";
    const ASK_SHOPPING: &str = "ask_shopping";

    fn orchestrator_request(text: &str) -> ChatRequest {
        let settings = crate::routing::RoutingSettings {
            agents: ["support", "shopping"]
                .map(|a| crate::routing::RoutedAgent { agent: a.into(), description: String::new() })
                .into(),
            followup: Some(crate::routing::Followup::named("support")),
            fallback: "shopping".into(),
            categories: vec!["general".into()],
            guards: Default::default(),
            smalltalk: Default::default(),
            images: Vec::new(),
        };
        ChatRequest {
            messages: vec![Message::user(text)],
            tools: settings.tool_specs().into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn mixed_message_gets_one_call_per_intent_in_order() {
        let r =
            collect(model().stream(orchestrator_request("my receipt didn't scan and find me coffee deals")))
                .await
                .unwrap();
        let names: Vec<_> = r.tool_calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, [ASK_SUPPORT, ASK_SHOPPING]);
        let a0 = r.tool_calls[0].parse_arguments().unwrap();
        assert_eq!(a0["query"], "my receipt didn't scan");
        assert_eq!(a0["intent_count"], 2);
        assert_eq!(r.tool_calls[1].parse_arguments().unwrap()["query"], "find me coffee deals");
        assert!(!r.text.is_empty(), "a preamble comes before the calls");
    }

    #[tokio::test]
    async fn single_intent_keeps_the_exact_text() {
        let text = "Hi, where are my points from Tuesday?";
        let r = collect(model().stream(orchestrator_request(text))).await.unwrap();
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].name, ASK_SUPPORT);
        assert_eq!(r.tool_calls[0].parse_arguments().unwrap()["query"], text);
    }

    #[tokio::test]
    async fn greetings_take_the_fastpath() {
        let r = collect(model().stream(orchestrator_request("hello!"))).await.unwrap();
        assert!(r.tool_calls.is_empty());
        assert_eq!(r.finish, Some(FinishReason::Stop));
        assert!(r.text.starts_with("Hi!"));
    }

    #[tokio::test]
    async fn offered_search_offers_it_searches_with_the_users_words_then_lists_the_results() {
        let search =
            ToolSpec { name: SEARCH_OFFERS.into(), description: String::new(), parameters: json!({}) };
        let mut request = ChatRequest {
            messages: vec![Message::system("shop"), Message::user("find me coffee deals")],
            tools: vec![search].into(),
            ..Default::default()
        };
        let r = collect(model().stream(request.clone())).await.unwrap();
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].parse_arguments().unwrap(), json!({"query": "find me coffee deals"}));
        request.messages.push(Message::Assistant { content: None, tool_calls: r.tool_calls.clone() });
        let result = json!({"query": "find me coffee deals", "offers": [{"id": "off-0001", "title": "500 points on X Coffee",
            "requirement": "Buy 1 X Coffee", "retailer": "any store", "expires": "2027-01-01"}]});
        request
            .messages
            .push(Message::Tool { call_id: "offline_call_0".into(), content: result.to_string() });
        let r = collect(model().stream(request)).await.unwrap();
        assert!(r.tool_calls.is_empty());
        assert_eq!(
            r.text,
            "Here is one offer for \"find me coffee deals\":\n- 500 points on X Coffee (Buy 1 X Coffee; any store, until 2027-01-01) [off-0001]"
        );
    }

    #[test]
    fn parts_split_at_commas_and_conjunctions_in_any_listed_language() {
        let model = OfflineModel::new(vec!["receipt".into(), "recibo".into(), "punkte".into()]);
        assert_eq!(
            model.route("receipt issue, coffee deals"),
            [
                (super::ASK_SUPPORT, "receipt issue".to_owned()),
                (super::ASK_SHOPPING, "coffee deals".to_owned())
            ]
        );
        let spanish = model.route("mi recibo no se escaneó y busca ofertas de café");
        assert_eq!(
            spanish.iter().map(|(tool, _)| *tool).collect::<Vec<_>>(),
            [super::ASK_SUPPORT, super::ASK_SHOPPING]
        );
        assert_eq!(
            model.route("hi, any coffee deals?"),
            [(super::ASK_SHOPPING, "hi, any coffee deals?".to_owned())]
        );
    }
    fn tool(name: &str, description: &str) -> ToolSpec {
        ToolSpec { name: name.into(), description: description.into(), parameters: json!({"type": "object"}) }
    }

    fn decomposition_request(text: &str) -> ChatRequest {
        ChatRequest {
            messages: vec![Message::system("split"), Message::user(text)],
            tools: vec![
                tool("agent__deal_finder", "Finds grocery deals, offers and products."),
                tool("agent__help_desk", "Answers questions about receipts, points and the account."),
            ]
            .into(),
            response_format: Some(super::super::ResponseFormat { name: "d".into(), schema: json!({}) }),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_decomposition_forks_the_parts_that_different_tools_answer() {
        let r =
            collect(model().stream(decomposition_request("my points are missing and find me coffee deals")))
                .await
                .unwrap();
        let answer: serde_json::Value = serde_json::from_str(&r.text).unwrap();
        assert_eq!(
            answer,
            json!({"should_fork": true, "sub_tasks": [
                {"id": "1", "description": "my points are missing", "allowed_tools": ["agent__help_desk"]},
                {"id": "2", "description": "find me coffee deals", "allowed_tools": ["agent__deal_finder"]},
            ]})
        );
        let one =
            collect(model().stream(decomposition_request("find me coffee and tea deals"))).await.unwrap();
        assert_eq!(serde_json::from_str::<serde_json::Value>(&one.text).unwrap()["should_fork"], false);
    }

    #[tokio::test]
    async fn an_aggregation_joins_the_answers_and_names_the_parts_that_failed() {
        let parts = json!({"question": "q", "parts": [
            {"id": "1", "description": "points", "status": "ok", "answer": "Points take a day."},
            {"id": "2", "description": "coffee deals", "status": "timeout", "error": "slow"},
        ]});
        let request = ChatRequest {
            messages: vec![Message::system("join"), Message::user(parts.to_string())],
            ..Default::default()
        };
        let r = collect(model().stream(request)).await.unwrap();
        assert_eq!(
            r.text,
            "Points take a day.\n\nI couldn't answer \"coffee deals\" right now (it took too long)."
        );
    }
}
