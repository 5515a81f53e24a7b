//! Usage in the protocol: token counts, exact dollars, run statuses, and the per-agent roll-up
//! a turn's `usage` events and its `completed` summary carry.

use serde::{Deserialize, Serialize};

use super::Event;

/// An amount of US dollars, exact: a whole number of picodollars (10⁻¹² USD).
///
/// A price per million tokens with up to six decimals is a whole number of picodollars per
/// token, so a cost is tokens × price in integers and sums never drift. It serializes as a
/// decimal string (`"0.0000012"`), which a float would not keep exact; [`Usd::as_f64`] is for
/// metrics only. Sums saturate at about 18 million dollars.
///
/// Held as the picodollars plus one in a `NonZeroU64`, so an `Option<Usd>` (a cost that may be
/// unknown) is 8 bytes like the amount: it keeps `usage` and `completed` within an event's 128.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Usd {
    picos_plus_one: std::num::NonZeroU64,
}

impl Default for Usd {
    fn default() -> Usd {
        Usd::ZERO
    }
}

/// Decimal places of [`Usd`].
const USD_SCALE: u32 = 12;

impl Usd {
    /// Zero dollars.
    pub const ZERO: Usd = Usd::from_picos(0);

    /// `picos` picodollars (saturating one picodollar below `u64::MAX`).
    pub const fn from_picos(picos: u64) -> Usd {
        match std::num::NonZeroU64::new(picos.saturating_add(1)) {
            Some(picos_plus_one) => Usd { picos_plus_one },
            None => unreachable!(),
        }
    }

    /// The amount in picodollars.
    pub const fn picos(self) -> u64 {
        self.picos_plus_one.get() - 1
    }

    /// The sum, saturating.
    pub fn saturating_add(self, other: Usd) -> Usd {
        Usd::from_picos(self.picos().saturating_add(other.picos()))
    }

    /// The amount as a float, for metrics (never for sums).
    pub fn as_f64(self) -> f64 {
        self.picos() as f64 / 1e12
    }
}

impl std::fmt::Display for Usd {
    /// The decimal without trailing zeros: `0.0000012`, `3`, `0`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = 10u64.pow(USD_SCALE);
        let (whole, frac) = (self.picos() / unit, self.picos() % unit);
        if frac == 0 {
            return write!(f, "{whole}");
        }
        let digits = format!("{frac:012}");
        write!(f, "{whole}.{}", digits.trim_end_matches('0'))
    }
}

/// A decimal that is not a valid amount.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a plain decimal with at most {scale} decimals (e.g. 0.40)")]
pub struct BadDecimal {
    text: String,
    scale: u32,
}

/// Parses a plain, non-negative decimal (`12`, `0.40`, `.5`) into an integer scaled by
/// `10^scale`, exactly: more than `scale` decimals, a sign, an exponent or an overflow are errors.
pub(crate) fn parse_scaled_decimal(text: &str, scale: u32) -> Result<u64, BadDecimal> {
    let bad = || BadDecimal { text: text.to_owned(), scale };
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && frac.is_empty()) || !all_digits(whole) || !all_digits(frac) {
        return Err(bad());
    }
    let frac = frac.trim_end_matches('0');
    if frac.len() > scale as usize {
        return Err(bad());
    }
    let whole: u64 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| bad())? };
    let frac_scaled: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>().map_err(|_| bad())? * 10u64.pow(scale - frac.len() as u32)
    };
    whole.checked_mul(10u64.pow(scale)).and_then(|w| w.checked_add(frac_scaled)).ok_or_else(bad)
}

impl std::str::FromStr for Usd {
    type Err = BadDecimal;

    fn from_str(s: &str) -> Result<Usd, BadDecimal> {
        parse_scaled_decimal(s, USD_SCALE).map(Usd::from_picos)
    }
}

