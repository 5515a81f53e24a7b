//! The CloudWatch Embedded Metric Format line of a turn, through the real endpoint (SSE over
//! loopback, the OpenAI client against the scripted model server, the embedded store): each line
//! is checked against the EMF specification's structure, and its values against the turn.
//! <https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html>
//!
//! Then one status everywhere: a turn whose reply cannot be saved, whose user message cannot be
//! saved, or whose client leaves has the same status in what the client sees, the EMF line and
//! the turn span.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use baton::event::{Event, Status};
use baton::http::EndpointLimits;
use baton::model::scripted::{Reply, ScriptedServer};
use baton::store::{Episode, EpisodeKey, LeaseGrant, Recorded, Store, StoreError, StoredMessage};
use baton::telemetry::emf::EmfReporter;
use baton_tests::stores::{Embedded, StoreHarness, test_clock};
use baton_tests::{
    Deployment, Endpoint, ORCH, open_stream_as, scripted_config, start_endpoint_over, wait_until,
};
use futures::StreamExt;
use serde_json::{Value, json};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

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

/// The embedded store, except that the writes chosen fail as a store that cannot be reached does.
struct Failing {
    inner: Arc<dyn Store>,
    user_message: bool,
    reply: bool,
}

fn outage() -> StoreError {
    StoreError::Unavailable("the test cut the store off".into())
}

impl baton::store::Clocked for Failing {
    fn clock(&self) -> &dyn baton::store::Clock {
        self.inner.clock()
    }
}

#[async_trait::async_trait]
impl baton::store::Conversations for Failing {
    async fn episode(&self, key: &EpisodeKey) -> Result<Option<Episode>, StoreError> {
        self.inner.episode(key).await
    }

    async fn save_episode(&self, episode: &Episode) -> Result<Episode, StoreError> {
        self.inner.save_episode(episode).await
    }

    async fn record_user_message(
        &self,
        key: &EpisodeKey,
        message: &StoredMessage,
        request_id: Option<&str>,
    ) -> Result<Recorded, StoreError> {
        if self.user_message {
            return Err(outage());
        }
        self.inner.record_user_message(key, message, request_id).await
    }

    async fn save_reply(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        messages: &[StoredMessage],
    ) -> Result<(), StoreError> {
        if self.reply {
            return Err(outage());
        }
        self.inner.save_reply(key, turn_id, messages).await
    }

    async fn recent_messages(
        &self,
        key: &EpisodeKey,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        self.inner.recent_messages(key, limit).await
    }

    async fn messages_page(
        &self,
        key: &EpisodeKey,
        before: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<StoredMessage>, Option<String>), StoreError> {
        self.inner.messages_page(key, before, limit).await
    }

    async fn request_turn(&self, key: &EpisodeKey, request_id: &str) -> Result<Option<String>, StoreError> {
        self.inner.request_turn(key, request_id).await
    }
}

#[async_trait::async_trait]
impl baton::store::Leases for Failing {
    async fn take_lease(
        &self,
        key: &EpisodeKey,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<LeaseGrant, StoreError> {
        self.inner.take_lease(key, name, holder, ttl).await
    }

    async fn release_lease(&self, key: &EpisodeKey, name: &str, holder: &str) -> Result<(), StoreError> {
        self.inner.release_lease(key, name, holder).await
    }
}

#[async_trait::async_trait]
impl baton::store::TurnLog for Failing {
    async fn start_turn_log(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        deadline_ms: u64,
    ) -> Result<(), StoreError> {
        self.inner.start_turn_log(key, turn_id, deadline_ms).await
    }

    async fn append_turn_events(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        events: &[baton::store::LoggedEvent],
    ) -> Result<(), StoreError> {
        self.inner.append_turn_events(key, turn_id, events).await
    }

    async fn record_turn_gap(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        from: u64,
        to: u64,
    ) -> Result<(), StoreError> {
        self.inner.record_turn_gap(key, turn_id, from, to).await
    }

