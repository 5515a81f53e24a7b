//! The composition root: builds the runtime a [`Config`] describes, once, at start. Model
//! clients (one HTTP client for all), agents and their tools (built-in, a team's own, agents as
//! tools, routing tools), the routing policy, remote agents and the orchestrator that runs turns.
//! Per-episode state and per-user data come from [`Backends`] (in memory, or over a store).
//! An agent with `mini_agent` gets its [`MiniAgents`] fork policy here.
//!
//! Nothing here is special to an agent's name: each agent is built from its own entry.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::agent::{Agent, AgentRequest, LlmAgent, LoopLimits, MemoryResponseChains, ResponseChains};
use crate::agent_tool::{AGENT_TOOL_PREFIX, AgentTool};
use crate::config::agents::{AgentKind, AgentSpec, AgentsConfig, BUILTIN_TOOLS, ModelApi, RoutingSpec};
use crate::config::{Config, ConfigError, OPENAI_DEFAULT_BASE_URL};
use crate::event::EventStream;
use crate::guard::Guards;
use crate::mini::MiniAgents;
use crate::model::ChatModel;
use crate::model::offline::OfflineModel;
use crate::model::openai::{OpenAiChatModel, OpenAiConfig};
use crate::model::responses::ResponsesModel;
use crate::orchestrator::Orchestrator;
use crate::remote::{AgentTransport, RemoteAgent};
use crate::routing::{Followup, RoutedAgent, Router, RoutingPolicy, RoutingSettings, routing_tool};
use crate::shopping::catalog::{Catalog, PurchaseHistory, SamplePurchases};
use crate::shopping::tools::{
    GET_OFFER, GetOffer, PURCHASE_HISTORY, PurchaseHistoryTool, SEARCH_OFFERS, SearchOffers,
};
use crate::support::agent::ForethoughtAgent;
use crate::support::forethought::ForethoughtClient;
use crate::support::help_center::{HelpCenter, HelpCenterAgent, SEARCH_HELP_CENTER, SearchHelpCenter};
use crate::support::sessions::{Clock, MemorySupportSessions, SupportSessions, SystemClock};
use crate::tool::{Tool, ToolRegistry};

/// Builds the entry agent and every agent below it, into the orchestrator that runs turns.
pub fn build(config: &Config, backends: Backends) -> Result<Arc<Orchestrator>, ConfigError> {
    config.validate()?;
    let models = ModelFactory::new(config)?;
    let mut graph = Graph::new(config, &models, &backends)?;
    let entry = config.agents.get(&config.agents.entry).expect("validated");
    let agent = graph.build(&entry.name)?;
    let mut orchestrator = Orchestrator::new(agent, models.for_agent(entry).model_name().to_owned())
        .with_prices(config.prices.clone());
    if let Some(reporter) = backends.reporter.clone() {
        orchestrator = orchestrator.with_reporter(reporter);
    }
    Ok(Arc::new(orchestrator))
}

/// The configured agent `name`, with every agent below it, run in this process (what a function
/// that serves one agent runs): its own `remote:` is ignored.
pub fn build_agent(config: &Config, name: &str, backends: &Backends) -> Result<Arc<dyn Agent>, ConfigError> {
    config.validate()?;
    if config.agents.get(name).is_none() {
        return Err(ConfigError::Invalid { field: "agents", reason: format!("no agent named `{name}`") });
    }
    let mut local = backends.clone();
    local.remote.remove(name);
    let models = ModelFactory::new(config)?;
    Graph::new(config, &models, &local)?.build(name)
}

/// The entry agent's routing on its own, for the routing evaluation; `None` when the entry agent
/// does not route.
pub fn build_router(config: &Config) -> Result<Option<Router>, ConfigError> {
    config.validate()?;
    let entry = config.agents.get(&config.agents.entry).expect("validated");
    let Some(routing) = &entry.routing else { return Ok(None) };
    let models = ModelFactory::new(config)?;
    let policy = RoutingPolicy::new(routing_settings(&config.agents, entry, routing));
    Ok(Some(Router::new(models.for_agent(entry), policy, entry.instruction.clone())))
}

