//! A team's assistant with a Rust tool of its own, served by `serve` on a local address or as the
//! Lambda chat function, with Baton's own wiring ([`baton_aws::app::main`]). Its configuration
//! (`BATON_CONFIG=assistant.yaml`) names the tool in an agent's `tools:`; every other setting
//! comes from the environment, as for Baton's `orchestrator`.

use std::sync::Arc;

use baton::{Tool, ToolContext, ToolError, async_trait};
use serde_json::{Value, json};

/// Converts an amount of money between currencies at the team's fixed rates (per euro).
struct ConvertCurrency;

const RATES: [(&str, f64); 3] = [("EUR", 1.0), ("USD", 1.08), ("GBP", 0.85)];

#[async_trait]
impl Tool for ConvertCurrency {
    fn name(&self) -> &str {
        "convert_currency"
    }

    fn description(&self) -> &str {
        "Converts an amount of money from one currency to another at today's rates."
    }

    fn parameters(&self) -> Value {
        let currency = json!({"type": "string", "enum": RATES.map(|(code, _)| code)});
        json!({
            "type": "object",
            "properties": {"amount": {"type": "number"}, "from": currency, "to": currency},
            "required": ["amount", "from", "to"],
        })
    }

    async fn call(&self, arguments: Value, _: &ToolContext) -> Result<Value, ToolError> {
        // The arguments were checked against `parameters` before the call.
        let rate = |field: &str| RATES.iter().find(|(code, _)| arguments[field] == *code).map(|(_, r)| *r);
        let converted = arguments["amount"].as_f64().zip(rate("from")).zip(rate("to"));
        let result = converted.map(|((amount, from), to)| (amount / from * to * 100.0).round() / 100.0);
        Ok(json!({"amount": result, "currency": arguments["to"]}))
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    baton_aws::app::main("own-tool", |backends| backends.with_tool(Arc::new(ConvertCurrency))).await
}
