//! The checks of the `agents:` list at start: names, kinds, references, routing, mini-agents,
//! tools (those available at build time, and MCP servers'), and cycles; each error names the
//! file, the line and the field ([`AgentsConfig::error`]).

use std::collections::HashSet;

use super::*;

impl AgentsConfig {
    /// Checks everything that does not depend on the tools available at build time: names,
    /// references, kinds, cycles, schemas and numbers.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.agents.is_empty() {
            return Err(self.error(None, "agents", "must list at least one agent"));
        }
        if self.max_depth == 0 || self.max_depth > MAX_DEPTH_LIMIT {
            return Err(self.error(None, "max_depth", format!("must be between 1 and {MAX_DEPTH_LIMIT}")));
        }
        // Names first: every other check refers to agents by name.
        let mut seen = HashSet::new();
        for (i, a) in self.agents.iter().enumerate() {
            let valid_name = !a.name.is_empty()
                && a.name.len() <= 64 - AGENT_TOOL_PREFIX.len()
                && a.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !valid_name {
                return Err(self.error(
                    Some(i),
                    "name",
                    format!(
                        "`{}` must be 1 to {} letters, digits, `_` or `-` (its tool name is `agent__<name>`)",
                        a.name,
                        64 - AGENT_TOOL_PREFIX.len()
                    ),
                ));
            }
            if !seen.insert(a.name.as_str()) {
                return Err(self.error(Some(i), "name", format!("`{}` is defined twice", a.name)));
            }
        }
        for (i, a) in self.agents.iter().enumerate() {
            self.validate_agent(i, a)?;
        }
        let Some(entry) = self.index_of(&self.entry) else {
            return Err(self.error(
                None,
                "entry",
                format!("unknown agent `{}`; defined: {}", self.entry, self.names()),
            ));
        };
        if self.agents[entry].kind != AgentKind::Llm {
            return Err(self.error(None, "entry", "the entry agent must be of kind `llm`"));
        }
        self.validate_a2a_served()?;
        self.validate_mcp_served()?;
        self.check_cycles()
    }

    /// Checks `a2a: {agents: [...]}`: each a defined agent of kind `llm`, run here (no
    /// `remote:`), listed once.
    fn validate_a2a_served(&self) -> Result<(), ConfigError> {
        let mut seen = HashSet::new();
        for name in &self.a2a_served {
            let reason = match self.get(name) {
                None => Some(format!("unknown agent `{name}`; defined: {}", self.names())),
                Some(a) if a.kind != AgentKind::Llm => {
                    Some(format!("`{name}` is not of kind `llm`: only an llm agent answers a turn"))
                }
                Some(a) if a.remote.is_some() => {
                    Some(format!("`{name}` has `remote:`: serve it where it runs"))
                }
                Some(_) if !seen.insert(name.as_str()) => Some(format!("`{name}` is listed twice")),
                Some(_) => None,
            };
            if let Some(reason) = reason {
                return Err(self.error(None, "a2a", reason));
            }
        }
        Ok(())
    }

    /// Checks `mcp: {agents: [...]}`: each a defined agent, listed once.
    fn validate_mcp_served(&self) -> Result<(), ConfigError> {
        let mut seen = HashSet::new();
        for name in self.mcp_served.iter().flatten() {
            let reason = match self.get(name) {
                None => format!("unknown agent `{name}`; defined: {}", self.names()),
                Some(_) if !seen.insert(name.as_str()) => format!("`{name}` is listed twice"),
                Some(_) => continue,
            };
            return Err(self.error(None, "mcp", reason));
        }
        Ok(())
    }

    /// The agents `orchestrator mcp` serves: those `mcp: {agents: [...]}` lists, else the entry
    /// agent.
    pub fn mcp_served(&self) -> Vec<&str> {
        match &self.mcp_served {
            Some(listed) => listed.iter().map(String::as_str).collect(),
            None => vec![self.entry.as_str()],
        }
    }

    /// Checks agent `i` on its own: numbers, schemas, what its kind takes, its routing, its
    /// remote, and the agents and tools it lists.
    fn validate_agent(&self, i: usize, a: &AgentSpec) -> Result<(), ConfigError> {
        self.validate_limits(i, a)?;
        self.validate_approvals(i, a)?;
        self.validate_kind(i, a)?;
        if let Some(routing) = &a.routing {
            self.validate_routing(i, a, routing)?;
        }
        if let Some(minis) = a.minis() {
            self.validate_minis(i, a, minis)?;
        }
        if let Some(remote) = &a.remote {
            remote_problem(remote).map_or(Ok(()), |reason| Err(self.error(Some(i), "remote", reason)))?;
        }
        self.validate_lists(i, a)
    }

    /// Checks agent `i`'s timeouts, steps and schemas.
    fn validate_limits(&self, i: usize, a: &AgentSpec) -> Result<(), ConfigError> {
        let err = |field: &str, reason: String| Err(self.error(Some(i), field, reason));
        for (field, secs) in
            [("timeout_seconds", a.timeout_seconds), ("tool_timeout_seconds", a.tool_timeout_seconds)]
        {
            if let Some(s) = secs {
                if !(s.is_finite() && s > 0.0 && s <= 900.0) {
                    return err(field, format!("{s} must be above 0 and at most 900"));
                }
            }
        }
        if a.max_steps.is_some_and(|n| n == 0 || n > 50) {
            return err("max_steps", "must be between 1 and 50".into());
        }
        if let Some(schema) = &a.input_schema {
            JsonSchema::compile(schema).map_err(|e| self.error(Some(i), "input_schema", e))?;
            if schema.get("type").and_then(|t| t.as_str()) != Some("object") {
                return err("input_schema", "must be `type: object` (tool arguments are an object)".into());
            }
        }
        if let Some(schema) = &a.output_schema {
            JsonSchema::compile(schema).map_err(|e| self.error(Some(i), "output_schema", e))?;
        }
        Ok(())
    }

    /// Checks agent `i`'s tool names (as the model calls them) and its approval rules.
    fn validate_approvals(&self, i: usize, a: &AgentSpec) -> Result<(), ConfigError> {
        let err = |field: &str, reason: String| Err(self.error(Some(i), field, reason));
        for (field, names) in [
            ("tools", a.tools.iter().collect::<Vec<_>>()),
            ("needs_approval", a.needs_approval.keys().collect()),
        ] {
            if let Some((old, new)) = names.iter().find_map(|t| crate::mcp::respelled(t).map(|new| (t, new)))
            {
                return err(
                    field,
                    format!("`{old}`: an MCP tool is named as the model calls it, `{new}` (docs/mcp.md)"),
                );
            }
        }
        for (tool, spec) in &a.needs_approval {
            if a.kind != AgentKind::Llm || a.remote.is_some() {
                return err(
                    "needs_approval",
                    "only an `llm` agent that runs here holds calls for approval".into(),
                );
            }
            spec.rule(tool).map_err(|e| self.error(Some(i), "needs_approval", format!("{tool}: {e}")))?;
            if let ApprovalSpec::Rule(rule) = spec {
                if let Some(bad) = rule.editable.iter().find(|f| f.is_empty() || f.contains(['.', '/'])) {
                    return err(
                        "needs_approval",
                        format!("{tool}: editable `{bad}` must name a top-level argument"),
                    );
                }
            }
        }
        Ok(())
    }

    /// Checks what agent `i`'s kind takes: an `a2a` agent lists nothing, an `llm` one has an
    /// instruction, a built-in one takes none of it.
    fn validate_kind(&self, i: usize, a: &AgentSpec) -> Result<(), ConfigError> {
        let err = |field: &str, reason: String| Err(self.error(Some(i), field, reason));
        match &a.kind {
            // A remote A2A agent is defined where it runs: its entry here only names it.
            AgentKind::Llm if a.remote.as_ref().is_some_and(|r| r.a2a.is_some()) => {
                if !a.tools.is_empty() || !a.agents.is_empty() {
                    return err(
                        "remote",
                        "an `a2a` agent runs elsewhere: it lists no tools or agents".into(),
                    );
                }
            }
            AgentKind::Llm => {
                if a.instruction.trim().is_empty() {
                    return err("instruction", "an `llm` agent needs an instruction".into());
                }
            }
            AgentKind::Builtin(kind) => {
                for (field, set) in [
                    ("instruction", !a.instruction.is_empty()),
                    ("tools", !a.tools.is_empty()),
                    ("agents", !a.agents.is_empty()),
                    ("model", a.model.is_some()),
                ] {
                    if set {
                        return err(
                            field,
                            format!(
                                "a `{kind}` agent is built in: it takes no instruction, model, tools or agents"
                            ),
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks that agent `i` lists its agents (all defined) and tools once each.
    fn validate_lists(&self, i: usize, a: &AgentSpec) -> Result<(), ConfigError> {
        let err = |field: &str, reason: String| Err(self.error(Some(i), field, reason));
        let mut listed = HashSet::new();
        for child in &a.agents {
            if self.index_of(child).is_none() {
                return err("agents", format!("unknown agent `{child}`; defined: {}", self.names()));
            }
            if !listed.insert(child) {
                return err("agents", format!("`{child}` is listed twice"));
            }
        }
        let mut tools = HashSet::new();
        for tool in &a.tools {
            if !tools.insert(tool) {
                return err("tools", format!("`{tool}` is listed twice"));
            }
        }
        Ok(())
    }

    /// Checks agent `i`'s mini-agents: numbers, what the agent is, and no nesting (no agent a
    /// forking agent can reach, its minis' children included, may fork itself).
    fn validate_minis(&self, i: usize, a: &AgentSpec, minis: &MiniAgentSpec) -> Result<(), ConfigError> {
        let err =
            |field: &str, reason: String| Err(self.error(Some(i), &format!("mini_agent.{field}"), reason));
        if let Some(n) = minis.max_minis {
            if !(2..=MAX_MINIS).contains(&n) {
                return err("max_minis", format!("{n} must be between 2 and {MAX_MINIS} (the hard cap)"));
            }
        }
        if let Some(s) = minis.timeout_seconds {
            if !(s.is_finite() && s > 0.0 && s <= 900.0) {
                return err("timeout_seconds", format!("{s} must be above 0 and at most 900"));
            }
        }
        if a.kind != AgentKind::Llm {
            return err("enabled", "only an `llm` agent has mini-agents".into());
        }
        if a.routing.is_some() {
            return err("enabled", "a routing agent already splits a message between its agents".into());
        }
        if minis.tool_allowlist_mode != AllowlistMode::ParentFull && a.tools.is_empty() && a.agents.is_empty()
        {
            return err(
                "tool_allowlist_mode",
                "minis of an agent without tools or agents get no tool; use `parent_full`".into(),
            );
        }
        // No nesting: a forking agent must not be reachable from another forking agent.
        for (j, other) in self.agents.iter().enumerate() {
            if j != i && other.minis().is_some() && self.reaches(j, &a.name) {
                return err(
                    "enabled",
                    format!(
                        "`{}` forks into minis and can reach `{}` (its minis could start it), and minis do not nest",
                        other.name, a.name
                    ),
                );
            }
        }
        Ok(())
    }

    /// Whether agent `from` calls `name`, directly or through other agents.
    fn reaches(&self, from: usize, name: &str) -> bool {
        let mut seen = HashSet::new();
        let mut stack = vec![from];
        while let Some(at) = stack.pop() {
            for child in &self.agents[at].agents {
                if child == name {
                    return true;
                }
                if let Some(c) = self.index_of(child) {
                    if seen.insert(c) {
                        stack.push(c);
                    }
                }
            }
        }
        false
    }

    /// Checks agent `i`'s routing policy.
    fn validate_routing(&self, i: usize, a: &AgentSpec, routing: &RoutingSpec) -> Result<(), ConfigError> {
        let err = |reason: String| Err(self.error(Some(i), "routing", reason));
        if a.kind != AgentKind::Llm {
            return err("only an `llm` agent routes".into());
        }
        if !a.tools.is_empty() {
            return err("a routing agent dispatches to its agents only: it takes no `tools`".into());
        }
        for (what, name) in [("fallback", Some(&routing.fallback)), ("followup", routing.followup.as_ref())] {
            if let Some(name) = name {
                if !a.agents.contains(name) {
                    return err(format!(
                        "{what} `{name}` is not one of its agents ({})",
                        a.agents.join(", ")
                    ));
                }
            }
        }
        for (kind, name) in &routing.images {
            if !a.agents.contains(name) {
                return err(format!(
                    "images: `{}` goes to `{name}`, which is not one of its agents ({})",
                    kind.as_str(),
                    a.agents.join(", ")
                ));
            }
        }
        if routing.followup.is_some() && routing.categories.is_empty() {
            return err("categories: a follow-up agent needs at least one category".into());
        }
        if let Some(bad) = routing.categories.iter().find(|c| {
            c.is_empty() || !c.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
        }) {
            return err(format!("categories: `{bad}` must be snake_case"));
        }
        let declared = [
            ("category_argument", &routing.category_argument),
            ("summary_argument", &routing.summary_argument),
        ];
        for (field, name) in declared.iter().filter_map(|(f, n)| n.as_ref().map(|n| (f, n))) {
            if routing.followup.is_none() {
                return err(format!("{field}: only a routing with a `followup` agent has one"));
            }
            let snake = !name.is_empty()
                && name.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_');
            if !snake || ["query", "prior_context", "intent_count"].contains(&name.as_str()) {
                return err(format!(
                    "{field}: `{name}` must be a snake_case name other than query, prior_context and intent_count"
                ));
            }
        }
        if routing.category_argument.is_some() && routing.category_argument == routing.summary_argument {
            return err("summary_argument: it must differ from category_argument".into());
        }
        if let Some(guards) = &routing.guards {
            crate::guard::Guards::only(guards)
                .map_err(|e| self.error(Some(i), "routing", format!("guards: {e}")))?;
        }
        if let Some(smalltalk) = &routing.smalltalk {
            crate::text::Lexicon::with_defaults(smalltalk)
                .map_err(|e| self.error(Some(i), "routing", format!("smalltalk: {e}")))?;
        }
        for child in &a.agents {
            if let Some(spec) = self.get(child) {
                if spec.output != OutputMode::TextAndEvents {
                    return err(format!(
                        "its agents' answers are its answer: set `output: text_and_events` on `{child}`"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks the agents' own MCP servers (their fields; a name no other server has) and that
    /// the MCP tools an agent lists (`mcp__<server>__*`, `mcp__<server>__<tool>`) name a shared server or one of its
    /// own, never another agent's.
    pub fn validate_mcp_tools(&self, shared: &crate::mcp::config::McpServers) -> Result<(), ConfigError> {
        let mut owners: HashMap<&str, &str> = HashMap::new();
        for (i, a) in self.agents.iter().enumerate() {
            for (name, server) in &a.mcp_servers {
                let field = "mcp_servers";
                crate::mcp::config::validate_server(name, server)
                    .map_err(|e| self.error(Some(i), field, format!("{}: {}", e.path, e.reason)))?;
                let taken = match (shared.contains_key(name), owners.get(name.as_str())) {
                    (true, _) => Some("the top-level `mcp_servers`".to_owned()),
                    (false, Some(owner)) => Some(format!("agent `{owner}`")),
                    (false, None) => None,
                };
                if let Some(by) = taken {
                    let reason = format!("an MCP server named `{name}` is already declared by {by}");
                    return Err(self.error(Some(i), field, reason));
                }
                owners.insert(name, &a.name);
            }
        }
        for (i, a) in self.agents.iter().enumerate() {
            let mut visible = shared.clone();
            visible.extend(a.mcp_servers.iter().map(|(k, v)| (k.clone(), v.clone())));
            for tool in a.tools.iter().filter(|t| crate::mcp::is_mcp_pattern(t)) {
                let server = crate::mcp::pattern_server(tool).unwrap_or(tool);
                if let Some(owner) = owners.get(server).filter(|o| **o != a.name) {
                    let reason = format!("`{tool}`: `{server}` is agent `{owner}`'s own MCP server");
                    return Err(self.error(Some(i), "tools", reason));
                }
                crate::mcp::validate_pattern(tool, &visible)
                    .map_err(|e| self.error(Some(i), "tools", e.reason))?;
            }
        }
        Ok(())
    }

    /// Checks that every listed tool (but MCP tools, checked by
    /// [`AgentsConfig::validate_mcp_tools`]) exists among `available`.
    pub fn validate_tools(&self, available: &[&str]) -> Result<(), ConfigError> {
        for (i, a) in self.agents.iter().enumerate() {
            let unknown =
                a.tools.iter().find(|t| !crate::mcp::is_mcp_pattern(t) && !available.contains(&t.as_str()));
            if let Some(unknown) = unknown {
                return Err(self.error(
                    Some(i),
                    "tools",
                    match available {
                        [] => format!("unknown tool `{unknown}`; available: none"),
                        _ => format!("unknown tool `{unknown}`; available: {}", available.join(", ")),
                    },
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn names(&self) -> String {
        self.agents.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// Agents that call each other in a circle would never end: each must be a tree below it.
    fn check_cycles(&self) -> Result<(), ConfigError> {
        fn visit<'a>(
            config: &'a AgentsConfig,
            at: usize,
            path: &mut Vec<&'a str>,
            done: &mut HashSet<usize>,
        ) -> Result<(), ConfigError> {
            let name = config.agents[at].name.as_str();
            if let Some(start) = path.iter().position(|p| *p == name) {
                let mut cycle = path[start..].to_vec();
                cycle.push(name);
                let from = config.index_of(path[path.len() - 1]);
                return Err(config.error(
                    from,
                    "agents",
                    format!("agents call each other in a circle: {}", cycle.join(" → ")),
                ));
            }
            if done.contains(&at) {
                return Ok(());
            }
            path.push(name);
            for child in &config.agents[at].agents {
                if let Some(c) = config.index_of(child) {
                    visit(config, c, path, done)?;
                }
            }
            path.pop();
            done.insert(at);
            Ok(())
        }
        let mut done = HashSet::new();
        for i in 0..self.agents.len() {
            visit(self, i, &mut Vec::new(), &mut done)?;
        }
        Ok(())
    }
}

/// What is wrong with a remote agent's `remote`, if anything.
fn remote_problem(remote: &RemoteSpec) -> Option<String> {
    let ways = [remote.url.is_some(), remote.function.is_some(), remote.a2a.is_some()];
    if ways.iter().filter(|w| **w).count() != 1 {
        return Some("give exactly one of `url`, `function` and `a2a`".into());
    }
    if let Some(url) = &remote.a2a {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Some(format!("`a2a` must be an http(s) URL, not {url:?}"));
        }
    }
    if remote.token_env.is_some() && remote.a2a.is_none() {
        return Some("`token_env` goes with `a2a`".into());
    }
    if remote.auth.is_some() && remote.a2a.is_none() {
        return Some("`auth` goes with `a2a`".into());
    }
    if remote.auth.is_some() && remote.token_env.is_some() {
        return Some("give `token_env` (a bearer token) or `auth: sigv4`, not both".into());
    }
    if (remote.service.is_some() || remote.region.is_some()) && remote.auth.is_none() {
        return Some("`service` and `region` go with `auth: sigv4`".into());
    }
    let name_ok = |v: &str| !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if remote.service.iter().chain(&remote.region).any(|v| !name_ok(v)) {
        return Some("`service` and `region` are names of letters, digits and `-`".into());
    }
    None
}