/// The routing settings of `spec`.
fn routing_settings(agents: &AgentsConfig, spec: &AgentSpec, routing: &RoutingSpec) -> RoutingSettings {
    RoutingSettings {
        agents: spec
            .agents
            .iter()
            .map(|name| RoutedAgent {
                agent: name.clone(),
                description: agents.tool_options(agents.get(name).expect("validated")).description,
            })
            .collect(),
        followup: routing.followup.as_ref().map(|agent| Followup {
            agent: agent.clone(),
            category_argument: routing
                .category_argument
                .clone()
                .unwrap_or_else(|| format!("{agent}_category")),
            summary_argument: routing.summary_argument.clone().unwrap_or_else(|| format!("{agent}_summary")),
        }),
        fallback: routing.fallback.clone(),
        categories: routing.categories.clone(),
        guards: routing
            .guards
            .as_deref()
            .map_or_else(Guards::default, |g| Guards::only(g).expect("validated")),
        smalltalk: Arc::new(match &routing.smalltalk {
            Some(extra) => crate::text::Lexicon::with_defaults(extra).expect("validated"),
            None => crate::text::Lexicon::default(),
        }),
        images: routing.images.iter().map(|(kind, agent)| (*kind, agent.clone())).collect(),
    }
}

/// Where agents keep per-episode state and read per-user data. [`Backends::in_memory`] until the
/// store implements these traits.
#[derive(Clone)]
pub struct Backends {
    /// The Forethought conversation and support turns per episode.
    pub support_sessions: Arc<dyn SupportSessions>,
    /// The shopping agent's last response id per episode.
    pub response_chains: Arc<dyn ResponseChains>,
    /// Purchase history for the shopping tools.
    pub purchases: Arc<dyn PurchaseHistory>,
    /// Time, for the Forethought continuity window.
    pub clock: Arc<dyn Clock>,
    /// Agents that run in another process (a separately deployed function), by agent name:
    /// the transports of the agents whose entry has `remote:`.
    pub remote: HashMap<String, Arc<dyn AgentTransport>>,
    /// A team's own tools, which configured agents list by name beside the built-in ones.
    pub tools: Vec<Arc<dyn Tool>>,
    /// The tools of the configured MCP servers, listed at start ([`crate::mcp::connect_all`]).
    pub mcp: crate::mcp::McpTools,
    /// Where each turn's figures go (the CloudWatch EMF line in Lambda); nowhere by default.
    pub reporter: Option<Arc<dyn crate::telemetry::TurnReporter>>,
}

impl Backends {
    /// Process-memory state, the sample purchase history and the system clock.
    pub fn in_memory() -> Backends {
        Backends {
            support_sessions: Arc::new(MemorySupportSessions::default()),
            response_chains: Arc::new(MemoryResponseChains::default()),
            purchases: Arc::new(SamplePurchases::embedded()),
            clock: Arc::new(SystemClock),
            remote: HashMap::new(),
            tools: Default::default(),
            mcp: Default::default(),
            reporter: None,
        }
    }

    /// State kept in `store`: vendor conversations and response ids on the episode, support
    /// turns from its history; the store's clock; the sample purchase history.
    pub fn over_store(store: Arc<dyn crate::store::Store>) -> Backends {
        let state = Arc::new(crate::store::backends::StoreBackends::new(store.clone()));
        Backends {
            support_sessions: state.clone(),
            response_chains: state,
            purchases: Arc::new(SamplePurchases::embedded()),
            clock: Arc::new(StoreClock(store)),
            remote: HashMap::new(),
            tools: Default::default(),
            mcp: Default::default(),
            reporter: None,
        }
    }
}

/// The clock of a store, shared as an `Arc<dyn Clock>`.
#[derive(Clone)]
struct StoreClock(Arc<dyn crate::store::Store>);

impl std::fmt::Debug for StoreClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreClock")
    }
}

