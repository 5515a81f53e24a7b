//! The composition root: builds the runtime a [`Config`] describes, once, at start. Model
//! clients (one HTTP client for all), agents and their tools (built-in, a team's own, agents as
//! tools, routing tools), the routing policy, remote agents and the orchestrator that runs turns.
//! Per-episode state and per-user data come from [`Backends`] (in memory, or over a store).
//! An agent with `mini_agent` gets its `MiniAgents` fork policy here.
//!
//! Nothing here is special to an agent's name: each agent is built from its own entry. A
//! deployment's own tools and agent kinds come from its [`Extension`]s, given in [`Backends`].
//!
//! # Layout
//! - this file: [`build`], [`check`], [`build_agent`], [`build_router`], [`Backends`], [`rating_sinks`];
//! - [`extension`]: the [`Extension`] trait a deployment implements;
//! - `tools`: [`declared_tools`], the configuration's OpenAPI (and the deployment's Lambda) tools,
//!   and their stand-ins by name for [`check`];
//! - `a2a`: an agent with `remote: {a2a: …}` as an A2A agent, and [`a2a_card`], the entry
//!   agent's A2A card.

mod a2a;
pub mod extension;
mod tools;

pub use a2a::{Served, a2a_card, a2a_served};
pub use extension::Extension;
pub use tools::declared_tools;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::agent::{
    Agent, AgentRequest, ApprovalPolicy, LlmAgent, LoopLimits, MemoryResponseChains, ResponseChains,
};
use crate::agent_tool::{AGENT_TOOL_PREFIX, AgentTool};
use crate::config::agents::{AgentKind, AgentSpec, AgentsConfig, ModelApi, RoutingSpec};
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
use crate::routing::{
    Followup, RoutedAgent, Router, RoutingPolicy, RoutingSettings, routing_tool, routing_tool_name,
};
use crate::tool::{Tool, ToolRegistry};

