//! The CloudWatch Embedded Metric Format line of a turn, through the real endpoint (SSE over
//! loopback, the OpenAI client against the scripted model server, the embedded store): each line
//! is checked against the EMF specification's structure, and its values against the turn.
//! <https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html>

use std::io::Write;
use std::sync::{Arc, Mutex};

use baton::event::Event;
use baton::http::EndpointLimits;
use baton::model::scripted::{Reply, ScriptedServer};
use baton::telemetry::emf::EmfReporter;
use baton_tests::stores::{Embedded, StoreHarness, test_clock};
use baton_tests::{Deployment, Endpoint, open_stream_as, scripted_config, start_endpoint_over};
use futures::StreamExt;
use serde_json::{Value, json};

/// What the reporter wrote, shared with the test.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self) -> Vec<String> {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap().lines().map(str::to_owned).collect()
    }
}

const TEAM: &str = "\
prices:
  models:
    lead-model: {input: 0.40, cached_input: 0.10, output: 1.60}
    helper-model: {input: 2, output: 8}
entry: lead
agents:
  - name: lead
    model: lead-model
    instruction: Lead.
    agents: [helper]
  - name: helper
    model: helper-model
    instruction: Help.
    output: text_and_events
";

/// The units the EMF specification allows.
const UNITS: &[&str] = &[
    "Seconds",
    "Microseconds",
    "Milliseconds",
    "Bytes",
    "Kilobytes",
    "Megabytes",
    "Gigabytes",
    "Terabytes",
    "Bits",
    "Kilobits",
    "Megabits",
    "Gigabits",
    "Terabits",
    "Percent",
    "Count",
    "Bytes/Second",
    "Kilobytes/Second",
    "Megabytes/Second",
    "Gigabytes/Second",
    "Terabytes/Second",
    "Bits/Second",
    "Kilobits/Second",
    "Megabits/Second",
    "Gigabits/Second",
    "Terabits/Second",
    "Count/Second",
    "None",
];

/// Panics unless `line` is a valid EMF document: `_aws` with an integer `Timestamp` and
/// `CloudWatchMetrics` directives, each with a namespace, dimension sets naming string members
/// of the root (at most 30 each), and at most 100 metrics with valid names and units, each naming
/// a numeric member of the root.
fn assert_valid_emf(line: &str) -> Value {
    let root: Value = serde_json::from_str(line).expect("one JSON object per line");
    let aws = &root["_aws"];
    assert!(aws["Timestamp"].is_u64(), "Timestamp is epoch milliseconds: {aws}");
    let directives = aws["CloudWatchMetrics"].as_array().expect("CloudWatchMetrics is an array");
    assert!(!directives.is_empty());
    for d in directives {
        let namespace = d["Namespace"].as_str().expect("Namespace is a string");
        assert!(!namespace.is_empty() && namespace.len() <= 255 && !namespace.contains(':'), "{namespace}");
        for set in d["Dimensions"].as_array().expect("Dimensions is an array") {
            let set = set.as_array().expect("a dimension set is an array");
            assert!(set.len() <= 30);
            for name in set {
                let name = name.as_str().expect("a dimension is a string");
                assert!(root[name].is_string(), "dimension {name} names a string member");
            }
        }
        let metrics = d["Metrics"].as_array().expect("Metrics is an array");
        assert!(!metrics.is_empty() && metrics.len() <= 100);
        for m in metrics {
            let name = m["Name"].as_str().expect("a metric has a Name");
            assert!(!name.is_empty() && name.len() <= 255);
            let unit = m["Unit"].as_str().expect("a metric has a Unit");
            assert!(UNITS.contains(&unit), "{name}: unit {unit}");
            assert!(root[name].is_number(), "metric {name} has a numeric value: {}", root[name]);
        }
    }
    root
}

