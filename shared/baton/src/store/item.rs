//! Items as attribute maps, the form both stores keep, and their strict decoding.
//!
//! [`Attr`] mirrors DynamoDB's attribute values (and serializes as DynamoDB JSON, `{"S": "x"}`),
//! so the embedded store keeps exactly the items the DynamoDB store does, and one decoder checks
//! both. Decoding never panics: an item of unknown shape is a [`StoreError::Corrupt`] naming its
//! key and what is wrong.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Episode, EpisodeKey, MSG_PREFIX, Role, StoreError, StoredMessage, VendorConversation};
use crate::event::{AgentUsage, Status, Usage, Usd};

/// One attribute value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Attr {
    /// A string.
    S(String),
    /// A number, as its decimal text.
    N(String),
    /// A list.
    L(Vec<Attr>),
    /// A map.
    M(BTreeMap<String, Attr>),
    /// A boolean.
    #[serde(rename = "BOOL")]
    Bool(bool),
    /// Null.
    #[serde(rename = "NULL")]
    Null(bool),
}

impl Attr {
    /// A string attribute.
    pub fn s(s: impl Into<String>) -> Attr {
        Attr::S(s.into())
    }

    /// A number attribute.
    pub fn n(n: u64) -> Attr {
        Attr::N(n.to_string())
    }

    fn kind(&self) -> &'static str {
        match self {
            Attr::S(_) => "string",
            Attr::N(_) => "number",
            Attr::L(_) => "list",
            Attr::M(_) => "map",
            Attr::Bool(_) => "boolean",
            Attr::Null(_) => "null",
        }
    }
}

/// An item's attributes (without `pk` and `sk`).
pub type Item = BTreeMap<String, Attr>;

/// `pk / sk`, how errors name an item.
pub fn item_name(pk: &str, sk: &str) -> String {
    format!("{pk} / {sk}")
}

/// Strict reads of one item's attributes, with errors that name the item.
pub(super) struct Reader<'a> {
    name: String,
    item: &'a Item,
}

impl<'a> Reader<'a> {
    /// Reads `item`, named `name` (`pk / sk`) in errors.
    pub(super) fn new(name: String, item: &'a Item) -> Reader<'a> {
        Reader { name, item }
    }

    /// The item's name in errors.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn corrupt(&self, reason: impl Into<String>) -> StoreError {
        StoreError::Corrupt { key: self.name.clone(), reason: reason.into() }
    }