/// Builds the entry agent and every agent below it, into the orchestrator that runs turns.
pub fn build(config: &Config, backends: Backends) -> Result<Arc<Orchestrator>, ConfigError> {
    config.validate()?;
    let models = ModelFactory::new(config, &backends, &config.agents.entry)?;
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

/// Checks `config` over `backends` as [`build`] does before it builds an agent (the values, the
/// model clients, the tool names, no two tools with one name), reaching nothing: what
/// `orchestrator check` runs without `--connect`, where an agent's MCP tools are not listed yet
/// and the tools declared by source stand in by name (an OpenAPI file's operations are read).
///
/// The stand-ins are left in `backends.tools`, so the caller's tree lists them.
pub fn check(config: &Config, backends: &mut Backends) -> Result<(), ConfigError> {
    config.validate()?;
    tools::declared_offline(config, backends)
        .map_err(|reason| ConfigError::Invalid { field: "openapi", reason })?;
    let models = ModelFactory::new(config, backends, &config.agents.entry)?;
    Graph::new(config, &models, backends).map(|_| ())
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
    let models = ModelFactory::new(config, &local, name)?;
    Graph::new(config, &models, &local)?.build(name)
}

/// The turns of the configured agent `name` (the entry agent, or one served over A2A or MCP):
/// the agent as [`build_agent`] builds it, its usage priced, each turn reported to
/// `backends.reporter`.
pub fn orchestrator_of(
    config: &Config,
    name: &str,
    backends: &Backends,
) -> Result<Arc<Orchestrator>, ConfigError> {
    let agent = build_agent(config, name, backends)?;
    let spec = config.agents.get(name).expect("build_agent checked it");
    let models = ModelFactory::new(config, backends, name)?;
    let mut orchestrator = Orchestrator::new(agent, models.for_agent(spec).model_name().to_owned())
        .with_prices(config.prices.clone());
    if let Some(reporter) = backends.reporter.clone() {
        orchestrator = orchestrator.with_reporter(reporter);
    }
    Ok(Arc::new(orchestrator))
}

/// The entry agent's routing on its own, for the routing evaluation; `None` when the entry agent
/// does not route.
pub fn build_router(config: &Config, backends: &Backends) -> Result<Option<Router>, ConfigError> {
    config.validate()?;
    let entry = config.agents.get(&config.agents.entry).expect("validated");
    let Some(routing) = &entry.routing else { return Ok(None) };
    let models = ModelFactory::new(config, backends, &entry.name)?;
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

/// What the agents are built over: where they keep per-episode state, the deployment's own
/// tools and agent kinds, remote agents, MCP tools and where each turn's figures go.
/// [`Backends::in_memory`] keeps state in this process, [`Backends::over_store`] in a store.
#[derive(Clone)]
pub struct Backends {
    /// The routed agents' last Responses API id per episode, by agent name.
    pub response_chains: Arc<dyn ResponseChains>,
    /// Agents that run in another process (a separately deployed function), by agent name:
    /// the transports of the agents whose entry has `remote:`.
    pub remote: HashMap<String, Arc<dyn AgentTransport>>,
    /// A team's own tools, which configured agents list by name beside the extensions' ones.
    pub tools: Vec<Arc<dyn Tool>>,
    /// The deployment's own tools and agent kinds.
    pub extensions: Vec<Arc<dyn Extension>>,
    /// The tools of the configured MCP servers, listed at start ([`crate::mcp::connect_all`]).
    pub mcp: crate::mcp::McpTools,
    /// Where each turn's figures go (the CloudWatch EMF line in Lambda); nowhere by default.
    pub reporter: Option<Arc<dyn crate::telemetry::TurnReporter>>,
    /// What signs the calls of remote A2A agents with `auth: sigv4` (the AWS deployment's
    /// SigV4 signer); none by default, and such an agent is then a configuration error.
    pub signer: Option<Arc<dyn crate::a2a::RequestSigner>>,
    /// What reads the secrets declared tools name by ARN (AWS Secrets Manager in the AWS
    /// deployment); none by default, and such a tool is then a start-up error.
    pub secrets: Option<Arc<dyn crate::tool::openapi::SecretSource>>,
}

impl Backends {
    /// State in process memory; no extension.
    pub fn in_memory() -> Backends {
        Backends::with_chains(Arc::new(MemoryResponseChains::default()))
    }

    /// State kept in `store`: response ids on the episode; no extension.
    pub fn over_store(store: Arc<dyn crate::store::Store>) -> Backends {
        Backends::with_chains(Arc::new(crate::store::backends::StoreBackends::new(store)))
    }

    fn with_chains(response_chains: Arc<dyn ResponseChains>) -> Backends {
        Backends {
            response_chains,
            remote: HashMap::new(),
            tools: Vec::new(),
            extensions: Vec::new(),
            mcp: Default::default(),
            reporter: None,
            signer: None,
            secrets: None,
        }
    }

    /// These backends with a team's own `tool` too, which its agents name in `tools:` (as a
    /// declared tool is: one name in the whole configuration).
    pub fn with_tool(mut self, tool: Arc<dyn Tool>) -> Backends {
        self.tools.push(tool);
        self
    }

    /// These backends with `extension`'s tools and agent kinds too.
    pub fn with_extension(mut self, extension: Arc<dyn Extension>) -> Backends {
        self.extensions.push(extension);
        self
    }
}

/// A remote agent's answer may pause this long between chunks (a slow tool call) before the call
/// is given up.
pub(crate) const REMOTE_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Builds model clients on one shared HTTP client, or the offline model when none is configured,
/// or the model script's model of each agent when there is one.
struct ModelFactory<'a> {
    config: &'a Config,
    /// The agent a turn starts at (a model script opens its turns there).
    top: &'a str,
    http: Option<crate::outbound::Client>,
    /// The offline model, when no model server is configured.
    offline: Arc<OfflineModel>,
}

impl<'a> ModelFactory<'a> {
    fn new(config: &'a Config, backends: &Backends, top: &'a str) -> Result<ModelFactory<'a>, ConfigError> {
        let models = &config.models;
        // One HTTP client (one connection pool, one TLS setup) for every model.
        let http = if models.is_offline() || models.script.is_some() {
            None
        } else {
            Some(OpenAiChatModel::http_client(&models.timeouts, models.http2)?)
        };
        let keywords = config
            .offline_keywords
            .iter()
            .map(|(agent, words)| (routing_tool_name(agent), words.clone()))
            .collect();
        let skills = backends.extensions.iter().filter_map(|e| e.offline_skill()).collect();
        let offline = Arc::new(OfflineModel::new(keywords).with_skills(skills));
        Ok(ModelFactory { config, top, http, offline })
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
            None => self.offline.clone(),
            Some(http) => Arc::new(OpenAiChatModel::with_client(http.clone(), self.openai_config(name))),
        }
    }

    /// The model of a configured agent: its own name and API, or the defaults (see
    /// [`crate::config::agents`]).
    fn for_agent(&self, spec: &AgentSpec) -> Arc<dyn ChatModel> {
        if let Some(script) = &self.config.models.script {
            return script.model_for(&spec.name, spec.name == self.top);
        }
        self.named(spec, spec.model.as_deref().unwrap_or(&self.config.models.orchestrator))
    }

    /// Model `name` through the API of `spec`'s model (a mini-agent decomposer or aggregator).
    fn named(&self, spec: &AgentSpec, name: &str) -> Arc<dyn ChatModel> {
        if let Some(script) = &self.config.models.script {
            // A mini-agent's decomposer or aggregator: scripted as `<agent>@<model>`.
            return script.model_for(&format!("{}@{name}", spec.name), false);
        }
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
    tools: ToolCatalog<'a>,
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
        let tools = ToolCatalog::new(backends);
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
        if let Some(agent) = a2a::a2a_agent(self.config, index, spec, self.backends.signer.as_ref())? {
            self.built.insert(name.to_owned(), agent.clone());
            return Ok(agent);
        }
        let agent: Arc<dyn Agent> = match (self.backends.remote.get(&spec.name), &spec.kind) {
            (Some(transport), _) => {
                Arc::new(RemoteAgent::new(&spec.name, transport.clone(), REMOTE_IDLE_TIMEOUT))
            }
            (None, AgentKind::Builtin(kind)) => {
                let extension = extension_of(&self.backends.extensions, kind).ok_or_else(|| {
                    let known = known_kinds(&self.backends.extensions);
                    self.config.agents.error(
                        Some(index),
                        "kind",
                        format!("unknown agent kind `{kind}`; known: {}", known.join(", ")),
                    )
                })?;
                named(&spec.name, extension.agent(kind, spec)?)
            }
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
            let named = spec.tools.iter().any(|t| crate::mcp::pattern_server(t) == Some(server));
            if !named {
                let selected = self.backends.mcp.select(&format!("mcp__{server}__*"));
                tools.extend(selected.map_err(|e| agents.error(Some(index), "mcp_servers", e))?);
            }
        }
        let mut children = Vec::new();
        for child in &spec.agents {
            let child_agent = self.build(child)?;
            let options = agents.tool_options(agents.get(child).expect("validated"));
            let tool = match &routing {
                Some(routing) => routing_tool(child_agent.clone(), routing, options),
                None => AgentTool::new(child_agent.clone(), options),
            }
            .map_err(|e| agents.error(Some(index), "agents", e))?;
            children.push((tool.name().to_owned(), child_agent));
            tools.push(Arc::new(tool));
        }
        let registry = ToolRegistry::new(tools).map_err(|e| agents.error(Some(index), "tools", e))?;
        let defaults = LoopLimits::default();
        let limits = LoopLimits {
            max_steps: spec.max_steps.unwrap_or(defaults.max_steps),
            tool_timeout: spec.tool_timeout_seconds.map_or(defaults.tool_timeout, Duration::from_secs_f64),
            ..defaults
        };
        let approvals = approval_policy(agents, index, spec, &registry, &self.backends.mcp)?;
        let model = self.models.for_agent(spec);
        let mut agent =
            LlmAgent::new(spec.name.clone(), spec.instruction.clone(), model, Arc::new(registry), limits)
                .with_mux(self.config.mux)
                .with_approvals(Arc::new(approvals));
        for (tool, child) in children {
            agent = agent.with_child(tool, child);
        }
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

/// The approval rules of agent `index` (`spec`), whose tools are `registry`: each names one of
/// its tools, or the configuration's line is the error.
fn approval_policy(
    agents: &AgentsConfig,
    index: usize,
    spec: &AgentSpec,
    registry: &ToolRegistry,
    mcp: &crate::mcp::McpTools,
) -> Result<ApprovalPolicy, ConfigError> {
    let mut rules = std::collections::HashMap::new();
    for (tool, rule) in &spec.needs_approval {
        if registry.get(tool).is_none() && mcp.is_absent(tool) {
            tracing::warn!(agent = %spec.name, %tool, "approval rule for a tool of an optional MCP server that is absent");
            continue;
        }
        if registry.get(tool).is_none() {
            return Err(agents.error(
                Some(index),
                "needs_approval",
                format!("`{tool}` is not one of its tools; its tools: {}", registry.names().join(", ")),
            ));
        }
        let rule = rule.rule(tool).map_err(|e| agents.error(Some(index), "needs_approval", e))?;
        if let Some(rule) = rule {
            rules.insert(tool.clone(), rule);
        }
    }
    Ok(ApprovalPolicy::new(rules))
}

/// An agent under another name (an extension's agent answers to its entry's name).
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

/// The extension that builds agents of `kind`.
fn extension_of<'e>(extensions: &'e [Arc<dyn Extension>], kind: &str) -> Option<&'e Arc<dyn Extension>> {
    extensions.iter().find(|e| e.agent_kinds().contains(&kind))
}

