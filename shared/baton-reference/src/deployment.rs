//! [`Deployment`]: the reference configuration (`config/baton.yaml`, embedded, over the runtime's
//! defaults) with the settings of the reference's own parts (Forethought), checked together, and
//! the [`Backends`] it runs over: the runtime's, with the [`Reference`] extension.
//!
//! A team's configuration is a deployment too, over the same type: one that does not extend the
//! reference (`extends: reference`) gets none of it (no tools, no `support` kind, no Forethought).

use std::sync::Arc;

use baton::config::{Config, ConfigError};
use baton::store::Store;
use baton::wiring::Backends;

use crate::extension::Reference;
use crate::support::forethought::ForethoughtConfig;

/// The reference configuration, embedded: its defaults live in `config/baton.yaml` only.
pub const REFERENCE_CONFIG: &str = include_str!("../../../config/baton.yaml");

/// The reference deployment's name: a team's file that says `extends: reference` is applied over
/// [`reference_config`] and gets the reference's tools, agent kind and settings.
pub const REFERENCE: &str = "reference";

/// The runtime's defaults with [`REFERENCE_CONFIG`] applied, named [`REFERENCE`]: offline models,
/// the routed support and shopping agents.
pub fn reference_config() -> Config {
    Config::default()
        .with_yaml(REFERENCE_CONFIG, "config/baton.yaml")
        .expect("the embedded reference config is valid")
        .named(REFERENCE)
}

/// What the reference deployment runs: the runtime's configuration and Forethought's settings.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// The runtime's configuration (agents, models, limits).
    pub config: Config,
    /// Forethought settings; `None` runs the offline help center as support.
    pub forethought: Option<ForethoughtConfig>,
}

impl Default for Deployment {
    /// [`reference_config`], support on the offline help center.
    fn default() -> Self {
        Deployment { config: reference_config(), forethought: None }
    }
}

impl From<Config> for Deployment {
    fn from(config: Config) -> Self {
        Deployment { config, forethought: None }
    }
}

impl Deployment {
    /// Whether its configuration is the reference's or extends it: only then are the reference's
    /// parts (tools, the `support` kind, Forethought, their start-up line) plugged in.
    pub fn is_reference(&self) -> bool {
        self.config.deployment.as_deref() == Some(REFERENCE)
    }

    /// This deployment with the YAML document `yaml` applied over its configuration
    /// ([`Config::with_yaml`]); `origin` names the document in errors.
    pub fn with_yaml(mut self, yaml: &str, origin: &str) -> Result<Deployment, ConfigError> {
        self.config = self.config.with_yaml(yaml, origin)?;
        Ok(self)
    }