/// The chat endpoint of `config` on an embedded store, its EMF lines captured.
async fn reporting_endpoint(deployment: &Deployment) -> (Endpoint, Captured, Embedded) {
    let harness = Embedded::start(test_clock()).await;
    let captured = Captured::default();
    let mut backends = deployment.backends(Some(harness.store())).unwrap();
    backends.reporter = Some(Arc::new(EmfReporter::new("baton-orchestrator", Box::new(captured.clone()))));
    let endpoint =
        start_endpoint_over(&deployment.config, harness.store(), backends, EndpointLimits::default()).await;
    (endpoint, captured, harness)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_turn_writes_one_valid_emf_line_whose_values_match_the_turn() {
    let server = ScriptedServer::start().await.unwrap();
    let config = scripted_config(&server).with_yaml(TEAM, "team.yaml").unwrap();
    let (endpoint, captured, _store) = reporting_endpoint(&config).await;
    let url = endpoint.url.clone();

    // lead: 600 × 0.40 + 400 × 0.10 + 50 × 1.60 + 20 × 0.40 + 5 × 1.60 = 376 µ$;
    // helper: 30 × 2 + 10 × 8 = 140 µ$.
    server.push(
        "lead-model",
        Reply::text("")
            .tool_call("agent__helper", json!({"text": "q"}))
            .usage(1_000, 50)
            .cached_and_reasoning(400, 0),
    );
    server.push("helper-model", Reply::text("Helped.").usage(30, 10));
    server.push("lead-model", Reply::text("Done.").usage(20, 5));
    let body = json!({"message": "help", "episode_id": "e1"});
    let events: Vec<Event> = open_stream_as(&url, "alice", body).await.map(|r| r.event).collect().await;
    let Some(Event::Completed { turn_id, .. }) = events.last() else { panic!("{events:?}") };

    let lines = captured.lines();
    assert_eq!(lines.len(), 1, "one line per turn: {lines:?}");
    let emf = assert_valid_emf(&lines[0]);
    let directive = &emf["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(directive["Namespace"], "Baton");
    assert_eq!(directive["Dimensions"], json!([["Function"]]));
    assert_eq!(emf["Function"], "baton-orchestrator");
    assert_eq!(emf["turn_id"], turn_id.as_str());
    assert_eq!(emf["status"], "ok");
    assert_eq!(
        (emf["TurnError"].as_u64(), emf["TurnPartial"].as_u64(), emf["Errors"].as_u64()),
        (Some(0), Some(0), Some(0))
    );
    let unit_of = |name: &str| {
        directive["Metrics"].as_array().unwrap().iter().find(|m| m["Name"] == name).map(|m| m["Unit"].clone())
    };
    assert_eq!(unit_of("TurnDuration"), Some(json!("Milliseconds")));
    assert_eq!(unit_of("lead.CostUSD"), Some(json!("None")));
    let (first_byte, first_text, duration) = (
        emf["TimeToFirstByte"].as_f64().unwrap(),
        emf["TimeToFirstText"].as_f64().unwrap(),
        emf["TurnDuration"].as_f64().unwrap(),
    );
    assert!(
        0.0 < first_byte && first_byte <= first_text && first_text <= duration,
        "{first_byte} {first_text} {duration}"
    );
    assert_eq!(
        (emf["InputTokens"].as_u64(), emf["OutputTokens"].as_u64(), emf["CachedInputTokens"].as_u64()),
        (Some(1_050), Some(65), Some(400))
    );
    assert_eq!(
        (emf["lead.InputTokens"].as_u64(), emf["lead.OutputTokens"].as_u64()),
        (Some(1_020), Some(55))
    );
    assert_eq!(
        (emf["helper.InputTokens"].as_u64(), emf["helper.OutputTokens"].as_u64()),
        (Some(30), Some(10))
    );
    let close = |name: &str, want: f64| {
        let got = emf[name].as_f64().unwrap();
        assert!((got - want).abs() < 1e-12, "{name}: {got} vs {want}");
    };
    close("lead.CostUSD", 0.000376);
    close("helper.CostUSD", 0.000140);
    close("CostUSD", 0.000516);
    assert_eq!(emf["GuardRepairs"].as_u64(), Some(0), "no routing, no repairs");
}

/// The reference router's repairs are counted in the turn's line, and their internal events
/// never reach the client: a real question answered directly, and again when asked once more,
/// is re-asked (one repair) and then sent to shopping (another).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_routing_rules_repairs_are_counted_and_stay_off_the_wire() {
    let server = ScriptedServer::start().await.unwrap();
    let config = scripted_config(&server);
    let (endpoint, captured, _store) = reporting_endpoint(&config).await;
    let url = endpoint.url.clone();

    let direct = "Milk is cheaper in bulk. Costco sells two gallons for five dollars.";
    server.push(baton_tests::ORCH, Reply::text(direct)).push(baton_tests::ORCH, Reply::text(direct));
    server.push(baton_tests::SHOP, Reply::text("Here are milk offers."));
    let body = json!({"message": "is it cheaper to buy milk in bulk", "episode_id": "e1"});
    let events: Vec<Event> = open_stream_as(&url, "alice", body).await.map(|r| r.event).collect().await;
    assert!(matches!(events.last(), Some(Event::Completed { .. })), "{events:?}");
    assert!(!events.iter().any(|e| matches!(e, Event::Repaired { .. })), "internal: {events:?}");

    let lines = captured.lines();
    let emf = assert_valid_emf(&lines[0]);
    assert_eq!(emf["GuardRepairs"].as_u64(), Some(2), "the re-ask and the fallback: {emf}");
}
