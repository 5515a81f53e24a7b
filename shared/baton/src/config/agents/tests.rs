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
