//! `routing-eval`: the routing scenario suite against the configured model, and fault injection.

pub(crate) async fn run(
    config: &baton::config::Config,
    orchestrator: &baton::orchestrator::Orchestrator,
    args: &crate::cli::RoutingEvalArgs,
) -> std::process::ExitCode {
    use baton::eval;
    let (yaml, origin) = match &args.suite {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(y) => (y, path.display().to_string()),
            Err(e) => {
                eprintln!("error: cannot read {}: {e}", path.display());
                return std::process::ExitCode::from(2);
            }
        },
        None => (eval::REFERENCE_SUITE.to_owned(), "data/routing/scenarios.yaml".to_owned()),
    };
    let suite = match eval::load_suite(&yaml, &origin) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let Some(router) = orchestrator.router() else {
        eprintln!(
            "error: the configured entry agent `{}` is not a router; the routing suite evaluates the \
             reference routed turn (entry agent of kind `router`)",
            config.agents.entry
        );
        return std::process::ExitCode::from(2);
    };
    let model = router.model();
    print!("{}", eval::run_suite(model, &config.turn, &suite, args.concurrency).await);
    if args.faults {
        println!();
        print!("{}", eval::format_faults(&eval::run_faults(&config.turn, &suite).await));
    }
    std::process::ExitCode::SUCCESS
}