impl Serialize for Usd {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Usd {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Usd, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Token usage reported by a model for one call (or summed over several), and what it cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt (input) tokens, cached ones included.
    pub input_tokens: u64,
    /// Completion (output) tokens, reasoning ones included.
    pub output_tokens: u64,
    /// Of the input tokens, those the server read from its prompt cache (billed at the cached
    /// rate).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
    /// Of the output tokens, those the model spent reasoning.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
    /// What these tokens cost at the configured prices; absent when the model has no price
    /// in the `prices:` table. Set by the turn, never by a model client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<Usd>,
}

impl Usage {
    /// `input_tokens` in and `output_tokens` out, nothing cached, no reasoning, no cost.
    pub fn tokens(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage { input_tokens, output_tokens, ..Usage::default() }
    }

    /// Input plus output tokens.
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    /// Whether no token was counted.
    pub fn is_empty(&self) -> bool {
        self.input_tokens == 0 && self.output_tokens == 0
    }

    /// Adds `other` into `self`. The sum has a cost only when every part that spent tokens had
    /// one: an unpriced part makes it unknown, never understated.
    pub(crate) fn add(&mut self, other: Usage) {
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (None, b) if self.is_empty() => b,
            (a, None) if other.is_empty() => a,
            _ => None,
        };
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }
}

/// How a turn, or one sub-agent instance, ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Everything finished.
    Ok,
    /// Cut short (client disconnect, deadline); what was produced is kept.
    Partial,
    /// Failed; an `error` event says why.
    Error,
    /// A turn stopped by the cancel endpoint (`POST /chat/{episode_id}/turns/{turn_id}/cancel`);
    /// what was produced is kept.
    Cancelled,
    /// A turn whose producer died (a killed process): it was still running when its deadline
    /// passed. Only a resumed stream says so, in the `completed` it ends with.
    Abandoned,
    /// Paused for a person's approval of a tool call (`approval_required`): nothing failed; the
    /// next request on the episode answers the approvals and the turn goes on (docs/approvals.md).
    Interrupted,
}

impl Status {
    /// The worse of two statuses (`error` > `abandoned` > `cancelled` > `partial` > `interrupted`
    /// > `ok`).
    pub fn worst(self, other: Status) -> Status {
        fn rank(s: Status) -> u8 {
            match s {
                Status::Ok => 0,
                Status::Interrupted => 1,
                Status::Partial => 2,
                Status::Cancelled => 3,
                Status::Abandoned => 4,
                Status::Error => 5,
            }
        }
        if rank(other) > rank(self) { other } else { self }
    }

    /// Its name on the wire and in the store (`ok`, `partial`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Partial => "partial",
            Status::Error => "error",
            Status::Cancelled => "cancelled",
            Status::Abandoned => "abandoned",
            Status::Interrupted => "interrupted",
        }
    }

    /// The status named `name` ([`Status::as_str`]), if any.
    pub fn from_name(name: &str) -> Option<Status> {
        [
            Status::Ok,
            Status::Partial,
            Status::Error,
            Status::Cancelled,
            Status::Abandoned,
            Status::Interrupted,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

/// Usage of one agent (instance or rolled-up name) in a turn summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentUsage {
    /// Agent instance or name.
    pub agent: String,
    /// Model that spent the tokens.
    pub model: String,
    /// Tokens spent.
    #[serde(flatten)]
    pub usage: Usage,
}

/// The agent name of an instance: `researcher[2]` → `researcher`.
pub fn agent_name(instance: &str) -> &str {
    instance.split_once('[').map_or(instance, |(name, _)| name)
}

/// The cost of a turn whose usage per agent is `usage`: the sum of their costs, `None` when one
/// that spent tokens has no price or nothing was spent at a price (never understated).
pub(crate) fn turn_cost(usage: &[AgentUsage]) -> Option<Usd> {
    let mut total = Usage::default();
    usage.iter().for_each(|u| total.add(u.usage));
    total.cost_usd
}

/// Usage rolled up per agent name and model over a turn's instances (`researcher[1]` and
/// `researcher[2]` are one `researcher` entry), in order of first use; and per instance, for the
/// cost its `agent_finished` carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct UsageRollup {
    /// The totals so far.
    pub totals: Vec<AgentUsage>,
    /// Each instance's own usage so far, priced.
    instances: std::collections::HashMap<String, Usage>,
}

