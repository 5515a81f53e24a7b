//! One evaluation run: the suite, its summary, and where the summary is kept.

use baton::config::Config;
use baton::eval::{self, Report};
use baton::routing::Router;
use baton::store::{EpisodeKey, Role, Store, StoredMessage, new_turn_id};
use serde_json::{Value, json};

/// Runs the suite the event names and stores its summary; the summary is the function's result.
pub(crate) async fn run(
    event: &Value,
    router: &Option<std::sync::Arc<Router>>,
    config: &Config,
    store: &dyn Store,
) -> Result<Value, lambda_http::Error> {
    let suite = event.get("suite").and_then(Value::as_str).unwrap_or("routing");
    if suite != "routing" {
        return Err(format!("unknown suite `{suite}`; the known suite is `routing`").into());
    }
    let scenarios = eval::load_suite(eval::REFERENCE_SUITE, "data/routing/scenarios.yaml")?;
    let router = router.clone().ok_or_else(|| {
        format!(
            "the configured entry agent `{}` does not route; the routing suite needs a `routing:` policy",
            config.agents.entry
        )
    })?;
    let report = eval::run_suite(router.clone(), &scenarios, 4).await;
    let faults = eval::run_faults(&router, &scenarios).await;
    let summary = summarize(suite, &report, &faults);
    save(store, suite, &summary).await?;
    Ok(summary)
}

fn summarize(suite: &str, report: &Report, faults: &[eval::FaultOutcome]) -> Value {
    let by_category: serde_json::Map<String, Value> = report
        .by_category()
        .into_iter()
        .map(|(category, (passed, total))| (category.to_owned(), json!({"passed": passed, "total": total})))
        .collect();
    let failures: Vec<Value> = report
        .outcomes
        .iter()
        .filter_map(|o| o.result.as_ref().err().map(|why| json!({"id": o.id, "why": why})))
        .collect();
    let faults: Vec<Value> = faults
        .iter()
        .map(|f| {
            json!({"fault": f.fault.name(), "applicable": f.applicable, "recovered": f.exact + f.loose,
                   "by_design": f.by_design.len(), "missed": f.missed.len()})
        })
        .collect();
    json!({
        "suite": suite,
        "model": report.model,
        "passed": report.passed(),
        "total": report.outcomes.len(),
        "by_category": by_category,
        "failures": failures,
        "faults": faults,
    })
}

async fn save(store: &dyn Store, suite: &str, summary: &Value) -> Result<(), lambda_http::Error> {
    let key = EpisodeKey::new("eval", suite)?;
    let turn = new_turn_id();
    let now = store.clock().now_ms();
    store
        .record_user_message(&key, &StoredMessage::user(&turn, format!("run suite {suite}"), now), None)
        .await?;
    let mut result = StoredMessage::user(&turn, summary.to_string(), now);
    result.role = Role::Assistant;
    result.agent = "eval".into();
    result.seq = 1;
    store.save_reply(&key, &turn, &[result]).await?;
    Ok(())
}
