//! `routing-eval`: the routing scenario suite against the configured model, and fault injection;
//! optionally an HTML report (`--html`) with the trend over previous summaries (`--history`),
//! and this run's JSON summary (`--summary`). Progress goes to stderr, results to stdout: the text
//! report, or with `--json` the summary and every scenario's calls, repairs and verdict; either
//! with the smalltalk check's recall and precision on its labelled corpus and per source and
//! language (`smalltalk_sources`: the project's corpus, tuned on, and two sources it did not write).
//!
//! A configuration whose entry agent does not route (a team's own), or `--turns`, runs its own
//! suite as full turns instead (`turns`): a team's flows under a model script, in its CI.
//!
//! A binary of the eval function's crate, so the evaluation (`baton-eval`) is linked here and in
//! the scheduled function, never into the chat functions. It reads the same settings as they do.

use std::io::{IsTerminal, Write};

use baton_aws::settings::Settings;
use baton_reference::ReferenceSettings;
use clap::Parser;

use baton_eval as eval;
use baton_eval::report::{self as eval_report, ReportInput, Summary};

#[path = "routing_eval/turns.rs"]
mod turns;

/// Runs Baton's routing scenario suite against the configured model and prints accuracy per
/// category; `--faults` also reports what the failsafe and guards recover from injected routing
/// mistakes. With no OPENAI_API_KEY and no OPENAI_BASE_URL it routes with the offline model.
///
/// With a configuration whose entry agent does not route (`--config F --suite S`), or with
/// `--turns`, each scenario is played as a full turn instead and checked for the calls each agent
/// made, their arguments and the answer; under a model script (`--model-script`) a team's flows
/// run deterministically, and the exit code is 1 when one fails (docs/testing.md).
#[derive(Parser)]
#[command(name = "routing-eval", version, about, long_about)]
struct Cli {
    #[command(flatten)]
    eval: RoutingEvalArgs,

    /// The runtime settings shared with the functions.
    #[command(flatten)]
    settings: Settings,

    /// The reference deployment's own settings.
    #[command(flatten)]
    reference: ReferenceSettings,
}

/// Options of `routing-eval`.
#[derive(Debug, clap::Args)]
struct RoutingEvalArgs {
    /// A scenario suite (YAML); the reference suite (data/routing/scenarios.yaml) by default.
    #[arg(long)]
    suite: Option<std::path::PathBuf>,

    /// Play each scenario as a full turn of the configuration (every agent, tool and answer), not
    /// only the entry agent's routing; the default when the entry agent does not route.
    #[arg(long, conflicts_with = "faults")]
    turns: bool,

    /// Also run the fault-injection report (scripted model; no network).
    #[arg(long)]
    faults: bool,

    /// Scenarios routed at once (for a real model).
    #[arg(long, default_value_t = 4)]
    concurrency: usize,

    /// Also write a self-contained HTML report (charts, failing scenarios, trend) to this file.
    #[arg(long)]
    html: Option<std::path::PathBuf>,

    /// Previous runs for the report's trend: a JSON summary file (one, an array, or one per line)
    /// or a directory of them.
    #[arg(long, requires = "html")]
    history: Option<std::path::PathBuf>,

    /// Print JSON instead of the text report: the summary and, per scenario, every dispatched
    /// call with all its arguments, the repairs the rules made and the verdict.
    #[arg(long)]
    json: bool,