    fn opt_s(&self, attr: &str) -> Result<Option<&'a str>, StoreError> {
        match self.item.get(attr) {
            None | Some(Attr::Null(_)) => Ok(None),
            Some(Attr::S(s)) => Ok(Some(s)),
            Some(other) => Err(self.corrupt(format!("`{attr}` is a {}, expected a string", other.kind()))),
        }
    }

    pub(super) fn s(&self, attr: &str) -> Result<&'a str, StoreError> {
        self.opt_s(attr)?.ok_or_else(|| self.corrupt(format!("`{attr}` is missing")))
    }

    fn opt_n(&self, attr: &str) -> Result<Option<u64>, StoreError> {
        match self.item.get(attr) {
            None | Some(Attr::Null(_)) => Ok(None),
            Some(Attr::N(n)) => parse_n(n).map(Some).ok_or_else(|| {
                self.corrupt(format!("`{attr}` is {n:?}, expected a non-negative whole number"))
            }),
            Some(other) => Err(self.corrupt(format!("`{attr}` is a {}, expected a number", other.kind()))),
        }
    }

    pub(super) fn n(&self, attr: &str) -> Result<u64, StoreError> {
        self.opt_n(attr)?.ok_or_else(|| self.corrupt(format!("`{attr}` is missing")))
    }

    /// A JSON object kept as text (absent for items written before it existed).
    fn opt_json(&self, attr: &str) -> Result<Option<serde_json::Map<String, serde_json::Value>>, StoreError> {
        match self.opt_s(attr)? {
            None => Ok(None),
            Some(text) => match serde_json::from_str(text) {
                Ok(serde_json::Value::Object(map)) => Ok(Some(map)),
                _ => Err(self.corrupt(format!("`{attr}` is not the text of a JSON object"))),
            },
        }
    }

    /// `response_ids` (agent name → id), with a legacy item's `<agent>_response_id` under its
    /// agent; an id in `response_ids` wins over the legacy one.
    fn response_ids(&self) -> Result<BTreeMap<String, String>, StoreError> {
        let mut ids = BTreeMap::new();
        for agent in self.legacy_prefixes(LEGACY_RESPONSE_ID) {
            if let Some(id) = self.opt_s(&format!("{agent}{LEGACY_RESPONSE_ID}"))? {
                ids.insert(agent.to_owned(), id.to_owned());
            }
        }
        match self.item.get("response_ids") {
            None | Some(Attr::Null(_)) => {}
            Some(Attr::M(map)) => {
                for (agent, id) in map {
                    let Attr::S(id) = id else {
                        return Err(self.corrupt(format!(
                            "`response_ids.{agent}` is a {}, expected a string",
                            id.kind()
                        )));
                    };
                    ids.insert(agent.clone(), id.clone());
                }
            }
            Some(other) => {
                return Err(self.corrupt(format!("`response_ids` is a {}, expected a map", other.kind())));
            }
        }
        Ok(ids)
    }

    /// The `<prefix>` of every top-level attribute named `<prefix><suffix>`.
    fn legacy_prefixes<'s>(&'s self, suffix: &'s str) -> impl Iterator<Item = &'s str> + 's {
        self.item.keys().filter_map(move |name| name.strip_suffix(suffix).filter(|p| !p.is_empty()))
    }

    /// `conversations` (key → its vendor conversation), with a legacy item's conversation
    /// (`<prefix>_conversation_id`, `_last_used_at`, `_pending`) under its prefix; a conversation
    /// in `conversations` wins over the legacy one.
    fn conversations(&self) -> Result<BTreeMap<String, VendorConversation>, StoreError> {
        let mut conversations = BTreeMap::new();
        let prefixes: Vec<&str> = self
            .legacy_prefixes(LEGACY_CONVERSATION_ID)
            .chain(self.legacy_prefixes(LEGACY_CONVERSATION_USED_AT))
            .collect();
        for prefix in prefixes {
            let (id_attr, at_attr) = (
                format!("{prefix}{LEGACY_CONVERSATION_ID}"),
                format!("{prefix}{LEGACY_CONVERSATION_USED_AT}"),
            );
            match (self.opt_s(&id_attr)?, self.opt_n(&at_attr)?) {
                (Some(id), Some(at)) => {
                    let pending = self
                        .opt_json(&format!("{prefix}{LEGACY_CONVERSATION_PENDING}"))?
                        .map(serde_json::Value::Object);
                    let conversation =
                        VendorConversation { conversation_id: id.to_owned(), last_used_at: at, pending };
                    conversations.insert(prefix.to_owned(), conversation);
                }
                _ => return Err(self.corrupt(format!("`{id_attr}` and `{at_attr}` must be set together"))),
            }
        }
        match self.item.get("conversations") {
            None | Some(Attr::Null(_)) => {}
            Some(Attr::M(map)) => {
                for (agent, conversation) in map {
                    let Attr::M(fields) = conversation else {
                        return Err(self.corrupt(format!(
                            "`conversations.{agent}` is a {}, expected a map",
                            conversation.kind()
                        )));
                    };
                    let r = Reader { name: self.name.clone(), item: fields };
                    let read = || -> Result<VendorConversation, StoreError> {
                        Ok(VendorConversation {
                            conversation_id: r.s("conversation_id")?.to_owned(),
                            last_used_at: r.n("last_used_at")?,
                            pending: r.opt_json("pending")?.map(serde_json::Value::Object),
                        })
                    };
                    let conversation = read().map_err(|e| match e {
                        StoreError::Corrupt { key, reason } => StoreError::Corrupt {
                            key,
                            reason: format!("in `conversations.{agent}`: {reason}"),
                        },
                        other => other,
                    })?;
                    conversations.insert(agent.clone(), conversation);
                }
            }
            Some(other) => {
                return Err(self.corrupt(format!("`conversations` is a {}, expected a map", other.kind())));
            }
        }
        Ok(conversations)
    }

    fn opt_usd(&self, attr: &str) -> Result<Option<Usd>, StoreError> {
        match self.item.get(attr) {
            None | Some(Attr::Null(_)) => Ok(None),
            Some(Attr::N(n)) => plain_decimal(n).and_then(|d| d.parse().ok()).map(Some).ok_or_else(|| {
                self.corrupt(format!("`{attr}` is {n:?}, expected a non-negative amount of dollars"))
            }),
            Some(other) => Err(self.corrupt(format!("`{attr}` is a {}, expected a number", other.kind()))),
        }
    }
}