    async fn end_turn_log(&self, key: &EpisodeKey, turn_id: &str, status: &str) -> Result<(), StoreError> {
        self.inner.end_turn_log(key, turn_id, status).await
    }

    async fn turn_events(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<baton::store::LoggedEvent>, StoreError> {
        self.inner.turn_events(key, turn_id, after_seq, limit).await
    }

    async fn turn_record(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
    ) -> Result<Option<baton::store::TurnRecord>, StoreError> {
        self.inner.turn_record(key, turn_id).await
    }

    async fn latest_turn(&self, key: &EpisodeKey) -> Result<Option<String>, StoreError> {
        self.inner.latest_turn(key).await
    }

    async fn request_cancel(
        &self,
        key: &EpisodeKey,
        turn_id: &str,
    ) -> Result<baton::store::CancelOutcome, StoreError> {
        self.inner.request_cancel(key, turn_id).await
    }
}

#[async_trait::async_trait]
impl baton::store::ApprovalRecords for Failing {
    async fn approvals(&self, key: &EpisodeKey) -> Result<Option<(u64, String)>, StoreError> {
        self.inner.approvals(key).await
    }

    async fn save_approvals(
        &self,
        key: &EpisodeKey,
        body: &str,
        expected: u64,
        keep_until_s: u64,
    ) -> Result<u64, StoreError> {
        self.inner.save_approvals(key, body, expected, keep_until_s).await
    }
}

/// The `baton.status` recorded on each `turn` span, by its episode: what the trace exporter is
/// given (the export itself is `traces.rs`'s). One subscriber for the process, so each test
/// names its own episode.
#[derive(Clone, Default)]
struct TurnSpans(Arc<Mutex<HashMap<String, String>>>);

/// A turn span's fields of interest.
#[derive(Default)]
struct TurnFields {
    episode: Option<String>,
    status: Option<String>,
}

impl Visit for TurnFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "baton.episode_id" => self.episode = Some(value.to_owned()),
            "baton.status" => self.status = Some(value.to_owned()),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for TurnSpans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() == "turn" {
            let mut fields = TurnFields::default();
            attrs.record(&mut fields);
            ctx.span(id).expect("a new span").extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        let Some(fields) = extensions.get_mut::<TurnFields>() else { return };
        values.record(fields);
        if let (Some(episode), Some(status)) = (&fields.episode, &fields.status) {
            self.0.lock().unwrap().insert(episode.clone(), status.clone());
        }
    }
}

impl TurnSpans {
    /// The process's turn spans (installed as the global subscriber on first use).
    fn global() -> &'static TurnSpans {
        static SPANS: OnceLock<TurnSpans> = OnceLock::new();
        SPANS.get_or_init(|| {
            let spans = TurnSpans::default();
            tracing_subscriber::registry().with(spans.clone()).init();
            spans
        })
    }

    /// The status recorded on `episode`'s turn span, once recorded (bounded).
    async fn status_of(&self, episode: &str) -> String {
        wait_until("the turn span's status", || async { self.0.lock().unwrap().contains_key(episode) }).await;
        self.0.lock().unwrap()[episode].clone()
    }
}

/// An endpoint over a store that fails as asked, its EMF lines captured.
struct Watched {
    server: ScriptedServer,
    endpoint: Endpoint,
    captured: Captured,
    harness: Embedded,
    spans: &'static TurnSpans,
}

impl Watched {
    async fn start(user_message: bool, reply: bool) -> Watched {
        let spans = TurnSpans::global();
        let server = ScriptedServer::start().await.unwrap();
        let harness = Embedded::start(test_clock()).await;
        let store: Arc<dyn Store> = Arc::new(Failing { inner: harness.store(), user_message, reply });
        let captured = Captured::default();
        let deployment = scripted_config(&server);
        let mut backends = deployment.backends(Some(store.clone())).unwrap();
        backends.reporter =
            Some(Arc::new(EmfReporter::new("baton-orchestrator", Box::new(captured.clone()))));
        let endpoint =
            start_endpoint_over(&deployment.config, store, backends, EndpointLimits::default()).await;
        Watched { server, endpoint, captured, harness, spans }
    }

