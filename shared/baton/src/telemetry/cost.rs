//! Cost per agent: a price table per model and the pricing of each `usage` event.
//!
//! Prices are US dollars per million tokens, with at most six decimals, so each is a whole
//! number of picodollars per token ([`Usd`]) and a cost is an integer product: no float ever
//! enters a sum. OpenAI counts cached input tokens inside the input tokens and reasoning tokens
//! inside the output tokens; each part is billed at its own rate:
//!
//! ```text
//! cost = (input − cached) × input price + cached × cached_input price
//!      + (output − reasoning) × output price + reasoning × reasoning price
//! ```
//!
//! `cached_input` defaults to `input` and `reasoning` to `output` (OpenAI bills reasoning as
//! output). A model missing from the table gets no cost, never a guessed one, and one warning
//! per model per process.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use serde::Deserialize;

use crate::event::{Event, Usage, Usd, parse_scaled_decimal};

/// A price in US dollars per million tokens, held as picodollars per token (exact).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerMillion {
    picos_per_token: u64,
}

impl PerMillion {
    /// `usd` dollars per million tokens, written as a decimal (`"0.40"`).
    pub fn parse(usd: &str) -> Result<PerMillion, crate::event::BadDecimal> {
        parse_scaled_decimal(usd.trim(), 6).map(|picos_per_token| PerMillion { picos_per_token })
    }

    /// What `tokens` tokens cost.
    fn times(self, tokens: u64) -> Usd {
        Usd::from_picos(tokens.saturating_mul(self.picos_per_token))
    }
}

impl std::fmt::Display for PerMillion {
    /// The dollars per million tokens, as written in the table (`0.4`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Usd::from_picos(self.picos_per_token.saturating_mul(1_000_000)).fmt(f)
    }
}

impl std::fmt::Display for ModelPrice {
    /// `$0.4 in, $0.1 cached, $1.6 out per million tokens` (the defaulted rates left out).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "${} in", self.input)?;
        if let Some(cached) = self.cached_input {
            write!(f, ", ${cached} cached")?;
        }
        write!(f, ", ${} out", self.output)?;
        if let Some(reasoning) = self.reasoning {
            write!(f, ", ${reasoning} reasoning")?;
        }
        f.write_str(" per million tokens")
    }
}

impl<'de> Deserialize<'de> for PerMillion {
    /// A YAML number (`0.40`, read back as the shortest decimal that names the same float) or
    /// a string (`"0.40"`).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<PerMillion, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Number {
            Int(u64),
            Float(f64),
            Text(String),
        }
        let text = match Number::deserialize(deserializer)? {
            Number::Int(n) => n.to_string(),
            Number::Float(f) => f.to_string(),
            Number::Text(t) => t,
        };
        PerMillion::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// One model's prices, per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Input tokens not read from the cache.
    pub input: PerMillion,
    /// Input tokens read from the prompt cache; `input` when absent.
    #[serde(default)]
    pub cached_input: Option<PerMillion>,
    /// Output tokens that are not reasoning.
    pub output: PerMillion,
    /// Reasoning tokens; `output` when absent.
    #[serde(default)]
    pub reasoning: Option<PerMillion>,
}

impl ModelPrice {
    /// What `usage` costs at these prices.
    pub fn cost(&self, usage: &Usage) -> Usd {
        let cached = usage.cached_input_tokens.min(usage.input_tokens);
        let reasoning = usage.reasoning_tokens.min(usage.output_tokens);
        [
            self.input.times(usage.input_tokens - cached),
            self.cached_input.unwrap_or(self.input).times(cached),
            self.output.times(usage.output_tokens - reasoning),
            self.reasoning.unwrap_or(self.output).times(reasoning),
        ]
        .into_iter()
        .fold(Usd::ZERO, Usd::saturating_add)
    }
}

/// The price table of the configuration (`prices:`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// When the prices were read from the vendor's list (`YYYY-MM-DD`).
    #[serde(default)]
    pub as_of: Option<String>,
    /// Prices by model name, as agents name their models.
    #[serde(default)]
    pub models: BTreeMap<String, ModelPrice>,
}

impl Prices {
    /// This table with `other`'s models added over it (same name: `other`'s price) and its
    /// date, when it has one.
    pub fn merged(mut self, other: Prices) -> Prices {
        self.models.extend(other.models);
        if other.as_of.is_some() {
            self.as_of = other.as_of;
        }
        self
    }

    /// Checks the date's shape: `YYYY-MM-DD`.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(date) = &self.as_of {
            let ok = date.len() == 10
                && date
                    .bytes()
                    .enumerate()
                    .all(|(i, b)| if i == 4 || i == 7 { b == b'-' } else { b.is_ascii_digit() });
            if !ok {
                return Err(format!("`prices.as_of` is {date:?}, expected a date YYYY-MM-DD"));
            }
        }
        Ok(())
    }
}