/// A number as plain decimal text: DynamoDB may give back `1.2E-6` for the `0.0000012` it was
/// sent.
fn plain_decimal(n: &str) -> Option<String> {
    let n = n.trim();
    let (mantissa, exp) = match n.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().ok()?),
        None => return Some(n.to_owned()),
    };
    let (whole, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{whole}{frac}");
    // Where the point goes, counted from the left of `digits`.
    let point = whole.len() as i32 + exp;
    if !(-40..=40).contains(&point) {
        return None;
    }
    Some(if point <= 0 {
        format!("0.{}{digits}", "0".repeat((-point) as usize))
    } else if point as usize >= digits.len() {
        format!("{digits}{}", "0".repeat(point as usize - digits.len()))
    } else {
        format!("{}.{}", &digits[..point as usize], &digits[point as usize..])
    })
}

/// Every number this code writes is a non-negative whole number; anything else is corruption.
fn parse_n(n: &str) -> Option<u64> {
    n.trim().parse().ok()
}

/// The expiry of an item (`ttl`, seconds), if it has one; an unreadable `ttl` is corruption.
pub fn ttl_of(pk: &str, sk: &str, item: &Item) -> Result<Option<u64>, StoreError> {
    Reader { name: item_name(pk, sk), item }.opt_n("ttl")
}

/// The episode item of `episode`, expiring at `ttl`.
pub fn encode_episode(episode: &Episode, ttl: u64) -> Item {
    let mut item = Item::new();
    item.insert("created_at".into(), Attr::n(episode.created_at));
    item.insert("updated_at".into(), Attr::n(episode.updated_at));
    item.insert("version".into(), Attr::n(episode.version));
    if !episode.conversations.is_empty() {
        let conversations = episode
            .conversations
            .iter()
            .map(|(agent, c)| {
                let mut fields = BTreeMap::from([
                    ("conversation_id".to_owned(), Attr::s(&c.conversation_id)),
                    ("last_used_at".to_owned(), Attr::n(c.last_used_at)),
                ]);
                if let Some(pending) = &c.pending {
                    fields.insert("pending".to_owned(), Attr::s(pending.to_string()));
                }
                (agent.clone(), Attr::M(fields))
            })
            .collect();
        item.insert("conversations".into(), Attr::M(conversations));
    }
    if !episode.response_ids.is_empty() {
        let ids = episode.response_ids.iter().map(|(agent, id)| (agent.clone(), Attr::s(id))).collect();
        item.insert("response_ids".into(), Attr::M(ids));
    }
    item.insert("ttl".into(), Attr::n(ttl));
    item
}

/// Decodes the episode item of `key`.
pub fn decode_episode(key: &EpisodeKey, item: &Item) -> Result<Episode, StoreError> {
    let r = Reader { name: item_name(&key.pk(), super::META_SK), item };
    Ok(Episode {
        key: key.clone(),
        created_at: r.n("created_at")?,
        updated_at: r.n("updated_at")?,
        version: r.n("version")?,
        conversations: r.conversations()?,
        response_ids: r.response_ids()?,
    })
}

/// Items written before response ids were kept per agent hold them as top-level attributes
/// `<agent>_response_id`: each reads as that agent's.
const LEGACY_RESPONSE_ID: &str = "_response_id";

/// Items written before vendor conversations were kept per agent hold one as top-level
/// attributes `<prefix>_conversation_id`, `<prefix>_last_used_at` and `<prefix>_pending`: it reads
/// as `conversations[<prefix>]` (the prefix names the vendor, not an agent; the extension that
/// talks to that vendor knows whose it was).
const LEGACY_CONVERSATION_ID: &str = "_conversation_id";
const LEGACY_CONVERSATION_USED_AT: &str = "_last_used_at";
const LEGACY_CONVERSATION_PENDING: &str = "_pending";