    /// The one EMF line, once it is written (bounded).
    async fn emf(&self) -> Value {
        wait_until("the turn's EMF line", || async { !self.captured.lines().is_empty() }).await;
        let lines = self.captured.lines();
        assert_eq!(lines.len(), 1, "one line per turn: {lines:?}");
        assert_valid_emf(&lines[0])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_that_cannot_be_saved_is_an_error_turn_to_the_client_the_metrics_and_the_trace() {
    let w = Watched::start(false, true).await;
    w.server.push(ORCH, Reply::text("Hello!").usage(10, 2));
    let body = json!({"message": "hi", "episode_id": "reply-lost"});
    let events: Vec<Event> =
        open_stream_as(&w.endpoint.url, "alice", body).await.map(|r| r.event).collect().await;

    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Error { code, retryable: true, .. } if code == "store_unavailable")),
        "the failed save is an error event: {events:?}"
    );
    let Some(Event::Completed { status, .. }) = events.last() else { panic!("{events:?}") };
    assert_eq!(*status, Status::Error, "the client's completed");
    let emf = w.emf().await;
    assert_eq!(emf["status"], "error", "{emf}");
    assert_eq!((emf["TurnError"].as_u64(), emf["Errors"].as_u64()), (Some(1), Some(1)), "{emf}");
    assert_eq!(emf["InputTokens"].as_u64(), Some(10), "the usage is still counted");
    assert_eq!(w.spans.status_of("reply-lost").await, "error", "the trace");
    let key = EpisodeKey::new("alice", "reply-lost").unwrap();
    let stored = w.harness.store().recent_messages(&key, 10).await.unwrap();
    assert_eq!(stored.len(), 1, "the user message only: {stored:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_message_that_cannot_be_saved_is_a_503_and_an_error_turn_to_the_metrics_and_the_trace() {
    let w = Watched::start(true, false).await;
    w.server.push(ORCH, Reply::text("Hello!"));
    let response = reqwest::Client::new()
        .post(&w.endpoint.url)
        .header(baton::http::USER_HEADER, "alice")
        .json(&json!({"message": "hi", "episode_id": "message-lost"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
    assert!(w.server.requests_for(ORCH).is_empty(), "no model call without a recorded message");
    let emf = w.emf().await;
    assert_eq!(emf["status"], "error", "{emf}");
    assert_eq!((emf["TurnError"].as_u64(), emf["Errors"].as_u64()), (Some(1), Some(1)), "{emf}");
    assert!(emf.get("TimeToFirstText").is_none(), "no text: {emf}");
    assert_eq!(w.spans.status_of("message-lost").await, "error", "the trace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_is_a_partial_turn_to_the_store_the_metrics_and_the_trace() {
    let w = Watched::start(false, false).await;
    w.server.push(ORCH, Reply::text("word ".repeat(300)).chunk_delay(Duration::from_millis(20)));
    let body = json!({"message": "hi", "episode_id": "left", "on_disconnect": "cancel"});
    let mut stream = open_stream_as(&w.endpoint.url, "alice", body).await;
    while let Some(r) = stream.next().await {
        if matches!(r.event, Event::Text { .. }) {
            break;
        }
    }
    drop(stream);

    let emf = w.emf().await;
    assert_eq!(emf["status"], "partial", "{emf}");
    assert_eq!((emf["TurnError"].as_u64(), emf["TurnPartial"].as_u64()), (Some(0), Some(1)), "{emf}");
    assert!(emf["TimeToFirstText"].is_number(), "the client saw text: {emf}");
    assert_eq!(w.spans.status_of("left").await, "partial", "the trace");
    let key = EpisodeKey::new("alice", "left").unwrap();
    let store = w.harness.store();
    wait_until("the partial reply is saved", || async {
        store.recent_messages(&key, 10).await.unwrap().len() == 2
    })
    .await;
    let stored = store.recent_messages(&key, 10).await.unwrap();
    assert_eq!(stored[1].status, Status::Partial, "{stored:?}");
}