impl Clock for StoreClock {
    fn now(&self) -> std::time::SystemTime {
        self.0.clock().now()
    }
}

/// A remote agent's answer may pause this long between chunks (a slow tool call) before the call
/// is given up.
pub const REMOTE_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Builds model clients on one shared HTTP client, or the offline model when none is configured.
struct ModelFactory<'a> {
    config: &'a Config,
    http: Option<crate::outbound::Client>,
}

impl<'a> ModelFactory<'a> {
    fn new(config: &'a Config) -> Result<ModelFactory<'a>, ConfigError> {
        let models = &config.models;
        // One HTTP client (one connection pool, one TLS setup) for every model.
        let http = if models.is_offline() {
            None
        } else {
            Some(OpenAiChatModel::http_client(&models.timeouts, models.http2)?)
        };
        Ok(ModelFactory { config, http })
    }

    fn openai_config(&self, name: &str) -> OpenAiConfig {
        let models = &self.config.models;
        let base_url = models.base_url.clone().unwrap_or_else(|| OPENAI_DEFAULT_BASE_URL.into());
        let mut config = OpenAiConfig::new(base_url, name);
        config.api_key = models.api_key.clone();
        config.timeouts = models.timeouts;
        config.retry = models.retry;
        config
    }

    /// A Chat Completions model (or the offline model).
    fn chat(&self, name: &str) -> Arc<dyn ChatModel> {
        match &self.http {
            None => Arc::new(OfflineModel::new(self.config.support_keywords.clone())),
            Some(http) => Arc::new(OpenAiChatModel::with_client(http.clone(), self.openai_config(name))),
        }
    }

    /// The model of a configured agent: its own name and API, or the defaults (see
    /// [`crate::config::agents`]).
    fn for_agent(&self, spec: &AgentSpec) -> Arc<dyn ChatModel> {
        self.named(spec, spec.model.as_deref().unwrap_or(&self.config.models.orchestrator))
    }

    /// Model `name` through the API of `spec`'s model (a mini-agent decomposer or aggregator).
    fn named(&self, spec: &AgentSpec, name: &str) -> Arc<dyn ChatModel> {
        let api = spec.api.unwrap_or_default();
        match (&self.http, api) {
            (Some(http), ModelApi::Responses) => {
                Arc::new(ResponsesModel::with_client(http.clone(), self.openai_config(name)))
            }
            _ => self.chat(name),
        }
    }
}

/// Builds configured agents by name, each once, children first.
struct Graph<'a> {
    config: &'a Config,
    models: &'a ModelFactory<'a>,
    backends: &'a Backends,
    tools: ToolCatalog,
    /// The agents of a routing agent: they see the conversation and keep the vendor's
    /// server-side context per episode.
    routed: HashSet<String>,
    built: HashMap<String, Arc<dyn Agent>>,
}

