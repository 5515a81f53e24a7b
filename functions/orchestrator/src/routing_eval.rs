//! `routing-eval`: the routing scenario suite against the configured model, and fault injection;
//! optionally an HTML report (`--html`) with the trend over previous summaries (`--history`),
//! and this run's JSON summary (`--summary`). Progress goes to stderr, results to stdout: the text
//! report, or with `--json` the summary and every scenario's calls, repairs and verdict; either
//! with the smalltalk check's recall and precision on its labelled corpus.

use std::io::{IsTerminal, Write};

use baton_eval as eval;
use baton_eval::report::{self as eval_report, ReportInput, Summary};

pub(crate) async fn run(
    config: &baton::config::Config,
    args: &crate::cli::RoutingEvalArgs,
) -> std::process::ExitCode {
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
    if !args.json {
        println!();
        print!("{}", eval::format_corpus(&corpus));
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
