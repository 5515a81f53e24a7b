//! The offline model: deterministic and rule-based, so the whole pipeline runs on a fresh machine
//! with no API key. It is a demo and test aid, never a claim about routing quality.
//!
//! - Offered routing tools (`ask_<agent>`, those with an `intent_count` parameter), it answers
//!   smalltalk directly (the fastpath) and otherwise routes clause by clause by the configured
//!   keywords (`offline_model.keywords`, a list per agent): a clause that names an agent's keyword
//!   goes to that agent's tool, the rest to the first routing tool whose agent has no keywords,
//!   each call carrying the user's own words.
//! - Offered a tool an [`OfflineSkill`] searches with, it calls it with the user's words.
//! - Offered other tools (a configured agent's tools and agents), it answers smalltalk
//!   directly and otherwise calls the tools whose name and description share topic words with
//!   the message, each with its part of the user's words (the first tool when none matches).
//! - Given tool results, it composes an answer from them: what a skill reads from a result, an
//!   agent's answer as its text, anything else as a list.
//! - Asked for a mini-agent decomposition (a request with a response format), it forks when
//!   parts of the message joined by clear conjunctions (`and`, `also`, `plus`, sentence ends)
//!   go to different offered tools, one sub-task per tool.
//! - Asked to aggregate mini-agents' outcomes (a user message that is JSON with `parts`), it
//!   joins the answers in order and says which parts failed or took too long.
//! - Otherwise it says plainly that it is offline and what it was asked.
//!
//! A deployment's own tools teach it their results through [`OfflineSkill`]s (see
//! `wiring::Extension::offline_skill`).

use std::sync::Arc;

use futures::stream;
use serde_json::json;

use super::ToolSpec;
use super::{ChatModel, ChatRequest, DeltaStream, FinishReason, Message, ModelDelta, ToolCall};
use crate::event::Usage;
use crate::text::{self as guard, Smalltalk};

/// What the offline model knows of a deployment's tools: how to read their results, and which
/// tool it searches with the user's words when offered.
pub trait OfflineSkill: Send + Sync + std::fmt::Debug {
    /// `result` (a tool's JSON result) in words, or `None` when it is not one this skill reads.
    fn compose(&self, result: &serde_json::Value) -> Option<String>;

    /// A tool the model calls at once with the user's words (`{"query": ...}`) when offered.
    fn search_tool(&self) -> Option<&str> {
        None
    }
}

/// Whether `tool` is a routing tool (`ask_<agent>`): it takes an `intent_count`.
fn is_routing_tool(tool: &ToolSpec) -> bool {
    tool.parameters.pointer("/properties/intent_count").is_some()
}

/// Where a clause of the user's message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// To the routing tool at this index of the keyword lists.
    Agent(usize),
    /// To the default routing tool (an agent with no keywords).
    Default,
    /// Nowhere of its own ("hi", "also", "thanks"): it joins a neighbour.
    Weak,
}

/// The offline model's name in `usage` and `completed` events.
pub(crate) const OFFLINE_MODEL_NAME: &str = "offline";

/// The deterministic rule-based model.
#[derive(Debug, Clone, Default)]
pub struct OfflineModel {
    /// Keywords (lowercase; a phrase may have spaces) per routing tool, in order.
    keywords: Vec<(String, Vec<String>)>,
    skills: Vec<Arc<dyn OfflineSkill>>,
}

impl OfflineModel {
    /// A model routing by these keywords per routing tool (`ask_<agent>`; see the module docs).
    pub(crate) fn new(keywords: Vec<(String, Vec<String>)>) -> OfflineModel {
        let keywords = keywords
            .into_iter()
            .map(|(agent, words)| (agent, words.into_iter().map(|k| k.to_lowercase()).collect()))
            .collect();
        OfflineModel { keywords, skills: Vec::new() }
    }

    /// This model, also reading results and searching with `skills`.
    pub fn with_skills(mut self, skills: Vec<Arc<dyn OfflineSkill>>) -> OfflineModel {
        self.skills = skills;
        self
    }

    /// The first routing tool whose keywords `clause` names.
    fn agent_of(&self, clause: &str) -> Option<usize> {
        let lower = clause.to_lowercase();
        let words = guard::words(clause);
        self.keywords.iter().position(|(_, keywords)| {
            keywords.iter().any(|k| {
                if k.contains(' ') { lower.contains(k.as_str()) } else { words.iter().any(|w| w == k) }
            })
        })
    }