/// The item of `message`, expiring at `ttl`.
pub fn encode_message(message: &StoredMessage, ttl: u64) -> Item {
    let usage = message
        .usage
        .iter()
        .map(|u| {
            let mut entry = BTreeMap::from([
                ("agent".to_owned(), Attr::s(&u.agent)),
                ("model".to_owned(), Attr::s(&u.model)),
                ("input_tokens".to_owned(), Attr::n(u.usage.input_tokens)),
                ("output_tokens".to_owned(), Attr::n(u.usage.output_tokens)),
            ]);
            if u.usage.cached_input_tokens > 0 {
                entry.insert("cached_input_tokens".to_owned(), Attr::n(u.usage.cached_input_tokens));
            }
            if u.usage.reasoning_tokens > 0 {
                entry.insert("reasoning_tokens".to_owned(), Attr::n(u.usage.reasoning_tokens));
            }
            // A DynamoDB number is a decimal of up to 38 digits: the exact amount, no float.
            if let Some(cost) = u.usage.cost_usd {
                entry.insert("cost_usd".to_owned(), Attr::N(cost.to_string()));
            }
            Attr::M(entry)
        })
        .collect();
    let mut item = Item::new();
    item.insert("role".into(), Attr::s(message.role.as_str()));
    item.insert("agent".into(), Attr::s(&message.agent));
    item.insert("content".into(), Attr::s(&message.content));
    item.insert("usage".into(), Attr::L(usage));
    item.insert("status".into(), Attr::s(message.status.as_str()));
    item.insert("created_at".into(), Attr::n(message.created_at));
    if let Some(meta) = &message.meta {
        item.insert("meta".into(), Attr::s(serde_json::Value::Object(meta.clone()).to_string()));
    }
    item.insert("ttl".into(), Attr::n(ttl));
    item
}

/// The turn id and seq a message sort key names.
pub fn parse_message_sk(sk: &str) -> Option<(&str, u32)> {
    let rest = sk.strip_prefix(MSG_PREFIX)?;
    let (turn, seq) = rest.rsplit_once('#')?;
    if turn.is_empty() || turn.contains('#') {
        return None;
    }
    Some((turn, seq.parse().ok()?))
}

