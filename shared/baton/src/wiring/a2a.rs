//! A2A in the composition root: an agent whose entry has `remote: {a2a: …}` is an
//! [`A2aAgent`]; the card `serve` and the Lambda show for the entry agent; and the agents of
//! `a2a: {agents: [...]}`, each served with its own orchestrator and card.

use std::sync::Arc;
use std::time::Duration;

use crate::a2a::{A2aAgent, A2aLimits, BearerToken, CardSource, RequestSigner, SigningScope};
use crate::agent::Agent;
use crate::config::agents::AgentSpec;
use crate::config::{Config, ConfigError};

/// Longest a remote A2A agent's connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The A2A agent of `spec` (at `index` in the agents' list), or `None` when it is not one, its
/// calls signed by `signer` with `auth: sigv4`. A configured token variable that is unset or
/// empty, or `auth: sigv4` without a signer, is a configuration error.
pub(super) fn a2a_agent(
    config: &Config,
    index: usize,
    spec: &AgentSpec,
    signer: Option<&Arc<dyn RequestSigner>>,
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
    let agent = A2aAgent::new(&spec.name, url, client, token, limits);
    let agent = match (remote.auth, signer) {
        (None, _) => agent,
        (Some(_), Some(signer)) => {
            let service = remote.service.clone().unwrap_or_else(|| "execute-api".to_owned());
            agent.with_signer(signer.clone(), SigningScope { service, region: remote.region.clone() })
        }
        (Some(_), None) => {
            let reason =
                "`auth: sigv4`: this build signs no request (the AWS deployment's signer is not plugged in)";
            return Err(config.agents.error(Some(index), "remote", reason));
        }
    };
    Ok(Some(Arc::new(agent)))
}

/// What the A2A card says of the entry agent: its name and description, and a skill per agent
/// and tool it lists (each described by its own entry, a tool by its name).
pub fn a2a_card(config: &Config) -> CardSource {
    card_of(config, &config.agents.entry)
}

/// An agent served as an A2A agent besides the entry agent (`a2a: {agents: [...]}`): the
/// orchestrator that runs its turns and what its card says.
#[derive(Clone)]
pub struct Served {
    /// Its turns, with it as their entry agent.
    pub orchestrator: Arc<crate::orchestrator::Orchestrator>,
    /// Its card.
    pub card: CardSource,
}

/// The agents of `a2a: {agents: [...]}` other than the entry agent, each built as the entry agent
/// of its own orchestrator (run here, as [`super::build_agent`] builds it), with its card.
pub fn a2a_served(config: &Config, backends: &super::Backends) -> Result<Vec<Served>, ConfigError> {
    let served = config.agents.a2a_served.iter().filter(|name| **name != config.agents.entry);
    served
        .map(|name| {
            let orchestrator = super::orchestrator_of(config, name, backends)?;
            Ok(Served { orchestrator, card: card_of(config, name) })
        })
        .collect()
}

fn card_of(config: &Config, name: &str) -> CardSource {
    let Some(entry) = config.agents.get(name) else { return CardSource::default() };
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
    fn served_agents_are_config_checked_with_their_line_and_built_with_their_own_card() {
        let team = TEAM.replace(
            "    remote: {a2a: \"http://127.0.0.1:9/\", token_env: BATON_TEST_A2A_TOKEN_UNSET}\n",
            "    instruction: Far.\n",
        );
        let ok = config(&format!("{team}a2a: {{agents: [lead, far]}}\n"));
        assert_eq!(ok.agents.a2a_served, ["lead", "far"]);
        let served = a2a_served(&ok, &crate::wiring::testing::backends()).unwrap();
        assert_eq!(served.len(), 1, "the entry agent is served at /a2a already");
        assert_eq!(served[0].card.name, "far");
        assert_eq!(served[0].card.description, "Knows the weather.");
        assert_eq!(served[0].orchestrator.entry().name(), "far");
        let refused = |tail: &str| {
            Config::default().with_yaml(&format!("{team}{tail}"), "team.yaml").unwrap_err().to_string()
        };
        let unknown = refused("a2a: {agents: [nobody]}\n");
        assert!(unknown.contains("line 10: a2a: unknown agent `nobody`"), "{unknown}");
        assert!(refused("a2a: {agents: [far, far]}\n").contains("listed twice"));
        assert!(refused("a2a: {agent: [far]}\n").contains("unknown field"));
        let remote = Config::default()
            .with_yaml(&format!("{TEAM}a2a: {{agents: [far]}}\n"), "team.yaml")
            .unwrap_err()
            .to_string();
        assert!(remote.contains("has `remote:`"), "{remote}");
    }

    #[test]
    fn a_missing_token_is_a_configuration_error_that_names_the_variable() {
        let config = config(TEAM);
        let far = config.agents.get("far").unwrap();
        let err = a2a_agent(&config, 1, far, None).err().expect("refused").to_string();
        assert!(err.contains("BATON_TEST_A2A_TOKEN_UNSET"), "{err}");
        let lead = config.agents.get("lead").unwrap();
        assert!(a2a_agent(&config, 0, lead, None).unwrap().is_none());
        let signed = TEAM.replace("token_env: BATON_TEST_A2A_TOKEN_UNSET", "auth: sigv4, region: eu-west-1");
        let signed = Config::default().with_yaml(&signed, "team.yaml").unwrap();
        let err = a2a_agent(&signed, 1, signed.agents.get("far").unwrap(), None).err().expect("refused");
        assert!(err.to_string().contains("signs no request"), "{err}");
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
        assert!(
            bad("{url: \"http://y\", auth: sigv4}\n    instruction: Far.")
                .unwrap()
                .contains("`auth` goes with `a2a`")
        );
        assert!(bad("{a2a: \"https://x\", auth: sigv4, token_env: T}").unwrap().contains("not both"));
        assert!(bad("{a2a: \"https://x\", region: eu-west-1}").unwrap().contains("go with `auth: sigv4`"));
        assert!(
            bad("{a2a: \"https://x\", auth: sigv4, service: \"a b\"}").unwrap().contains("letters, digits")
        );
        assert!(bad("{a2a: \"https://x\", auth: bearer}").unwrap().contains("unknown variant"));
        assert_eq!(
            bad("{a2a: \"https://x\", auth: sigv4, service: bedrock-agentcore, region: us-east-1}"),
            None
        );
        let listed = TEAM.replace("    remote:", "    tools: [lookup]\n    remote:");
        let err = Config::default().with_yaml(&listed, "team.yaml").and_then(|c| c.validate()).unwrap_err();
        assert!(err.to_string().contains("lists no tools"), "{err}");
    }
}