/// Prices `usage` events with a [`Prices`] table; warns once per unpriced model.
#[derive(Debug, Default)]
pub(crate) struct Pricer {
    prices: Prices,
    warned: Mutex<HashSet<String>>,
}

impl Pricer {
    /// A pricer over `prices`.
    pub(crate) fn new(prices: Prices) -> Pricer {
        Pricer { prices, warned: Mutex::default() }
    }

    /// What `usage` of `model` costs, or `None` (and a warning, the first time) when the model
    /// has no price.
    pub(crate) fn cost(&self, model: &str, usage: &Usage) -> Option<Usd> {
        if let Some(price) = self.prices.models.get(model) {
            return Some(price.cost(usage));
        }
        let first = self.warned.lock().map(|mut w| w.insert(model.to_owned())).unwrap_or(false);
        if first {
            tracing::warn!(model, "no price for this model in `prices`: its usage carries no cost_usd");
        }
        None
    }

    /// Sets the `cost_usd` of a `usage` event (replacing any a remote agent sent, so one
    /// table prices the whole turn); other events pass.
    pub(crate) fn price(&self, event: &mut Event) {
        if let Event::Usage { model, usage, .. } = event {
            usage.cost_usd = self.cost(model, usage);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(input: &str, cached: Option<&str>, output: &str, reasoning: Option<&str>) -> ModelPrice {
        let p = |s: &str| PerMillion::parse(s).unwrap();
        ModelPrice {
            input: p(input),
            cached_input: cached.map(p),
            output: p(output),
            reasoning: reasoning.map(p),
        }
    }

    #[test]
    fn each_kind_of_token_is_billed_at_its_own_rate() {
        let p = price("0.40", Some("0.10"), "1.60", Some("3.20"));
        let usage = Usage {
            input_tokens: 1_000,
            cached_input_tokens: 400,
            output_tokens: 100,
            reasoning_tokens: 30,
            cost_usd: None,
        };
        // 600 × 0.40 + 400 × 0.10 + 70 × 1.60 + 30 × 3.20 = 240 + 40 + 112 + 96 = 488 µ$.
        assert_eq!(p.cost(&usage), "0.000488".parse().unwrap());
    }

    #[test]
    fn cached_and_reasoning_default_to_input_and_output_prices() {
        let p = price("2", None, "8", None);
        let usage = Usage {
            input_tokens: 10,
            cached_input_tokens: 5,
            output_tokens: 3,
            reasoning_tokens: 3,
            cost_usd: None,
        };
        assert_eq!(p.cost(&usage), Usd::from_picos(10 * 2_000_000 + 3 * 8_000_000));
    }

    #[test]
    fn a_tenth_of_a_microdollar_per_token_sums_without_drift() {
        // $0.10 per million is 0.1 µ$ per token: ten million single-token calls are exactly $1.
        let p = price("0.10", None, "0", None);
        let mut total = Usage::default();
        for _ in 0..10_000 {
            let mut u = Usage::tokens(1_000, 0);
            u.cost_usd = Some(p.cost(&u));
            total.add(u);
        }
        assert_eq!(total.cost_usd.unwrap().to_string(), "1");
    }

    #[test]
    fn prices_with_more_than_six_decimals_or_signs_are_refused() {
        assert!(PerMillion::parse("0.0000001").is_err());
        assert!(PerMillion::parse("-1").is_err());
        assert!(PerMillion::parse("1e3").is_err());
        assert_eq!(PerMillion::parse("0.000001").unwrap().picos_per_token, 1);
        let yaml: ModelPrice = serde_yaml_ng::from_str("{input: 0.4, output: \"1.60\"}").unwrap();
        assert_eq!(yaml, price("0.40", None, "1.6", None));
        let err = serde_yaml_ng::from_str::<ModelPrice>("{input: 0.1234567, output: 1}").unwrap_err();
        assert!(err.to_string().contains("at most 6 decimals"), "{err}");
    }

    #[test]
    fn a_price_prints_as_written() {
        assert_eq!(
            price("0.40", Some("0.10"), "1.60", None).to_string(),
            "$0.4 in, $0.1 cached, $1.6 out per million tokens"
        );
        assert_eq!(
            price("0", None, "0.000001", Some("2")).to_string(),
            "$0 in, $0.000001 out, $2 reasoning per million tokens"
        );
    }

    #[test]
    fn an_unknown_model_has_no_cost() {
        let pricer = Pricer::new(Prices::default());
        assert_eq!(pricer.cost("mystery", &Usage::tokens(5, 5)), None);
        let mut event = Event::usage("a[1]", "mystery", Usage::tokens(5, 5));
        pricer.price(&mut event);
        assert!(!serde_json::to_string(&event).unwrap().contains("cost_usd"));
    }
}