/// Decodes the message item at `pk` / `sk`.
pub fn decode_message(pk: &str, sk: &str, item: &Item) -> Result<StoredMessage, StoreError> {
    let r = Reader { name: item_name(pk, sk), item };
    let (turn_id, seq) =
        parse_message_sk(sk).ok_or_else(|| r.corrupt("the sort key is not `MSG#<turn>#<seq>`"))?;
    let role = match r.s("role")? {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        other => return Err(r.corrupt(format!("`role` is {other:?}, expected \"user\" or \"assistant\""))),
    };
    let status = r.s("status")?;
    let status = Status::from_name(status).ok_or_else(|| {
        r.corrupt(format!("`status` is {status:?}, expected \"ok\", \"partial\", \"error\" or \"cancelled\""))
    })?;
    let usage = match item.get("usage") {
        None => Vec::new(),
        Some(Attr::L(list)) => list
            .iter()
            .map(|entry| match entry {
                Attr::M(m) => {
                    let u = Reader { name: r.name.clone(), item: m };
                    Ok(AgentUsage {
                        agent: u.s("agent")?.to_owned(),
                        model: u.s("model")?.to_owned(),
                        usage: Usage {
                            input_tokens: u.n("input_tokens")?,
                            output_tokens: u.n("output_tokens")?,
                            cached_input_tokens: u.opt_n("cached_input_tokens")?.unwrap_or(0),
                            reasoning_tokens: u.opt_n("reasoning_tokens")?.unwrap_or(0),
                            cost_usd: u.opt_usd("cost_usd")?,
                        },
                    })
                }
                other => Err(r.corrupt(format!("a `usage` entry is a {}, expected a map", other.kind()))),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(r.corrupt(format!("`usage` is a {}, expected a list", other.kind()))),
    };
    Ok(StoredMessage {
        turn_id: turn_id.to_owned(),
        seq,
        role,
        agent: r.s("agent")?.to_owned(),
        content: r.s("content")?.to_owned(),
        usage,
        status,
        created_at: r.n("created_at")?,
        meta: r.opt_json("meta")?,
    })
}

/// The request-id marker item: which turn the request was recorded as.
pub fn encode_request(turn_id: &str, ttl: u64) -> Item {
    Item::from([("turn_id".to_owned(), Attr::s(turn_id)), ("ttl".to_owned(), Attr::n(ttl))])
}

/// Decodes a request-id marker item into its turn id.
pub fn decode_request(pk: &str, sk: &str, item: &Item) -> Result<String, StoreError> {
    Ok(Reader { name: item_name(pk, sk), item }.s("turn_id")?.to_owned())
}

/// The approvals record item: its JSON body, version and `ttl` (Unix seconds).
pub fn encode_approvals(body: &str, version: u64, ttl: u64) -> Item {
    Item::from([
        ("body".to_owned(), Attr::s(body)),
        ("version".to_owned(), Attr::n(version)),
        ("ttl".to_owned(), Attr::n(ttl)),
    ])
}

/// Decodes an approvals record item into its version and body.
pub fn decode_approvals(pk: &str, sk: &str, item: &Item) -> Result<(u64, String), StoreError> {
    let r = Reader { name: item_name(pk, sk), item };
    Ok((r.n("version")?, r.s("body")?.to_owned()))
}

/// The lease item: who holds it and until when (ms). Its `ttl` is an hour past the expiry, so
/// DynamoDB deletes forgotten leases without ever deleting one a reader could still find held.
pub fn encode_lease(holder: &str, expires_at: u64) -> Item {
    Item::from([
        ("holder".to_owned(), Attr::s(holder)),
        ("expires_at".to_owned(), Attr::n(expires_at)),
        ("ttl".to_owned(), Attr::n((expires_at / 1000).saturating_add(3600))),
    ])
}

/// Decodes a lease item into its holder and expiry (ms).
pub fn decode_lease(pk: &str, sk: &str, item: &Item) -> Result<(String, u64), StoreError> {
    let r = Reader { name: item_name(pk, sk), item };
    Ok((r.s("holder")?.to_owned(), r.n("expires_at")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> StoredMessage {
        StoredMessage {
            turn_id: "0190-a".into(),
            seq: 2,
            role: Role::Assistant,
            agent: "shopping[1]".into(),
            content: "deals".into(),
            usage: vec![AgentUsage {
                agent: "shopping[1]".into(),
                model: "m".into(),
                usage: Usage {
                    input_tokens: 3,
                    output_tokens: 4,
                    cached_input_tokens: 2,
                    reasoning_tokens: 1,
                    cost_usd: Some("0.0000012".parse().unwrap()),
                },
            }],
            status: Status::Partial,
            created_at: 1234,
            meta: Some(
                serde_json::json!({"is_solved": true, "choices": {"prompt": "p"}})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        }
    }

    #[test]
    fn a_cost_written_back_in_exponent_form_reads_the_same() {
        assert_eq!(plain_decimal("1.2E-6").as_deref(), Some("0.0000012"));
        assert_eq!(plain_decimal("12e2").as_deref(), Some("1200"));
        assert_eq!(plain_decimal("1.25E1").as_deref(), Some("12.5"));
        assert_eq!(plain_decimal("0.5").as_deref(), Some("0.5"));
        let mut item = encode_message(&message(), 99);
        let Some(Attr::L(usage)) = item.get_mut("usage") else { panic!() };
        let Attr::M(entry) = &mut usage[0] else { panic!() };
        assert_eq!(entry["cost_usd"], Attr::N("0.0000012".into()));
        entry.insert("cost_usd".into(), Attr::N("1.2E-6".into()));
        assert_eq!(decode_message("P", &message().sk(), &item).unwrap(), message());
    }

    #[test]
    fn a_message_round_trips() {
        let m = message();
        let item = encode_message(&m, 99);
        assert_eq!(decode_message("P", &m.sk(), &item).unwrap(), m);
    }

    #[test]
    fn meta_is_json_text_absent_in_old_items_and_corrupt_when_unreadable() {
        let item = encode_message(&message(), 99);
        assert_eq!(item["meta"], Attr::s(r#"{"is_solved":true,"choices":{"prompt":"p"}}"#));
        let mut old = item.clone();
        old.remove("meta");
        assert_eq!(decode_message("P", &message().sk(), &old).unwrap().meta, None);
        old.insert("meta".into(), Attr::s("[1]"));
        let err = decode_message("P", &message().sk(), &old).unwrap_err();
        assert!(err.to_string().contains("`meta`"), "{err}");
        let key = EpisodeKey::new("u", "e").unwrap();
        let mut episode = Episode::new(key.clone());
        let conversation = VendorConversation {
            conversation_id: "c".into(),
            last_used_at: 5,
            pending: Some(serde_json::json!({"text": "pick"})),
        };
        episode.conversations.insert("helpdesk".into(), conversation);
        let item = encode_episode(&episode, 1);
        let Attr::M(conversations) = &item["conversations"] else { panic!("a map: {item:?}") };
        let Attr::M(fields) = &conversations["helpdesk"] else { panic!("a map: {conversations:?}") };
        assert_eq!(fields["pending"], Attr::s(r#"{"text":"pick"}"#));
        assert_eq!(decode_episode(&key, &item).unwrap(), episode);
    }

    #[test]
    fn items_serialize_as_dynamodb_json() {
        let item = encode_request("t1", 5);
        assert_eq!(serde_json::to_string(&item).unwrap(), r#"{"ttl":{"N":"5"},"turn_id":{"S":"t1"}}"#);
    }

    #[test]
    fn unknown_shapes_are_errors_that_name_the_key() {
        let sk = message().sk();
        let mut item = encode_message(&message(), 99);
        item.insert("role".into(), Attr::s("wizard"));
        let err = decode_message("USER#u#EP#e", &sk, &item).unwrap_err();
        assert_eq!(
            err,
            StoreError::Corrupt {
                key: "USER#u#EP#e / MSG#0190-a#0002".into(),
                reason: "`role` is \"wizard\", expected \"user\" or \"assistant\"".into()
            }
        );
        item.insert("role".into(), Attr::n(1));
        assert!(decode_message("P", &sk, &item).unwrap_err().to_string().contains("`role` is a number"));
        item.remove("role");
        assert!(decode_message("P", &sk, &item).unwrap_err().to_string().contains("`role` is missing"));
        let err = decode_message("P", "MSG#nope", &encode_message(&message(), 1)).unwrap_err();
        assert!(err.to_string().contains("P / MSG#nope"), "{err}");
    }

    #[test]
    fn a_conversation_of_unknown_shape_is_corrupt_naming_its_agent() {
        let key = EpisodeKey::new("u", "e").unwrap();
        let mut item = encode_episode(&Episode::new(key.clone()), 1);
        let fields = BTreeMap::from([("conversation_id".to_owned(), Attr::s("c"))]);
        item.insert(
            "conversations".into(),
            Attr::M(BTreeMap::from([("helpdesk".to_owned(), Attr::M(fields))])),
        );
        let err = decode_episode(&key, &item).unwrap_err();
        assert_eq!(
            err,
            StoreError::Corrupt {
                key: "USER#u#EP#e / META".into(),
                reason: "in `conversations.helpdesk`: `last_used_at` is missing".into()
            }
        );
        item.insert("conversations".into(), Attr::s("c"));
        assert!(decode_episode(&key, &item).unwrap_err().to_string().contains("`conversations` is a string"));
        item.remove("conversations");
        item.insert("ft_conversation_id".into(), Attr::s("c"));
        let err = decode_episode(&key, &item).unwrap_err();
        assert!(err.to_string().contains("must be set together"), "{err}");
    }

    #[test]
    fn a_bad_episode_version_is_corrupt() {
        let key = EpisodeKey::new("u", "e").unwrap();
        let mut item = encode_episode(&Episode::new(key.clone()), 1);
        item.insert("version".into(), Attr::N("-3".into()));
        let err = decode_episode(&key, &item).unwrap_err();
        assert!(
            err.to_string().contains("USER#u#EP#e / META") && err.to_string().contains("`version`"),
            "{err}"
        );
    }
}
