//! `routing-eval --config F --suite S` for a configuration whose entry agent does not route (or
//! with `--turns`): every scenario played as a full turn of that configuration, its MCP servers
//! and remote agents reached as `serve` reaches them ([`baton_eval::turns`]). Under a model script
//! (`model: {script}` or `--model-script`) a team's flows run deterministically: the exit code is
//! 1 when a scenario fails or the script holds turns the suite never played.

use std::process::ExitCode;

use baton_eval::report::{self as eval_report, ReportInput, Summary};
use baton_eval::turns::run_turns;
use baton_reference::Deployment;

use super::{Progress, RoutingEvalArgs};

/// Runs `args.suite` as full turns of `deployment`.
pub(crate) async fn run(deployment: &Deployment, args: &RoutingEvalArgs) -> ExitCode {
    let fail = |message: String| {
        eprintln!("error: {message}");
        ExitCode::from(2)
    };
    let config = &deployment.config;
    let Some(path) = &args.suite else {
        return fail(format!(
            "the entry agent `{}` is run as full turns: give its own suite with --suite (docs/testing.md)",
            config.agents.entry
        ));
    };
    let suite = match std::fs::read_to_string(path) {
        Ok(yaml) => match baton_eval::parse_suite(&yaml, &path.display().to_string()) {
            Ok(suite) => suite,
            Err(e) => return fail(e.to_string()),
        },
        Err(e) => return fail(format!("cannot read {}: {e}", path.display())),
    };
    let history = match args.history.as_deref().map(eval_report::load_history).transpose() {
        Ok(h) => h.unwrap_or_default(),
        Err(e) => return fail(e),
    };
    let mut backends = match deployment.backends(None) {
        Ok(backends) => backends,
        Err(e) => return fail(e.to_string()),
    };
    backends.remote = baton_aws::settings::remote_agents(config).await;
    backends.signer = baton_aws::sigv4::a2a_signer(config).await;
    backends.mcp = match baton::mcp::connect_all(&config.all_mcp_servers()).await {
        Ok(mcp) => mcp,
        Err(baton::mcp::McpError::Config(e)) => {
            return fail(format!("invalid MCP configuration: {}: {}", config.locate(&e.path), e.reason));
        }
        Err(e) => return fail(e.to_string()),
    };
    eprintln!("{}", config.describe_models());
    let progress = Progress::new();
    let turns = run_turns(config, backends, &suite, |done, total, o| {
        progress.show(done, total, &o.id, o.result.is_ok())
    })
    .await;
    progress.finish();
    let turns = match turns {
        Ok(turns) => turns,
        Err(e) => return fail(e.to_string()),
    };
    let suite_name = path.file_stem().map_or("turns".to_owned(), |s| s.to_string_lossy().into_owned());
    let run_at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_millis()).ok());
    let summary = Summary::new(&suite_name, &turns.run.report, &[], run_at_ms);
    if args.json {
        let mut json = eval_report::run_json(&summary, &turns.run, &suite);
        json["script"] = serde_json::json!(turns.script);
        println!("{json:#}");
    } else {
        print!("{}", turns.run.report);
        for problem in &turns.script {
            println!("model script: {problem}");
        }
    }
    if let Some(path) = &args.summary {
        if let Err(e) = std::fs::write(path, summary.to_json() + "\n") {
            return fail(format!("cannot write {}: {e}", path.display()));
        }
    }
    if let Some(path) = &args.html {
        let input = ReportInput {
            suite: &suite_name,
            run: &turns.run,
            scenarios: &suite,
            faults: None,
            history: &history,
            run_at_ms,
        };
        if let Err(e) = std::fs::write(path, eval_report::render_html(&input)) {
            return fail(format!("cannot write {}: {e}", path.display()));
        }
    }
    if turns.passed() { ExitCode::SUCCESS } else { ExitCode::from(1) }
}
