//! One CloudWatch Embedded Metric Format (EMF) line per turn.
//!
//! In Lambda, a JSON line on stdout that carries an `_aws.CloudWatchMetrics` directive becomes
//! metrics in CloudWatch with no agent and no API call. Each turn writes one such line:
//!
//! | metric | unit | value |
//! |---|---|---|
//! | `TurnDuration` | Milliseconds | request received → `completed` |
//! | `TimeToFirstByte` | Milliseconds | request received → `thinking` |
//! | `TimeToFirstText` | Milliseconds | request received → first user-visible text (absent when none) |
//! | `TurnError`, `TurnPartial` | Count | 1 when the turn ended `error` / `partial`, else 0 (their average is a rate) |
//! | `Errors` | Count | in-band `error` events of the turn |
//! | `GuardRepairs` | Count | repairs the routing rules made to the model's routing (guards, re-asks) |
//! | `InputTokens`, `OutputTokens`, `CachedInputTokens`, `ReasoningTokens` | Count | the turn's tokens |
//! | `CostUSD` | None | the turn's cost (absent when an agent's model has no price) |
//! | `<agent>.InputTokens`, `<agent>.OutputTokens`, `<agent>.CostUSD` | Count, Count, None | per agent name |
//!
//! One dimension, `Function` (the Lambda function's name), so an alarm or a dashboard names one
//! deployment. Per-agent figures are metric names rather than an `Agent` dimension: one line
//! can give a dimension only one value. `episode_id`, `turn_id` and `status` ride along as
//! properties for CloudWatch Logs Insights; they are not dimensions (too many values).

use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use super::{TurnReport, TurnReporter};
use crate::event::{Status, Usage};

/// The CloudWatch namespace of Baton's metrics.
pub(crate) const NAMESPACE: &str = "Baton";

/// The EMF line of `turn`, for function `function`, stamped `timestamp_ms` (no newline).
pub(crate) fn line(turn: &TurnReport<'_>, function: &str, timestamp_ms: u64) -> String {
    let mut root = Map::new();
    let mut metrics = Vec::new();
    let mut put = |name: String, unit: &str, value: Value| {
        metrics.push(json!({"Name": name, "Unit": unit}));
        root.insert(name, value);
    };
    let ms = |d: Duration| json!(d.as_secs_f64() * 1000.0);
    put("TurnDuration".into(), "Milliseconds", ms(turn.duration));
    put("TimeToFirstByte".into(), "Milliseconds", ms(turn.first_byte));
    if let Some(first_text) = turn.first_text {
        put("TimeToFirstText".into(), "Milliseconds", ms(first_text));
    }
    put("TurnError".into(), "Count", json!(u8::from(turn.status == Status::Error)));
    put("TurnPartial".into(), "Count", json!(u8::from(turn.status == Status::Partial)));
    put("Errors".into(), "Count", json!(turn.errors));
    put("GuardRepairs".into(), "Count", json!(turn.repairs));

    let mut total = Usage::default();
    let mut agents: Vec<(&str, Usage)> = Vec::new();
    for u in turn.usage {
        total.add(u.usage);
        match agents.iter_mut().find(|(name, _)| *name == u.agent) {
            Some((_, sum)) => sum.add(u.usage),
            None => agents.push((&u.agent, u.usage)),
        }
    }
    put("InputTokens".into(), "Count", json!(total.input_tokens));
    put("OutputTokens".into(), "Count", json!(total.output_tokens));
    put("CachedInputTokens".into(), "Count", json!(total.cached_input_tokens));
    put("ReasoningTokens".into(), "Count", json!(total.reasoning_tokens));
    if let Some(cost) = total.cost_usd {
        put("CostUSD".into(), "None", json!(cost.as_f64()));
    }
    for (agent, usage) in agents {
        put(format!("{agent}.InputTokens"), "Count", json!(usage.input_tokens));
        put(format!("{agent}.OutputTokens"), "Count", json!(usage.output_tokens));
        if let Some(cost) = usage.cost_usd {
            put(format!("{agent}.CostUSD"), "None", json!(cost.as_f64()));
        }
    }

    root.insert("Function".into(), json!(function));
    root.insert("episode_id".into(), json!(turn.episode_id));
    root.insert("turn_id".into(), json!(turn.turn_id));
    root.insert("status".into(), serde_json::to_value(turn.status).expect("a status serializes"));
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [["Function"]],
                "Metrics": metrics,
            }],
        }),
    );
    Value::Object(root).to_string()
}

/// Writes each turn's EMF line to a writer (stdout in Lambda).
pub struct EmfReporter {
    function: String,
    out: Mutex<Box<dyn Write + Send>>,
}

impl EmfReporter {
    /// Lines for function `function`, written to stdout.
    pub fn stdout(function: impl Into<String>) -> EmfReporter {
        EmfReporter::new(function, Box::new(std::io::stdout()))
    }

    /// Lines for function `function`, written to `out`.
    pub fn new(function: impl Into<String>, out: Box<dyn Write + Send>) -> EmfReporter {
        EmfReporter { function: function.into(), out: Mutex::new(out) }
    }
}

impl TurnReporter for EmfReporter {
    fn report(&self, turn: &TurnReport<'_>) {
        let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let mut text = line(turn, &self.function, now_ms);
        text.push('\n');
        // One write of the whole line, so lines of concurrent turns never interleave.
        if let Ok(mut out) = self.out.lock() {
            if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                tracing::warn!(error = %e, "the turn's metrics line was not written");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::AgentUsage;

    #[test]
    fn a_turn_without_text_or_prices_leaves_those_metrics_out() {
        let usage = [AgentUsage { agent: "lead".into(), model: "m".into(), usage: Usage::tokens(3, 4) }];
        let turn = TurnReport {
            episode_id: "e",
            turn_id: "t",
            status: Status::Error,
            duration: Duration::from_millis(20),
            first_byte: Duration::from_micros(1500),
            first_text: None,
            errors: 2,
            repairs: 3,
            usage: &usage,
        };
        let v: Value = serde_json::from_str(&line(&turn, "fn", 7)).unwrap();
        assert_eq!(v["TurnError"], 1);
        assert_eq!(v["GuardRepairs"], 3);
        assert_eq!(v["TimeToFirstByte"], 1.5);
        assert!(v.get("TimeToFirstText").is_none() && v.get("CostUSD").is_none());
        assert!(v.get("lead.CostUSD").is_none());
        assert_eq!(v["lead.InputTokens"], 3);
        let names: Vec<&str> = v["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["Name"].as_str().unwrap())
            .collect();
        assert!(names.iter().all(|n| v.get(*n).is_some()), "every declared metric has a value: {names:?}");
    }
}
