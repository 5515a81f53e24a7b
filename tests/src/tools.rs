//! The tools the end-to-end tests give a team: [`Counting`], a tool with a side effect that
//! counts its runs (and takes a set time), and [`CountingTools`], a deployment offering any
//! number of them by name, shared by every instance of a test (one side effect, wherever it
//! runs).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton::tool::{Tool, ToolContext, ToolError};
use baton::wiring::Extension;
use serde_json::{Value, json};

/// A tool taking `{offer_id}` that counts its runs, waits `delay`, and answers
/// `{"done": offer_id, "run": n}`.
pub struct Counting {
    name: &'static str,
    runs: Arc<AtomicUsize>,
    delay: Arc<Mutex<Duration>>,
}

#[async_trait::async_trait]
impl Tool for Counting {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "Acts on an offer."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"offer_id": {"type": "string", "pattern": "^o-[0-9]+$"}},
               "required": ["offer_id"], "additionalProperties": false})
    }
    async fn call(&self, arguments: Value, _: &ToolContext) -> Result<Value, ToolError> {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        let delay = *self.delay.lock().unwrap();
        tokio::time::sleep(delay).await;
        Ok(json!({"done": arguments["offer_id"], "run": n}))
    }
}

/// A deployment whose tools are [`Counting`] tools with the given names.
#[derive(Clone)]
pub struct CountingTools {
    runs: BTreeMap<&'static str, Arc<AtomicUsize>>,
    delay: Arc<Mutex<Duration>>,
}

impl CountingTools {
    /// Tools named `names`, each counting its own runs, none waiting.
    pub fn new(names: &[&'static str]) -> CountingTools {
        let runs = names.iter().map(|n| (*n, Arc::default())).collect();
        CountingTools { runs, delay: Arc::default() }
    }

    /// Runs of `name` so far.
    pub fn runs(&self, name: &str) -> usize {
        self.runs.get(name).map_or(0, |r| r.load(Ordering::SeqCst))
    }

    /// How long every call takes from now on.
    pub fn set_delay(&self, delay: Duration) {
        *self.delay.lock().unwrap() = delay;
    }
}

impl Extension for CountingTools {
    fn tool_names(&self) -> Vec<&str> {
        self.runs.keys().copied().collect()
    }
    fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        let (name, runs) = self.runs.get_key_value(name)?;
        Some(Arc::new(Counting { name, runs: runs.clone(), delay: self.delay.clone() }))
    }
}