    /// Also write this run's JSON summary to this file (keep them in a directory for --history).
    #[arg(long)]
    summary: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let _traces = baton_aws::settings::init_logging("baton-routing-eval");
    let mut cli = Cli::parse();
    if let Err(e) = cli.settings.resolve_secrets(&[]).await {
        eprintln!("error: {e}");
        return std::process::ExitCode::from(2);
    }
    let deployment = match cli.settings.config(baton_reference::reference_config()) {
        Ok(config) => cli.reference.deployment(config),
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let config = &deployment.config;
    let routes = config.agents.get(&config.agents.entry).is_some_and(|entry| entry.routing.is_some());
    if cli.eval.turns || !routes {
        return turns::run(&deployment, &cli.eval).await;
    }
    run(config, &cli.eval).await
}

async fn run(config: &baton::config::Config, args: &RoutingEvalArgs) -> std::process::ExitCode {
    let fail = |message: String| {
        eprintln!("error: {message}");
        std::process::ExitCode::from(2)
    };
    let (yaml, origin) = match &args.suite {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(y) => (y, path.display().to_string()),
            Err(e) => return fail(format!("cannot read {}: {e}", path.display())),
        },
        None => (eval::REFERENCE_SUITE.to_owned(), "data/routing/scenarios.yaml".to_owned()),
    };
    let suite = match eval::load_suite(&yaml, &origin) {
        Ok(s) => s,
        Err(e) => return fail(e.to_string()),
    };
    // Read the history before the (possibly long) run, so a bad path fails at once.
    let history = match args.history.as_deref().map(eval_report::load_history).transpose() {
        Ok(h) => h.unwrap_or_default(),
        Err(e) => return fail(e),
    };
    let router = match baton::wiring::build_router(config, &baton::wiring::Backends::in_memory()) {
        Ok(Some(router)) => std::sync::Arc::new(router),
        Ok(None) => {
            return fail(format!(
                "the configured entry agent `{}` does not route; the routing suite evaluates an \
                 entry agent with a `routing:` policy (as in the reference configuration)",
                config.agents.entry
            ));
        }
        Err(e) => return fail(e.to_string()),
    };
    let progress = Progress::new();
    let run = eval_report::run_suite(router.clone(), &suite, args.concurrency, |done, total, o| {
        progress.show(done, total, &o.id, o.result.is_ok())
    })
    .await;
    progress.finish();
    if !args.json {
        print!("{}", run.report);
    }
    // The fastpath's smalltalk check on its labelled corpus, with the configured vocabulary.
    let corpus = match eval::score_smalltalk_corpus(
        &router.settings().smalltalk,
        eval::SMALLTALK_CORPUS,
        "data/routing/smalltalk-corpus.yaml",
    ) {
        Ok(scores) => scores,
        Err(e) => return fail(e.to_string()),
    };
    // And across sources (the project's and two it did not write), per language.
    let sources = match eval::smalltalk_sources::score_sources(
        &router.settings().smalltalk,
        &eval::smalltalk_sources::SOURCES,
    ) {
        Ok(scores) => scores,
        Err(e) => return fail(e.to_string()),
    };
    if !args.json {
        println!();
        print!("{}", eval::format_corpus(&corpus));
        println!();
        print!("{}", eval::smalltalk_sources::format_sources(&sources));
    }
    let faults = if args.faults {
        eprintln!("fault injection: {} faults over {} scenarios…", eval::Fault::ALL.len(), suite.len());
        let faults = eval::run_faults(&router, &suite).await;
        if !args.json {
            println!();
            print!("{}", eval::format_faults(&faults));
        }
        Some(faults)
    } else {
        None
    };
    let run_at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_millis()).ok());
    let suite_name = args.suite.as_ref().map_or("routing".to_owned(), |p| {
        p.file_stem().map_or("routing".to_owned(), |s| s.to_string_lossy().into_owned())
    });
    let summary = Summary::new(&suite_name, &run.report, faults.as_deref().unwrap_or(&[]), run_at_ms);
    if args.json {
        let mut json = eval_report::run_json(&summary, &run, &suite);
        json["smalltalk_corpus"] = eval::corpus_json(&corpus);
        json["smalltalk_sources"] = eval::smalltalk_sources::sources_json(&sources);
        println!("{json:#}");
    }
    if let Some(path) = &args.summary {
        if let Err(e) = std::fs::write(path, summary.to_json() + "\n") {
            return fail(format!("cannot write {}: {e}", path.display()));
        }
        eprintln!("summary written to {}", path.display());
    }
    if let Some(path) = &args.html {
        let html = eval_report::render_html(&ReportInput {
            suite: &suite_name,
            run: &run,
            scenarios: &suite,
            faults: faults.as_deref(),
            history: &history,
            run_at_ms,
        });
        if let Err(e) = std::fs::write(path, html) {
            return fail(format!("cannot write {}: {e}", path.display()));
        }
        eprintln!("report written to {}", path.display());
    }
    std::process::ExitCode::SUCCESS
}

/// Progress on stderr: one rewritten line on a terminal, a line every tenth scenario otherwise.
struct Progress {
    terminal: bool,
}

impl Progress {
    fn new() -> Progress {
        Progress { terminal: std::io::stderr().is_terminal() }
    }

    fn show(&self, done: usize, total: usize, id: &str, passed: bool) {
        let verdict = if passed { "ok" } else { "FAIL" };
        let mut err = std::io::stderr().lock();
        if self.terminal {
            let _ = write!(err, "\r\x1b[2Krouting {done}/{total}: {id} {verdict}");
            let _ = err.flush();
        } else if done.is_multiple_of(10) || done == total {
            let _ = writeln!(err, "routing {done}/{total}");
        }
    }

    fn finish(&self) {
        if self.terminal {
            eprintln!();
        }
    }
}