    /// Splits a message into its agents' parts, in the order they appear.
    fn route(&self, text: &str) -> Vec<(Role, String)> {
        let mut parts: Vec<(Role, String)> = Vec::new();
        for clause in clauses(text) {
            let tool = self.agent_of(&clause).map_or(Role::Default, Role::Agent);
            // No topic of its own ("hi", "also", "thanks"): fold it into its neighbour.
            let weak =
                guard::content_words(&clause).is_empty() || guard::classify_smalltalk(&clause).is_some();
            match parts.last_mut() {
                Some((last, t)) if *last == tool || weak => {
                    t.push(' ');
                    t.push_str(&clause);
                }
                _ if weak => parts.push((Role::Weak, clause)),
                _ => parts.push((tool, clause)),
            }
        }
        // A leading weak clause takes the class of what follows it.
        if parts.len() > 1 && parts[0].0 == Role::Weak {
            let (_, lead) = parts.remove(0);
            parts[0].1 = format!("{lead} {}", parts[0].1);
        }
        match parts.len() {
            0 => vec![(Role::Default, text.trim().to_owned())],
            1 => {
                let tool = if parts[0].0 == Role::Weak { Role::Default } else { parts[0].0 };
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
                    "Hi! I'm running offline, and I pass your questions to the agents that answer \
                     them. What would you like to do?"
                }
                Smalltalk::Acknowledgement => "You're welcome! Anything else I can help with?",
                Smalltalk::Chitchat => {
                    "I'm Baton's offline assistant: I pass your questions to the agents that \
                     answer them. How can I help?"
                }
            });
        }
        // The user's words are routed clause by clause; an attached image's note (after them)
        // only decides a single part: a note that names an agent's keyword makes it that agent's.
        let (said, note) = match text.find("\n[The user attached an image") {
            Some(at) => (&text[..at], Some(&text[at..])),
            None => (text, None),
        };
        let mut routes = self.route(said);
        if let (Some(note), [(Role::Default, query)]) = (note, routes.as_slice()) {
            if let Some(agent) = self.agent_of(note) {
                routes = vec![(Role::Agent(agent), query.clone())];
            }
        }
        let count = routes.len();
        let preamble = match (count, routes[0].0) {
            (1, Role::Agent(_)) => "Let me check that for you.",
            (1, _) => "Let me look that up.",
            _ => "I'll look into both of those at once.",
        };
        let calls = routes
            .into_iter()
            .enumerate()
            .filter_map(|(i, (role, query))| {
                let tool = self.routing_tool(request, role)?;
                let args = routing_arguments(&tool.parameters, &query, count);
                Some(ToolCall {
                    id: format!("offline_call_{i}"),
                    name: tool.name.clone(),
                    arguments: args.to_string(),
                })
            })
            .collect();
        Answer { text: preamble.to_owned(), calls }
    }

    /// The routing tool a clause of `role` goes to: its agent's when offered, else the default
    /// one (the first whose agent has no keywords), else the first routing tool.
    fn routing_tool<'r>(&self, request: &'r ChatRequest, role: Role) -> Option<&'r ToolSpec> {
        let routing: Vec<&ToolSpec> = request.tools.iter().filter(|t| is_routing_tool(t)).collect();
        let keyworded = |t: &ToolSpec| self.keywords.iter().any(|(tool, _)| *tool == t.name);
        let default = routing.iter().copied().find(|t| !keyworded(t)).or(routing.first().copied());
        match role {
            Role::Agent(i) => routing.iter().copied().find(|t| t.name == self.keywords[i].0).or(default),
            Role::Default | Role::Weak => default,
        }
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

    fn compose(&self, request: &ChatRequest) -> Answer {
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
            if let Some(words) = self.skills.iter().find_map(|skill| skill.compose(&value)) {
                text.push_str(separator);
                text.push_str(&words);
            } else if value["shown_to_user"] == json!(true) {
                // The user has read it already.
            } else if let Some(answer) = value["answer"].as_str() {
                text.push_str(separator);
                text.push_str(answer.trim());
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

/// The arguments of a routing call: the user's words as the `query`, the intent count, and any
/// other argument the tool's schema asks for: `general` for a category offered with that value,
/// the words (cut to its length) for a string with a `maxLength` (a one-line summary).
fn routing_arguments(parameters: &serde_json::Value, query: &str, count: usize) -> serde_json::Value {
    let mut args = json!({"query": query, "intent_count": count});
    let properties = parameters["properties"].as_object().cloned().unwrap_or_default();
    for (name, schema) in properties {
        if ["query", "intent_count", "prior_context"].contains(&name.as_str()) {
            continue;
        }
        if let Some(values) = schema["enum"].as_array() {
            if values.iter().any(|v| v == "general") {
                args[name] = json!("general");
            }
        } else if let Some(max) = schema["maxLength"].as_u64() {
            args[name] = json!(query.chars().take(max as usize).collect::<String>());
        }
    }
    args
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
        let search = self
            .skills
            .iter()
            .filter_map(|skill| skill.search_tool())
            .find(|name| may_call && request.tools.iter().any(|t| t.name == *name));
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
            self.compose(&request)
        } else if let Some(search) = search {
            let query = request.last_user_text().rsplit("\n\n").next().unwrap_or_default().trim();
            Answer {
                text: String::new(),
                calls: vec![ToolCall {
                    id: "offline_call_0".into(),
                    name: search.to_owned(),
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

    const ASK_HELPDESK: &str = "ask_helpdesk";
    const ASK_DEALS: &str = "ask_deals";

    fn model() -> OfflineModel {
        let words = ["receipt", "points", "scan", "e-receipt"].map(String::from).to_vec();
        OfflineModel::new(vec![(ASK_HELPDESK.into(), words)])
    }

    fn orchestrator_request(text: &str) -> ChatRequest {
        let settings = crate::routing::RoutingSettings {
            agents: ["helpdesk", "deals"]
                .map(|a| crate::routing::RoutedAgent { agent: a.into(), description: String::new() })
                .into(),
            followup: Some(crate::routing::Followup::named("helpdesk")),
            fallback: "deals".into(),
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
        assert_eq!(names, [ASK_HELPDESK, ASK_DEALS]);
        let a0 = r.tool_calls[0].parse_arguments().unwrap();
        assert_eq!(a0["query"], "my receipt didn't scan");
        assert_eq!(a0["intent_count"], 2);
        // The follow-up tool's extra arguments, read from its schema.
        assert_eq!(a0["helpdesk_category"], "general");
        assert_eq!(a0["helpdesk_summary"], "my receipt didn't scan");
        let a1 = r.tool_calls[1].parse_arguments().unwrap();
        assert_eq!(a1, json!({"query": "find me coffee deals", "intent_count": 2}));
        assert!(!r.text.is_empty(), "a preamble comes before the calls");
    }

    #[tokio::test]
    async fn single_intent_keeps_the_exact_text() {
        let text = "Hi, where are my points from Tuesday?";
        let r = collect(model().stream(orchestrator_request(text))).await.unwrap();
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].name, ASK_HELPDESK);
        assert_eq!(r.tool_calls[0].parse_arguments().unwrap()["query"], text);
    }

    #[tokio::test]
    async fn an_image_note_naming_a_keyword_routes_a_single_part() {
        let text = "is this one ok?\n[The user attached an image: a receipt]";
        let r = collect(model().stream(orchestrator_request(text))).await.unwrap();
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].name, ASK_HELPDESK);
        let plain = collect(model().stream(orchestrator_request("is this one ok?"))).await.unwrap();
        assert_eq!(plain.tool_calls[0].name, ASK_DEALS);
    }

    #[tokio::test]
    async fn greetings_take_the_fastpath() {
        let r = collect(model().stream(orchestrator_request("hello!"))).await.unwrap();
        assert!(r.tool_calls.is_empty());
        assert_eq!(r.finish, Some(FinishReason::Stop));
        assert!(r.text.starts_with("Hi!"));
    }

    /// A skill that searches with `lookup` and reads its results.
    #[derive(Debug)]
    struct Lookup;

    impl OfflineSkill for Lookup {
        fn compose(&self, result: &serde_json::Value) -> Option<String> {
            result["hits"].as_array().map(|hits| format!("{} hits for {}", hits.len(), result["query"]))
        }

        fn search_tool(&self) -> Option<&str> {
            Some("lookup")
        }
    }

    #[tokio::test]
    async fn a_skill_searches_with_the_users_words_and_reads_its_results() {
        let model = model().with_skills(vec![Arc::new(Lookup)]);
        let lookup = ToolSpec { name: "lookup".into(), description: String::new(), parameters: json!({}) };
        let other = ToolSpec { name: "other".into(), description: String::new(), parameters: json!({}) };
        let mut request = ChatRequest {
            messages: vec![Message::system("s"), Message::user("find me coffee deals")],
            tools: vec![other, lookup].into(),
            ..Default::default()
        };
        let r = collect(model.stream(request.clone())).await.unwrap();
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].name, "lookup");
        assert_eq!(r.tool_calls[0].parse_arguments().unwrap(), json!({"query": "find me coffee deals"}));
        request.messages.push(Message::Assistant { content: None, tool_calls: r.tool_calls.clone() });
        let result = json!({"query": "coffee", "hits": [1, 2]});
        request
            .messages
            .push(Message::Tool { call_id: "offline_call_0".into(), content: result.to_string() });
        let r = collect(model.stream(request.clone())).await.unwrap();
        assert_eq!(r.text, "2 hits for \"coffee\"");
        // Without the skill, a result it does not know is listed as it is.
        let r = collect(self::model().stream(request)).await.unwrap();
        assert!(r.text.starts_with("Here is what I found:\n- {"), "{}", r.text);
    }

    #[test]
    fn parts_split_at_commas_and_conjunctions_in_any_listed_language() {
        let words = ["receipt", "recibo", "punkte"].map(String::from).to_vec();
        let model = OfflineModel::new(vec![(ASK_HELPDESK.into(), words)]);
        assert_eq!(
            model.route("receipt issue, coffee deals"),
            [(Role::Agent(0), "receipt issue".to_owned()), (Role::Default, "coffee deals".to_owned())]
        );
        let spanish = model.route("mi recibo no se escaneó y busca ofertas de café");
        assert_eq!(
            spanish.iter().map(|(role, _)| *role).collect::<Vec<_>>(),
            [Role::Agent(0), Role::Default]
        );
        assert_eq!(
            model.route("hi, any coffee deals?"),
            [(Role::Default, "hi, any coffee deals?".to_owned())]
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