    /// Checks values that would only fail later: the configuration's and Forethought's.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, reason: &str| Err(ConfigError::Invalid { field, reason: reason.to_owned() });
        if let Some(ft) = &self.forethought {
            if !(ft.base_url.starts_with("http://") || ft.base_url.starts_with("https://")) {
                return invalid("FORETHOUGHT_BASE_URL", "must start with http:// or https://");
            }
            if ft.token.trim().is_empty() {
                return invalid("FORETHOUGHT_API_TOKEN", "is empty");
            }
        }
        self.config.validate()
    }

    /// The backends over `store` (in process memory when `None`), with the [`Reference`]
    /// extension when the configuration is the reference's ([`Deployment::is_reference`]).
    pub fn backends(&self, store: Option<Arc<dyn Store>>) -> Result<Backends, ConfigError> {
        self.validate()?;
        if !self.is_reference() {
            return Ok(match store {
                Some(store) => Backends::over_store(store),
                None => Backends::in_memory(),
            });
        }
        let vendor = |e: crate::support::forethought::VendorError| ConfigError::Extension {
            what: "the Forethought client".into(),
            reason: e.to_string(),
        };
        let forethought = self.forethought.clone();
        Ok(match store {
            Some(store) => Backends::over_store(store.clone())
                .with_extension(Arc::new(Reference::over_store(forethought, store).map_err(vendor)?)),
            None => Backends::in_memory()
                .with_extension(Arc::new(Reference::in_memory(forethought).map_err(vendor)?)),
        })
    }

    /// A one-line description of the support agent, for start-up logs; `None` when no agent is
    /// of the `support` kind (a team's configuration).
    pub fn describe_support(&self) -> Option<String> {
        let support = baton::config::agents::AgentKind::Builtin(crate::SUPPORT_KIND.into());
        if !self.is_reference() || !self.config.agents.agents.iter().any(|a| a.kind == support) {
            return None;
        }
        Some(match &self.forethought {
            Some(ft) => format!("support: Forethought Solve API at {} (channel {})", ft.base_url, ft.channel),
            None => {
                "support: offline help center (shipped articles; set FORETHOUGHT_API_TOKEN for Forethought)"
                    .into()
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use baton::config::agents::AgentKind;
    use baton::wiring::{build, build_router, rating_sinks};

    use super::*;

    #[test]
    fn the_reference_agents_are_a_routing_entry_over_support_and_shopping() {
        let c = reference_config();
        assert_eq!(c.agents.entry, "orchestrator");
        let router = c.agents.get("orchestrator").unwrap();
        assert_eq!(router.kind, AgentKind::Llm);
        let routing = router.routing.as_ref().unwrap();
        assert_eq!((routing.followup.as_deref(), routing.fallback.as_str()), (Some("support"), "shopping"));
        assert_eq!(
            (routing.category_argument.as_deref(), routing.summary_argument.as_deref()),
            (Some("support_category"), Some("support_summary"))
        );
        assert_eq!(router.agents, ["support", "shopping"]);
        assert_eq!(c.agents.get("support").unwrap().kind, AgentKind::Builtin("support".into()));
        let shopping = c.agents.get("shopping").unwrap();
        assert_eq!(shopping.tools, ["search_offers", "get_offer", "purchase_history"]);
        assert!(shopping.instruction.contains("shopping agent"));
        let backends = Deployment::default().backends(None).unwrap();
        assert!(build_router(&c, &backends).unwrap().is_some());
        assert_eq!(build(&c, backends).unwrap().model_name(), "offline");
    }

    #[test]
    fn without_the_extension_the_support_kind_and_the_tools_are_unknown_at_their_line() {
        let err = build(&reference_config(), Backends::in_memory()).err().unwrap().to_string();
        assert!(
            err.contains("config/baton.yaml") && err.contains("unknown tool `search_offers`"),
            "the tools are checked first: {err}"
        );
        let mut c = reference_config();
        c.agents.agents.retain(|a| a.name != "shopping");
        c.agents.agents[0].agents.retain(|a| a != "shopping");
        c.agents.mcp_served = None;
        let routing = c.agents.agents[0].routing.as_mut().unwrap();
        routing.fallback = "support".into();
        routing.images.clear();
        let err = build(&c, Backends::in_memory()).err().unwrap().to_string();
        assert!(err.contains("(`support`).kind: unknown agent kind `support`; known: llm"), "{err}");
    }

    #[test]
    fn the_reference_file_sets_the_taxonomy_the_keywords_and_dated_prices() {
        let c = reference_config();
        let routing = c.agents.get("orchestrator").unwrap().routing.as_ref().unwrap();
        assert!(routing.categories.contains(&"point_pass".to_owned()));
        assert_eq!(c.offline_keywords.len(), 1);
        assert_eq!(c.offline_keywords[0].0, "support");
        assert!(c.offline_keywords[0].1.contains(&"receipt".to_owned()));
        assert!(c.offline_keywords[0].1.contains(&"punkte".to_owned()), "lowercased");
        assert!(c.agents.get("orchestrator").unwrap().instruction.starts_with("<role>"));
        assert!(c.prices.as_of.is_some());
        assert!(c.prices.models.contains_key(&c.models.orchestrator), "the default model has a price");
        let c =
            c.with_yaml("prices:\n  models:\n    mine: {input: \"0.5\", output: 3}\n", "team.yaml").unwrap();
        assert!(c.prices.models.contains_key("mine") && c.prices.models.contains_key("gpt-4.1"));
    }

    #[test]
    fn a_follow_up_argument_name_must_be_snake_case_free_and_distinct() {
        let with = |from: &str, to: &str| {
            let yaml = REFERENCE_CONFIG.replace(from, to);
            assert_ne!(yaml, REFERENCE_CONFIG, "`{from}` is in the reference config");
            Config::default().with_yaml(&yaml, "t.yaml").map(|_| ()).unwrap_err().to_string()
        };
        let err = with("category_argument: support_category", "category_argument: query");
        assert!(err.contains("category_argument") && err.contains("`query`"), "{err}");
        let err = with("summary_argument: support_summary", "summary_argument: Summary");
        assert!(err.contains("summary_argument") && err.contains("snake_case"), "{err}");
        let err = with("summary_argument: support_summary", "summary_argument: support_category");
        assert!(err.contains("must differ"), "{err}");
        let err = with("      followup: support\n", "");
        assert!(err.contains("only a routing with a `followup` agent"), "{err}");
        let err = with("categories: [missing_points", "categories: [Missing Points");
        assert!(err.contains("snake_case") && err.contains("routing"), "{err}");
    }

    #[test]
    fn configured_smalltalk_extends_the_defaults_and_a_bad_phrase_is_refused() {
        let config = reference_config();
        let routing = config.agents.get("orchestrator").and_then(|a| a.routing.clone()).unwrap();
        assert!(routing.smalltalk.unwrap().greetings.contains(&"hey fetch".to_owned()));
        let bad = REFERENCE_CONFIG.replace("greetings: [hey fetch,", "greetings: [\"!\", hey fetch,");
        let err = Config::default().with_yaml(&bad, "t.yaml").unwrap_err().to_string();
        assert!(err.contains("smalltalk") && err.contains("no word") && err.contains("t.yaml"), "{err}");
    }

    /// A team's file as the binary reads one: over the runtime's defaults, or over the reference
    /// when it says `extends: reference`.
    fn team(yaml: &str) -> Result<Deployment, ConfigError> {
        Config::from_yaml(yaml, "team.yaml", &[&reference_config()]).map(Deployment::from)
    }

    #[test]
    fn the_readme_team_example_asks_for_the_reference_tools_and_builds_over_them() {
        let yaml = include_str!("../../../examples/team.yaml");
        let deployment = team(yaml).unwrap();
        assert!(deployment.is_reference());
        assert_eq!(deployment.config.agents.agents.len(), 3);
        assert!(deployment.config.offline_keywords.is_empty(), "the team's agents have no keyword lists");
        build(&deployment.config, deployment.backends(None).unwrap()).unwrap();
        assert_eq!(deployment.describe_support(), None, "no agent of the support kind");
    }

    #[test]
    fn a_team_file_that_does_not_ask_for_the_reference_gets_none_of_it() {
        let yaml = include_str!("../../../examples/team.yaml").replace("extends: reference\n", "");
        let deployment = team(&yaml).unwrap();
        assert!(!deployment.is_reference() && deployment.describe_support().is_none());
        let err = build(&deployment.config, deployment.backends(None).unwrap()).err().unwrap().to_string();
        assert!(
            err.ends_with("unknown tool `search_offers`; available: none"),
            "only the team's tools: {err}"
        );
        let err = team(
            "agents:\n  - {name: lead, instruction: x, agents: [help]}\n  - name: help\n    kind: support\n",
        )
        .unwrap();
        let err = build(&err.config, err.backends(None).unwrap()).err().unwrap().to_string();
        assert!(err.contains("unknown agent kind `support`; known: llm"), "{err}");
    }

    #[test]
    fn forethought_settings_are_checked_and_rate_the_support_agents_answers() {
        let mut deployment = Deployment::default();
        let backends = deployment.backends(None).unwrap();
        assert!(rating_sinks(&deployment.config, &backends).is_empty(), "the help center is not rated");
        deployment.forethought = Some(ForethoughtConfig::new("app.forethought.ai", "t"));
        let err = deployment.backends(None).err().unwrap().to_string();
        assert!(err.contains("FORETHOUGHT_BASE_URL"), "{err}");
        deployment.forethought = Some(ForethoughtConfig::new("https://support.example", " "));
        assert!(deployment.validate().unwrap_err().to_string().contains("FORETHOUGHT_API_TOKEN"));
        deployment.forethought = Some(ForethoughtConfig::new("https://support.example", "t"));
        let backends = deployment.backends(None).unwrap();
        assert!(!rating_sinks(&deployment.config, &backends).is_empty(), "Forethought rates support");
        let mut remote = deployment.clone();
        remote.config.agents.agents.iter_mut().find(|a| a.name == "support").unwrap().remote =
            Some(baton::config::agents::RemoteSpec {
                url: Some("http://127.0.0.1:1/support".into()),
                ..Default::default()
            });
        let backends = remote.backends(None).unwrap();
        assert!(rating_sinks(&remote.config, &backends).is_empty(), "a remote agent is rated where it runs");
        assert!(deployment.describe_support().unwrap().contains("https://support.example"));
    }
}
