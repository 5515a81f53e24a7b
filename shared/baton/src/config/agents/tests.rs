use super::*;

const TEAM: &str = "\
entry: lead
agents:
  - name: lead
    instruction: Lead.
    agents: [worker]
  - name: worker
    instruction: Work.
    tools: [lookup]
    timeout_seconds: 5
";

#[test]
fn fields_are_located_in_block_yaml() {
    assert_eq!(locate_agent_field(TEAM, 0, "agents"), Some(5));
    assert_eq!(locate_agent_field(TEAM, 1, "name"), Some(6));
    assert_eq!(locate_agent_field(TEAM, 1, "tools"), Some(8));
    assert_eq!(locate_agent_field(TEAM, 1, "timeout_seconds"), Some(9));
    assert_eq!(locate_agent_field(TEAM, 1, "output"), Some(6), "an unwritten field points at its agent");
    assert_eq!(locate_top_level(TEAM, "entry"), Some(1));
}

fn minis_team(lead_minis: &str, worker_minis: &str) -> String {
    format!(
        "entry: lead\nagents:\n  - name: lead\n    instruction: Lead.\n    tools: [lookup]\n    agents: [worker]\n{lead_minis}  - name: worker\n    instruction: Work.\n    tools: [lookup]\n{worker_minis}"
    )
}

fn load(yaml: &str) -> Result<crate::config::Config, String> {
    crate::config::Config::default().with_yaml(yaml, "team.yaml").map_err(|e| e.to_string())
}

#[test]
fn mini_agents_default_to_three_minis_strict_allowlists_and_the_agents_model() {
    let config = load(&minis_team("    mini_agent: {}\n", "")).unwrap();
    let minis = config.agents.get("lead").unwrap().minis().expect("enabled once the block is written");
    let settings = minis.settings(3);
    assert_eq!(settings.max_minis, DEFAULT_MAX_MINIS);
    assert_eq!(DEFAULT_MAX_MINIS, 3);
    assert_eq!(settings.allowlist, AllowlistMode::Strict);
    assert_eq!(settings.timeout, DEFAULT_MINI_TIMEOUT);
    assert_eq!((minis.decomposer_model.as_ref(), minis.aggregator_model.as_ref()), (None, None));
    let off = load(&minis_team("    mini_agent: {enabled: false}\n", "")).unwrap();
    assert!(off.agents.get("lead").unwrap().minis().is_none());
}

#[test]
fn max_minis_past_the_hard_cap_of_eight_is_refused_at_its_line() {
    assert!(load(&minis_team("    mini_agent:\n      max_minis: 8\n", "")).is_ok());
    let err =
        load(&minis_team("    mini_agent:\n      enabled: true\n      max_minis: 9\n", "")).unwrap_err();
    assert_eq!(
        err,
        "configuration file team.yaml: line 9: agents[0] (`lead`).mini_agent.max_minis: 9 must be between 2 and 8 (the hard cap)"
    );
    let err = load(&minis_team("    mini_agent: {max_minis: 1}\n", "")).unwrap_err();
    assert!(err.contains("line 7: agents[0] (`lead`).mini_agent.max_minis: 1 must be between 2"), "{err}");
}

#[test]
fn an_agent_a_forking_agent_can_reach_may_not_fork_itself() {
    let err = load(&minis_team("    mini_agent: {}\n", "    mini_agent: {enabled: true}\n")).unwrap_err();
    assert!(err.contains("line 11: agents[1] (`worker`).mini_agent.enabled:"), "{err}");
    assert!(err.contains("`lead` forks into minis and can reach `worker`"), "{err}");
    assert!(err.contains("minis do not nest"), "{err}");
    // Either one alone is fine.
    assert!(load(&minis_team("", "    mini_agent: {enabled: true}\n")).is_ok());
    assert!(load(&minis_team("    mini_agent: {}\n", "    mini_agent: {enabled: false}\n")).is_ok());
}

#[test]
fn strict_or_inferred_minis_need_an_agent_with_tools() {
    let yaml = "agents:\n  - name: solo\n    instruction: Talk.\n    mini_agent: {}\n";
    let err = load(yaml).unwrap_err();
    assert!(err.contains("mini_agent.tool_allowlist_mode: minis of an agent without tools"), "{err}");
    assert!(load(&yaml.replace("{}", "{tool_allowlist_mode: parent_full}")).is_ok());
    let err = load(&yaml.replace("{}", "{tool_allowlist_mode: everything}")).unwrap_err();
    assert!(err.contains("unknown variant `everything`"), "{err}");
}

fn approvals_team(rules: &str) -> String {
    format!(
        "entry: lead\nagents:\n  - name: lead\n    instruction: Lead.\n    agents: [worker]\n    needs_approval:\n{rules}  - name: worker\n    instruction: Work.\n"
    )
}

#[test]
fn approval_rules_are_read_true_or_a_rule_and_bad_ones_are_refused_at_their_line() {
    let config = load(&approvals_team(
        "      agent__worker:\n        when: {properties: {text: {maxLength: 3}}}\n        reason: Short asks need a person.\n        editable: [text]\n",
    ))
    .unwrap();
    let rule = config.agents.get("lead").unwrap().needs_approval["agent__worker"]
        .rule("agent__worker")
        .unwrap()
        .unwrap();
    assert_eq!(
        (rule.reason.as_str(), rule.editable.as_slice()),
        ("Short asks need a person.", &["text".to_owned()][..])
    );
    assert!(rule.when.as_ref().unwrap().validate(&serde_json::json!({"text": "abc"})).is_ok());
    assert!(rule.when.as_ref().unwrap().validate(&serde_json::json!({"text": "abcd"})).is_err());
    let always = load(&approvals_team("      agent__worker: true\n")).unwrap();
    let rule =
        always.agents.get("lead").unwrap().needs_approval["agent__worker"].rule("agent__worker").unwrap();
    assert!(rule.unwrap().reason.contains("agent__worker"), "a default reason names the tool");

    let err = load(&approvals_team("      agent__worker:\n        when: {type: 7}\n")).unwrap_err();
    assert!(err.contains("line 6: agents[0] (`lead`).needs_approval: agent__worker: when:"), "{err}");
    let err = load(&approvals_team("      agent__worker:\n        editable: [a.b]\n")).unwrap_err();
    assert!(err.contains("editable `a.b` must name a top-level argument"), "{err}");
    let err = load(&approvals_team("      agent__worker: maybe\n")).unwrap_err();
    assert!(err.contains("must be `true`, `false` or a rule"), "{err}");
}

#[test]
fn an_approval_rule_for_a_tool_the_agent_does_not_have_is_refused_at_its_line() {
    let config = load(&approvals_team("      agent__nobody: true\n")).unwrap();
    let err = crate::wiring::build(&config, crate::wiring::Backends::in_memory())
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("line 6: agents[0] (`lead`).needs_approval: `agent__nobody` is not one of its tools; its tools: agent__worker"),
        "{err}"
    );
}