/// Every agent kind an entry may name.
fn known_kinds(extensions: &[Arc<dyn Extension>]) -> Vec<String> {
    let mut kinds = vec!["llm".to_owned()];
    kinds.extend(extensions.iter().flat_map(|e| e.agent_kinds().into_iter().map(str::to_owned)));
    kinds
}

/// The tools agents may list: the extensions' and the ones given in code.
struct ToolCatalog<'a> {
    custom: &'a [Arc<dyn Tool>],
    extensions: &'a [Arc<dyn Extension>],
}

impl<'a> ToolCatalog<'a> {
    fn new(backends: &'a Backends) -> ToolCatalog<'a> {
        ToolCatalog { custom: &backends.tools, extensions: &backends.extensions }
    }

    /// Every tool name an agent may list.
    fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.extensions.iter().flat_map(|e| e.tool_names()).collect();
        names.extend(self.custom.iter().map(|t| t.name()));
        names
    }

    /// The tool named `name`.
    fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        if let Some(tool) = self.custom.iter().find(|t| t.name() == name) {
            return Some(tool.clone());
        }
        self.extensions.iter().find(|e| e.tool_names().contains(&name)).and_then(|e| e.tool(name))
    }

    /// Checks that no two sources name the same tool and no tool looks like an agent tool.
    fn check(&self) -> Result<(), ConfigError> {
        let mut seen = HashSet::new();
        for name in self.names() {
            if !seen.insert(name) || name.starts_with(AGENT_TOOL_PREFIX) {
                return Err(ConfigError::Invalid {
                    field: "tools",
                    reason: format!("the tool `{name}` clashes with another tool or an agent tool name"),
                });
            }
        }
        Ok(())
    }
}