impl UsageRollup {
    /// Adds `usage` of `instance` with `model`; returns that agent name's total with that model.
    pub(crate) fn add(&mut self, instance: &str, model: &str, usage: Usage) -> Usage {
        let name = agent_name(instance);
        let at = match self.totals.iter().position(|t| t.agent == name && t.model == model) {
            Some(at) => at,
            None => {
                let zero = Usage::default();
                self.totals.push(AgentUsage { agent: name.to_owned(), model: model.to_owned(), usage: zero });
                self.totals.len() - 1
            }
        };
        self.totals[at].usage.add(usage);
        self.totals[at].usage
    }

    /// Adds a (priced) `usage` event into the totals and sets its `agent_total`; sets the
    /// `cost_usd` of an `agent_finished` to the cost of that instance's own `usage` events, when
    /// they add up to its tokens (else none: never a figure for other tokens); other events pass.
    pub(crate) fn observe(&mut self, event: &mut Event) {
        match event {
            Event::Usage { agent, model, usage, agent_total } => {
                *agent_total = Some(Box::new(self.add(agent, model, *usage)));
                self.instances.entry(agent.clone()).or_default().add(*usage);
            }
            Event::AgentFinished { agent, usage, .. } => {
                let seen = self.instances.get(agent.as_str()).copied().unwrap_or_default();
                let same =
                    (seen.input_tokens, seen.output_tokens) == (usage.input_tokens, usage.output_tokens);
                usage.cost_usd = if same { seen.cost_usd } else { None };
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_print_and_parse_exactly() {
        for (picos, text) in
            [(0, "0"), (1, "0.000000000001"), (1_200_000, "0.0000012"), (3_500_000_000_000, "3.5")]
        {
            assert_eq!(Usd::from_picos(picos).to_string(), text);
            assert_eq!(text.parse::<Usd>().unwrap(), Usd::from_picos(picos));
        }
        for bad in ["", ".", "-1", "1e-6", "0.0000000000001", "1,5", "99999999999"] {
            assert!(bad.parse::<Usd>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn agent_finished_gets_the_cost_of_its_own_usage_events_only_when_their_tokens_match() {
        let mut rollup = UsageRollup::default();
        let priced = |n: u64| Usage { cost_usd: Some(Usd::from_picos(n)), ..Usage::tokens(n, 1) };
        for usage in [priced(2), priced(3)] {
            rollup.observe(&mut Event::Usage {
                agent: "a[1]".into(),
                model: "m".into(),
                usage,
                agent_total: None,
            });
        }
        let finished = |agent: &str, usage: Usage| Event::AgentFinished {
            agent: agent.into(),
            status: Status::Ok,
            duration_ms: 1,
            usage,
        };
        let cost = |mut event: Event, rollup: &mut UsageRollup| {
            rollup.observe(&mut event);
            let Event::AgentFinished { usage, .. } = event else { unreachable!() };
            usage.cost_usd
        };
        assert_eq!(cost(finished("a[1]", Usage::tokens(5, 2)), &mut rollup), Some(Usd::from_picos(5)));
        // A figure the callee sent is replaced; other tokens than those seen get none.
        let claimed = Usage { cost_usd: Some(Usd::from_picos(99)), ..Usage::tokens(6, 2) };
        assert_eq!(cost(finished("a[1]", claimed), &mut rollup), None);
        assert_eq!(cost(finished("b[1]", Usage::default()), &mut rollup), None, "no model call");
        assert_eq!(turn_cost(&rollup.totals), Some(Usd::from_picos(5)));
        assert_eq!(turn_cost(&[]), None);
    }

    #[test]
    fn a_sum_with_an_unpriced_part_has_no_cost() {
        let priced = Usage { cost_usd: Some(Usd::from_picos(5)), ..Usage::tokens(1, 1) };
        let mut sum = Usage::default();
        sum.add(priced);
        sum.add(priced);
        assert_eq!(sum.cost_usd, Some(Usd::from_picos(10)));
        sum.add(Usage::tokens(1, 0));
        assert_eq!(sum.cost_usd, None, "never understated");
        sum.add(priced);
        assert_eq!(sum.cost_usd, None);
    }
}