impl<'a> Graph<'a> {
    fn new(
        config: &'a Config,
        models: &'a ModelFactory<'a>,
        backends: &'a Backends,
    ) -> Result<Graph<'a>, ConfigError> {
        let tools = ToolCatalog::new(backends.tools.clone(), backends.purchases.clone());
        tools.check()?;
        config.agents.validate_tools(&tools.names())?;
        let routed = config
            .agents
            .agents
            .iter()
            .filter(|a| a.routing.is_some())
            .flat_map(|a| a.agents.iter().cloned())
            .collect();
        Ok(Graph { config, models, backends, tools, routed, built: HashMap::new() })
    }

    /// The agent named `name`, with every agent below it.
    fn build(&mut self, name: &str) -> Result<Arc<dyn Agent>, ConfigError> {
        if let Some(agent) = self.built.get(name) {
            return Ok(agent.clone());
        }
        let index = self.config.agents.index_of(name).expect("validated");
        let spec = &self.config.agents.agents[index];
        let agent: Arc<dyn Agent> = match (self.backends.remote.get(&spec.name), spec.kind) {
            (Some(transport), _) => {
                Arc::new(RemoteAgent::new(&spec.name, transport.clone(), REMOTE_IDLE_TIMEOUT))
            }
            (None, AgentKind::Support) => named(
                &spec.name,
                match &self.config.forethought {
                    Some(ft) => Arc::new(ForethoughtAgent::new(
                        ForethoughtClient::new(ft.clone())?,
                        self.backends.support_sessions.clone(),
                        self.backends.clock.clone(),
                    )),
                    None => Arc::new(HelpCenterAgent::new(self.tools.help_center())),
                },
            ),
            (None, AgentKind::Llm) => self.llm_agent(index)?,
        };
        self.built.insert(name.to_owned(), agent.clone());
        Ok(agent)
    }

    /// The `llm` agent at `index`: its tools, its agents as tools (routing tools when it routes)
    /// and its model.
    fn llm_agent(&mut self, index: usize) -> Result<Arc<dyn Agent>, ConfigError> {
        let agents = &self.config.agents;
        let spec = &agents.agents[index];
        let routing = spec.routing.as_ref().map(|r| routing_settings(agents, spec, r));
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        for (j, tool) in spec.tools.iter().enumerate() {
            if crate::mcp::is_mcp_pattern(tool) {
                let selected = self.backends.mcp.select(tool);
                tools.extend(selected.map_err(|e| agents.error(Some(index), "tools", format!("[{j}] {e}")))?);
            } else {
                tools.push(self.tools.tool(tool).expect("validated"));
            }
        }
        // The agent's own MCP servers that `tools:` does not name: all of their tools.
        for server in spec.mcp_servers.keys() {
            let named = spec.tools.iter().any(|t| t.split_once('.').is_some_and(|(s, _)| s == server));
            if !named {
                let selected = self.backends.mcp.select(&format!("{server}.*"));
                tools.extend(selected.map_err(|e| agents.error(Some(index), "mcp_servers", e))?);
            }
        }
        for child in &spec.agents {
            let child_agent = self.build(child)?;
            let options = agents.tool_options(agents.get(child).expect("validated"));
            let tool = match &routing {
                Some(routing) => routing_tool(child_agent, routing, options),
                None => AgentTool::new(child_agent, options),
            }
            .map_err(|e| agents.error(Some(index), "agents", e))?;
            tools.push(Arc::new(tool));
        }
        let registry = ToolRegistry::new(tools).map_err(|e| agents.error(Some(index), "tools", e))?;
        let defaults = LoopLimits::default();
        let limits = LoopLimits {
            max_steps: spec.max_steps.unwrap_or(defaults.max_steps),
            tool_timeout: spec.tool_timeout_seconds.map_or(defaults.tool_timeout, Duration::from_secs_f64),
            ..defaults
        };
        let model = self.models.for_agent(spec);
        let mut agent =
            LlmAgent::new(spec.name.clone(), spec.instruction.clone(), model, Arc::new(registry), limits)
                .with_mux(self.config.mux);
        if let Some(routing) = routing {
            agent = agent.with_policy(Arc::new(RoutingPolicy::new(routing)));
        }
        if self.routed.contains(&spec.name) {
            agent = agent.with_response_chains(self.backends.response_chains.clone());
        }
        if let Some(minis) = spec.minis() {
            let model = |name: &Option<String>| name.as_deref().map(|n| self.models.named(spec, n));
            let settings = minis.settings(agents.max_depth);
            let fork =
                MiniAgents::new(settings, model(&minis.decomposer_model), model(&minis.aggregator_model));
            agent = agent.with_fork(Arc::new(fork));
        }
        Ok(Arc::new(agent))
    }
}

/// An agent under another name (the built-in support agents call themselves `support`).
struct Named {
    name: String,
    inner: Arc<dyn Agent>,
}

impl Agent for Named {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&self, request: AgentRequest, instance: String) -> EventStream {
        self.inner.run(request, instance)
    }
}

/// Renames `agent` to `name` unless it already has it.
pub(crate) fn named(name: &str, agent: Arc<dyn Agent>) -> Arc<dyn Agent> {
    if agent.name() == name { agent } else { Arc::new(Named { name: name.to_owned(), inner: agent }) }
}

