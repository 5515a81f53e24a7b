//! What the offline model knows of the reference tools: it searches offers with the user's words
//! when offered `search_offers`, lists the offers it finds as a shopping agent would, and quotes
//! a help-center article with its citation.

use baton::model::offline::OfflineSkill;
use serde_json::Value;

use crate::shopping::tools::SEARCH_OFFERS;

/// The offline model's skill with the reference tools.
#[derive(Debug, Default)]
pub(crate) struct ReferenceSkill;

impl OfflineSkill for ReferenceSkill {
    fn compose(&self, result: &Value) -> Option<String> {
        if let Some(offers) = result["offers"].as_array() {
            return Some(compose_offers(result["query"].as_str().unwrap_or_default(), offers));
        }
        if let (Some(clipped), Some(card)) = (result.get("clipped"), result["card"].as_array()) {
            return Some(format!(
                "Clipped {} [{}] to your card; it now holds {} offer{}.",
                clipped["title"].as_str().unwrap_or("?"),
                clipped["id"].as_str().unwrap_or("?"),
                card.len(),
                if card.len() == 1 { "" } else { "s" }
            ));
        }
        let article = result["articles"].as_array().and_then(|a| a.first())?;
        Some(format!(
            "{} (Source: \"{}\", {})",
            article["text"].as_str().unwrap_or_default().trim(),
            article["title"].as_str().unwrap_or("?"),
            article["citation"].as_str().unwrap_or("?"),
        ))
    }

    fn search_tool(&self) -> Option<&str> {
        Some(SEARCH_OFFERS)
    }
}

/// Offers as a short list, as a shopping agent would write them.
fn compose_offers(query: &str, offers: &[Value]) -> String {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use baton::model::offline::OfflineModel;
    use baton::model::{ChatModel, ChatRequest, Message, ToolSpec, collect};
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn offered_search_offers_it_searches_with_the_users_words_then_lists_the_results() {
        let model = OfflineModel::default().with_skills(vec![Arc::new(ReferenceSkill)]);
        let search =
            ToolSpec { name: SEARCH_OFFERS.into(), description: String::new(), parameters: json!({}) };
        let mut request = ChatRequest {
            messages: vec![Message::system("shop"), Message::user("find me coffee deals")],
            tools: vec![search].into(),
            ..Default::default()
        };
        let r = collect(model.stream(request.clone())).await.unwrap();
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].parse_arguments().unwrap(), json!({"query": "find me coffee deals"}));
        request.messages.push(Message::Assistant { content: None, tool_calls: r.tool_calls.clone() });
        let result = json!({"query": "find me coffee deals", "offers": [{"id": "off-0001", "title": "500 points on X Coffee",
            "requirement": "Buy 1 X Coffee", "retailer": "any store", "expires": "2027-01-01"}]});
        request
            .messages
            .push(Message::Tool { call_id: "offline_call_0".into(), content: result.to_string() });
        let r = collect(model.stream(request)).await.unwrap();
        assert!(r.tool_calls.is_empty());
        assert_eq!(
            r.text,
            "Here is one offer for \"find me coffee deals\":\n- 500 points on X Coffee (Buy 1 X Coffee; any store, until 2027-01-01) [off-0001]"
        );
    }

    #[test]
    fn an_article_is_quoted_with_its_citation_and_other_results_are_not_read() {
        let article = json!({"query": "q", "articles": [{"title": "Scanning", "text": " Hold still. ", "citation": "help/scan"}]});
        assert_eq!(
            ReferenceSkill.compose(&article).unwrap(),
            "Hold still. (Source: \"Scanning\", help/scan)"
        );
        assert_eq!(ReferenceSkill.compose(&json!({"answer": "x"})), None);
        assert_eq!(
            ReferenceSkill.compose(&json!({"query": "tea", "offers": []})).unwrap(),
            "I couldn't find any offers for \"tea\" right now."
        );
    }
}
