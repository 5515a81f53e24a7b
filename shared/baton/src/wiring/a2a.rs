//! A2A in the composition root: an agent whose entry has `remote: {a2a: …}` is an
//! [`A2aAgent`], and the card `serve` and the Lambda show for the entry agent.

use std::sync::Arc;
use std::time::Duration;

use crate::a2a::{A2aAgent, A2aLimits, BearerToken, CardSource};
use crate::agent::Agent;
use crate::config::agents::AgentSpec;
use crate::config::{Config, ConfigError};

/// Longest a remote A2A agent's connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The A2A agent of `spec` (at `index` in the agents' list), or `None` when it is not one. A
/// configured token variable that is unset or empty is a configuration error.
pub(super) fn a2a_agent(
    config: &Config,
    index: usize,
    spec: &AgentSpec,
) -> Result<Option<Arc<dyn Agent>>, ConfigError> {
    let Some(remote) = &spec.remote else { return Ok(None) };
    let Some(url) = &remote.a2a else { return Ok(None) };
    let token = match &remote.token_env {
        None => None,
        Some(var) => match std::env::var(var) {
            Ok(token) if !token.trim().is_empty() => Some(BearerToken::new(token.trim())),
            _ => {
                let reason = format!("`token_env`: the environment variable {var} is not set");
                return Err(config.agents.error(Some(index), "remote", reason));
            }
        },
    };
    let client = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .map_err(|e| config.agents.error(Some(index), "remote", format!("no HTTP client: {e}")))?;
    let limits = A2aLimits { idle_timeout: super::REMOTE_IDLE_TIMEOUT, ..A2aLimits::default() };
    Ok(Some(Arc::new(A2aAgent::new(&spec.name, url, client, token, limits))))
}

/// What the A2A card says of the entry agent: its name and description, and a skill per agent
/// and tool it lists (each described by its own entry, a tool by its name).
pub fn a2a_card(config: &Config) -> CardSource {
    let Some(entry) = config.agents.get(&config.agents.entry) else { return CardSource::default() };
    let agents = entry.agents.iter().map(|name| {
        let description = config.agents.get(name).map(|a| a.description.as_str()).unwrap_or_default();
        CardSource::skill(name, description, "agent")
    });
    let tools = entry.tools.iter().map(|name| CardSource::skill(name, "", "tool"));
    CardSource {
        name: entry.name.clone(),
        description: entry.description.clone(),
        skills: agents.chain(tools).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> Config {
        Config::default().with_yaml(yaml, "team.yaml").unwrap()
    }

    const TEAM: &str = "entry: lead\nagents:\n  - name: lead\n    description: Answers everything.\n    instruction: Lead.\n    agents: [far]\n  - name: far\n    description: Knows the weather.\n    remote: {a2a: \"http://127.0.0.1:9/\", token_env: BATON_TEST_A2A_TOKEN_UNSET}\n";

    #[test]
    fn the_card_lists_the_entry_agents_agents_as_skills() {
        let card = a2a_card(&config(TEAM));
        assert_eq!(card.name, "lead");
        assert_eq!(card.description, "Answers everything.");
        assert_eq!(card.skills[0].id, "far");
        assert_eq!(card.skills[0].description, "Knows the weather.");
    }

    #[test]
    fn a_missing_token_is_a_configuration_error_that_names_the_variable() {
        let config = config(TEAM);
        let far = config.agents.get("far").unwrap();
        let err = a2a_agent(&config, 1, far).err().expect("refused").to_string();
        assert!(err.contains("BATON_TEST_A2A_TOKEN_UNSET"), "{err}");
        let lead = config.agents.get("lead").unwrap();
        assert!(a2a_agent(&config, 0, lead).unwrap().is_none());
    }

    #[test]
    fn remote_takes_exactly_one_way_and_an_http_url() {
        let bad = |remote: &str| {
            let yaml =
                TEAM.replace("{a2a: \"http://127.0.0.1:9/\", token_env: BATON_TEST_A2A_TOKEN_UNSET}", remote);
            Config::default()
                .with_yaml(&yaml, "team.yaml")
                .and_then(|c| c.validate().map(|_| c))
                .err()
                .map(|e| e.to_string())
        };
        assert!(bad("{a2a: \"ftp://x\"}").unwrap().contains("http(s) URL"));
        assert!(bad("{a2a: \"http://x\", url: \"http://y\"}").unwrap().contains("exactly one"));
        assert!(
            bad("{url: \"http://y\", token_env: T}\n    instruction: Far.")
                .unwrap()
                .contains("goes with `a2a`")
        );
        assert_eq!(bad("{a2a: \"https://x\"}"), None, "no instruction needed");
        let listed = TEAM.replace("    remote:", "    tools: [lookup]\n    remote:");
        let err = Config::default().with_yaml(&listed, "team.yaml").and_then(|c| c.validate()).unwrap_err();
        assert!(err.to_string().contains("lists no tools"), "{err}");
    }
}