/// Where ratings of the configured agents' answers go: each in-process agent of an extension's
/// kind, to the sink its extension names (none for the rest).
pub fn rating_sinks(config: &Config, backends: &Backends) -> crate::rating::RatingSinks {
    let mut sinks = crate::rating::RatingSinks::default();
    for spec in &config.agents.agents {
        let AgentKind::Builtin(kind) = &spec.kind else { continue };
        if spec.remote.is_some() || backends.remote.contains_key(&spec.name) {
            continue;
        }
        if let Some(sink) = extension_of(&backends.extensions, kind).and_then(|e| e.rating_sink(spec)) {
            sinks.insert(spec.name.clone(), sink);
        }
    }
    sinks
}

/// What the crate's tests build agents over: in-memory backends with one team tool, `lookup`.
#[cfg(test)]
pub(crate) mod testing {
    use serde_json::json;

    use super::Backends;
    use crate::tool::testing::FnTool;

    /// In-memory backends with a team's own tool, `lookup`: looks `query` up, finds nothing.
    pub(crate) fn backends() -> Backends {
        let parameters =
            json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]});
        let lookup = FnTool::new("lookup", "Looks facts up.", parameters, |arguments, _| async move {
            Ok(json!({"query": arguments["query"], "facts": []}))
        });
        let mut backends = Backends::in_memory();
        backends.tools.push(lookup);
        backends
    }
}