/// The tools agents may list: the built-in ones (made on first use) and the ones given in code.
pub(crate) struct ToolCatalog {
    custom: Vec<Arc<dyn Tool>>,
    purchases: Arc<dyn crate::shopping::catalog::PurchaseHistory>,
    offers: OnceLock<Arc<Catalog>>,
    help: OnceLock<Arc<HelpCenter>>,
}

impl ToolCatalog {
    pub(crate) fn new(
        custom: Vec<Arc<dyn Tool>>,
        purchases: Arc<dyn crate::shopping::catalog::PurchaseHistory>,
    ) -> ToolCatalog {
        ToolCatalog { custom, purchases, offers: OnceLock::new(), help: OnceLock::new() }
    }

    /// Every tool name an agent may list.
    pub(crate) fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = BUILTIN_TOOLS.to_vec();
        names.extend(self.custom.iter().map(|t| t.name()));
        names
    }

    /// The help center, shared with the offline support agent.
    pub(crate) fn help_center(&self) -> Arc<HelpCenter> {
        self.help.get_or_init(|| Arc::new(HelpCenter::embedded())).clone()
    }

    fn offers(&self) -> Arc<Catalog> {
        self.offers.get_or_init(|| Arc::new(Catalog::embedded())).clone()
    }

    /// The tool named `name`.
    pub(crate) fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        if let Some(tool) = self.custom.iter().find(|t| t.name() == name) {
            return Some(tool.clone());
        }
        Some(match name {
            SEARCH_OFFERS => Arc::new(SearchOffers::new(self.offers())),
            GET_OFFER => Arc::new(GetOffer::new(self.offers())),
            PURCHASE_HISTORY => Arc::new(PurchaseHistoryTool::new(self.purchases.clone())),
            SEARCH_HELP_CENTER => Arc::new(SearchHelpCenter::new(self.help_center())),
            _ => return None,
        })
    }

    /// Checks that custom tools neither clash with built-in ones nor look like agent tools.
    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        for tool in &self.custom {
            let name = tool.name();
            if BUILTIN_TOOLS.contains(&name) || name.starts_with(AGENT_TOOL_PREFIX) {
                return Err(ConfigError::Invalid {
                    field: "tools",
                    reason: format!("the custom tool `{name}` clashes with a built-in or agent tool name"),
                });
            }
        }
        Ok(())
    }
}

/// Where ratings of the configured support agents' answers go: Forethought's CSAT endpoint,
/// for every in-process support agent when Forethought is configured; none otherwise (the
/// offline help center's answers cannot be rated).
pub fn rating_sinks(
    config: &Config,
) -> Result<crate::rating::RatingSinks, crate::support::forethought::VendorError> {
    let mut sinks = crate::rating::RatingSinks::default();
    let Some(ft) = &config.forethought else { return Ok(sinks) };
    let client = Arc::new(crate::support::forethought::ForethoughtClient::new(ft.clone())?);
    for agent in &config.agents.agents {
        if agent.kind == AgentKind::Support && agent.remote.is_none() {
            sinks.insert(agent.name.clone(), client.clone());
        }
    }
    Ok(sinks)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registry compiles a tool's schema on its first call, so a broken built-in schema would
    /// only show then: every built-in schema is compiled here.
    #[test]
    fn every_built_in_tool_schema_compiles() {
        let purchases = Arc::new(crate::shopping::catalog::SamplePurchases::embedded());
        let catalog = ToolCatalog::new(Vec::new(), purchases);
        for name in [SEARCH_OFFERS, GET_OFFER, PURCHASE_HISTORY, SEARCH_HELP_CENTER] {
            let tool = catalog.tool(name).expect("a built-in tool");
            crate::tool::JsonSchema::compile(&tool.parameters()).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        crate::tool::JsonSchema::compile(&crate::agent_tool::permissive_input_schema())
            .expect("the agent tools' default input schema compiles");
    }
}
