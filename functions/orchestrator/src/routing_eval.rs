//! `routing-eval`: the routing scenario suite against the configured model, and fault injection.

pub(crate) async fn run(
    config: &baton::config::Config,
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
    let router = match baton::wiring::build_router(config) {
        Ok(Some(router)) => std::sync::Arc::new(router),
        Ok(None) => {
            eprintln!(
                "error: the configured entry agent `{}` does not route; the routing suite evaluates an \
                 entry agent with a `routing:` policy (as in the reference configuration)",
                config.agents.entry
            );
            return std::process::ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    print!("{}", eval::run_suite(router.clone(), &suite, args.concurrency).await);
    if args.faults {
        println!();
        print!("{}", eval::format_faults(&eval::run_faults(&router, &suite).await));
    }
    std::process::ExitCode::SUCCESS
}
