//! The agent card Baton serves at `/.well-known/agent-card.json`: the entry agent's name and
//! description, a skill per agent and tool it can use, streaming on, push notifications off,
//! and the security scheme of the deployment's auth mode.

use serde_json::{Map, Value, json};

use super::types::{
    AgentCapabilities, AgentCard, AgentInterface, AgentSkill, JSONRPC_BINDING, PROTOCOL_VERSION,
};

/// The path of the entry agent's JSON-RPC endpoint, relative to the service's root; another
/// served agent's is `/a2a/{name}`, its card under it ([`agent_path`]).
pub const RPC_PATH: &str = "/a2a";

/// The JSON-RPC path of the served agent `name`, or of the entry agent (`None`).
pub fn agent_path(name: Option<&str>) -> String {
    match name {
        None => RPC_PATH.to_owned(),
        Some(name) => format!("{RPC_PATH}/{name}"),
    }
}

/// What the card says of the served agent (from the configuration, once at start).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CardSource {
    /// The agent's name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its skills: one per agent and tool it can use.
    pub skills: Vec<AgentSkill>,
}

impl CardSource {
    /// A skill named `id` doing `description`.
    pub fn skill(id: &str, description: &str, tag: &str) -> AgentSkill {
        AgentSkill {
            id: id.to_owned(),
            name: id.to_owned(),
            description: if description.is_empty() { id.to_owned() } else { description.to_owned() },
            tags: vec![tag.to_owned()],
        }
    }
}

/// How a caller proves who it is, as the card declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Security {
    /// No scheme (the local mode: a header names the user).
    None,
    /// A bearer JWT.
    BearerJwt,
    /// AWS SigV4-signed requests (IAM).
    SigV4,
}

/// The card of `source` whose JSON-RPC endpoint is `rpc_url`.
pub(crate) fn card(source: &CardSource, rpc_url: &str, security: Security) -> AgentCard {
    let (schemes, requirements) = match security {
        Security::None => (Map::new(), Vec::new()),
        Security::BearerJwt => {
            scheme("bearer", json!({"httpAuthSecurityScheme": {"scheme": "Bearer", "bearerFormat": "JWT"}}))
        }
        Security::SigV4 => scheme(
            "sigv4",
            json!({"apiKeySecurityScheme": {"location": "header", "name": "Authorization",
                "description": "AWS Signature Version 4 (IAM): the request is signed for execute-api"}}),
        ),
    };
    let description = if source.description.is_empty() {
        format!("The {} agent.", source.name)
    } else {
        source.description.clone()
    };
    AgentCard {
        name: source.name.clone(),
        description,
        supported_interfaces: vec![AgentInterface {
            url: rpc_url.to_owned(),
            protocol_binding: JSONRPC_BINDING.into(),
            protocol_version: PROTOCOL_VERSION.into(),
        }],
        version: env!("CARGO_PKG_VERSION").into(),
        capabilities: AgentCapabilities { streaming: true, push_notifications: false },
        security_schemes: schemes,
        security_requirements: requirements,
        default_input_modes: vec!["text/plain".into()],
        default_output_modes: vec!["text/plain".into()],
        skills: source.skills.clone(),
    }
}

fn scheme(name: &str, scheme: Value) -> (Map<String, Value>, Vec<Value>) {
    let mut schemes = Map::new();
    schemes.insert(name.to_owned(), scheme);
    (schemes, vec![json!({"schemes": {name: {"list": []}}})])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_card_points_at_the_json_rpc_endpoint_and_declares_the_auth_mode() {
        let source = CardSource {
            name: "concierge".into(),
            description: String::new(),
            skills: vec![CardSource::skill("deals", "Finds deals.", "agent")],
        };
        let open = serde_json::to_value(card(&source, "http://127.0.0.1:8080/a2a", Security::None)).unwrap();
        assert_eq!(open["supportedInterfaces"][0]["url"], "http://127.0.0.1:8080/a2a");
        assert_eq!(open["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
        assert_eq!(open["capabilities"]["streaming"], true);
        assert_eq!(open["description"], "The concierge agent.");
        assert_eq!(open.get("securitySchemes"), None);
        let jwt = serde_json::to_value(card(&source, "https://x", Security::BearerJwt)).unwrap();
        assert_eq!(jwt["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"], "Bearer");
        assert_eq!(jwt["securityRequirements"][0]["schemes"]["bearer"]["list"], json!([]));
        assert_eq!(agent_path(None), "/a2a");
        assert_eq!(agent_path(Some("deal_finder")), "/a2a/deal_finder");
    }
}
