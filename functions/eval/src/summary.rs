//! One evaluation run: the suite, its summary and HTML report, and where both are kept.
//!
//! Both live in the table (its keys: docs/storage.md, "DynamoDB (production)"), so the function
//! needs no other storage: the JSON summary is the reply of a turn of the episode
//! `USER#eval#EP#<suite>` (one turn per run, as before), and the report is the reply of a turn of
//! `USER#eval#EP#<suite>-report`, apart so that reading the trend never loads old reports. A
//! report is ~15 KB, far below an item's 400 KB. The trend comes from the summaries already
//! stored.

use baton::config::Config;
use baton::routing::Router;
use baton::store::{EpisodeKey, Role, Store, StoredMessage, new_turn_id};
use baton_eval as eval;
use baton_eval::report::{self as eval_report, ReportInput, Summary};
use serde_json::{Value, json};

/// The user the eval's episodes belong to.
pub(crate) const EVAL_USER: &str = "eval";
/// How many previous runs the report's trend shows.
const TREND_RUNS: usize = 30;
/// The agent name of stored summaries.
const SUMMARY_AGENT: &str = "eval";
/// The agent name of stored reports.
const REPORT_AGENT: &str = "eval_report";

/// The episode that keeps the reports of `suite`.
pub(crate) fn report_episode(suite: &str) -> String {
    format!("{suite}-report")
}

/// Runs the suite the event names and stores its summary and report; the summary (and where the
/// report went) is the function's result.
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
    let history = previous_runs(store, suite).await?;
    let run = eval_report::run_suite(router.clone(), &scenarios, 4, |done, total, o| {
        if done % 10 == 0 || done == total {
            tracing::info!(done, total, last = %o.id, "routing eval progress");
        }
    })
    .await;
    let faults = eval::run_faults(&router, &scenarios).await;
    let run_at_ms = store.clock().now_ms();
    let summary = Summary::new(suite, &run.report, &faults, Some(run_at_ms));
    let html = eval_report::render_html(&ReportInput {
        suite,
        run: &run,
        scenarios: &scenarios,
        faults: Some(&faults),
        history: &history,
        run_at_ms: Some(run_at_ms),
    });
    let summary_json = serde_json::to_value(&summary)?;
    save(store, suite, summary_json.to_string(), SUMMARY_AGENT).await?;
    let report_turn = save(store, &report_episode(suite), html, REPORT_AGENT).await?;
    let mut result = summary_json;
    result["report"] = json!({"user": EVAL_USER, "episode": report_episode(suite), "turn_id": report_turn});
    Ok(result)
}

/// The stored summaries of `suite`, oldest first; a summary stored before runs had a time gets
/// its message's time.
async fn previous_runs(store: &dyn Store, suite: &str) -> Result<Vec<Summary>, lambda_http::Error> {
    let key = EpisodeKey::new(EVAL_USER, suite)?;
    let messages = store.recent_messages(&key, 2 * TREND_RUNS).await?;
    let mut runs: Vec<Summary> = messages
        .iter()
        .filter(|m| m.role == Role::Assistant && m.agent == SUMMARY_AGENT)
        .filter_map(|m| match eval_report::parse_summaries(&m.content) {
            Ok(found) => Some(found.into_iter().map(|mut s| {
                s.run_at_ms.get_or_insert(m.created_at);
                s
            })),
            Err(e) => {
                tracing::warn!(turn = %m.turn_id, error = %e, "a stored eval summary does not parse; left out of the trend");
                None
            }
        })
        .flatten()
        .collect();
    runs.sort_by_key(|s| s.run_at_ms);
    Ok(runs)
}

/// Stores `content` as the reply of a new turn of the eval episode `episode`; returns the turn.
async fn save(
    store: &dyn Store,
    episode: &str,
    content: String,
    agent: &str,
) -> Result<String, lambda_http::Error> {
    let key = EpisodeKey::new(EVAL_USER, episode)?;
    let turn = new_turn_id();
    let now = store.clock().now_ms();
    store
        .record_user_message(&key, &StoredMessage::user(&turn, format!("run suite {episode}"), now), None)
        .await?;
    let mut result = StoredMessage::user(&turn, content, now);
    result.role = Role::Assistant;
    result.agent = agent.into();
    result.seq = 1;
    store.save_reply(&key, &turn, &[result]).await?;
    Ok(turn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton::store::SystemClock;
    use baton::store::embedded::EmbeddedStore;
    use std::sync::Arc;

    #[tokio::test]
    async fn each_run_stores_a_summary_and_a_report_whose_trend_has_the_earlier_runs() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(EmbeddedStore::open(dir.path().join("s.redb"), Arc::new(SystemClock)).unwrap());
        let config = baton_reference::reference_config(); // the offline model: no network
        let router = baton::wiring::build_router(&config, &baton::wiring::Backends::in_memory())
            .unwrap()
            .map(Arc::new);
        let event = json!({"suite": "routing"});
        let first = run(&event, &router, &config, store.as_ref()).await.unwrap();
        let second = run(&event, &router, &config, store.as_ref()).await.unwrap();
        assert_eq!(first["total"], second["total"]);
        assert!(second["run_at_ms"].as_u64() >= first["run_at_ms"].as_u64());

        let summaries = previous_runs(store.as_ref(), "routing").await.unwrap();
        assert_eq!(summaries.len(), 2);
        assert_eq!(serde_json::to_value(&summaries[1]).unwrap(), {
            let mut s = second.clone();
            s.as_object_mut().unwrap().remove("report");
            s
        });
        let key = EpisodeKey::new(EVAL_USER, "routing-report").unwrap();
        let reports: Vec<StoredMessage> = store
            .recent_messages(&key, 10)
            .await
            .unwrap()
            .into_iter()
            .filter(|m| m.agent == REPORT_AGENT)
            .collect();
        assert_eq!(reports.len(), 2);
        let latest =
            reports.iter().find(|m| m.turn_id == second["report"]["turn_id"].as_str().unwrap()).unwrap();
        assert!(latest.content.starts_with("<!doctype html>"));
        assert!(
            latest.content.contains("Trend over 2 run(s)"),
            "the first run is in the second report's trend"
        );
        assert!(latest.content.contains("id=\"fault-table\""));
    }

    #[tokio::test]
    async fn an_unknown_suite_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(EmbeddedStore::open(dir.path().join("s.redb"), Arc::new(SystemClock)).unwrap());
        let config = baton_reference::reference_config();
        let router = baton::wiring::build_router(&config, &baton::wiring::Backends::in_memory())
            .unwrap()
            .map(Arc::new);
        let err = run(&json!({"suite": "nope"}), &router, &config, store.as_ref()).await.unwrap_err();
        assert!(err.to_string().contains("unknown suite `nope`"), "{err}");
    }
}
