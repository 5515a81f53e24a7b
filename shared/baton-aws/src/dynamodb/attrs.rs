//! Items between Baton's [`Attr`] form and DynamoDB's `AttributeValue`s, keys included: the one
//! place the store converts them, both ways.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use baton::store::StoreError;
use baton::store::item::{self, Attr, Item};

use crate::table::{PARTITION_KEY, SORT_KEY};

pub(super) fn key(pk: &str, sk: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (PARTITION_KEY.to_owned(), AttributeValue::S(pk.to_owned())),
        (SORT_KEY.to_owned(), AttributeValue::S(sk.to_owned())),
    ])
}

pub(super) fn to_attribute(attr: &Attr) -> AttributeValue {
    match attr {
        Attr::S(s) => AttributeValue::S(s.clone()),
        Attr::N(n) => AttributeValue::N(n.clone()),
        Attr::L(l) => AttributeValue::L(l.iter().map(to_attribute).collect()),
        Attr::M(m) => AttributeValue::M(m.iter().map(|(k, v)| (k.clone(), to_attribute(v))).collect()),
        Attr::Bool(b) => AttributeValue::Bool(*b),
        Attr::Null(b) => AttributeValue::Null(*b),
    }
}

fn from_attribute(value: &AttributeValue) -> Result<Attr, String> {
    Ok(match value {
        AttributeValue::S(s) => Attr::S(s.clone()),
        AttributeValue::N(n) => Attr::N(n.clone()),
        AttributeValue::L(l) => Attr::L(l.iter().map(from_attribute).collect::<Result<_, _>>()?),
        AttributeValue::M(m) => Attr::M(
            m.iter().map(|(k, v)| Ok((k.clone(), from_attribute(v)?))).collect::<Result<_, String>>()?,
        ),
        AttributeValue::Bool(b) => Attr::Bool(*b),
        AttributeValue::Null(b) => Attr::Null(*b),
        other => return Err(format!("an attribute of unsupported type {other:?}")),
    })
}

pub(super) fn to_dynamo(pk: &str, sk: &str, item: &Item) -> HashMap<String, AttributeValue> {
    let mut out = key(pk, sk);
    out.extend(item.iter().map(|(k, v)| (k.clone(), to_attribute(v))));
    out
}

pub(super) fn from_dynamo(
    pk: &str,
    sk: &str,
    raw: &HashMap<String, AttributeValue>,
) -> Result<Item, StoreError> {
    raw.iter()
        .filter(|(k, _)| *k != PARTITION_KEY && *k != SORT_KEY)
        .map(|(k, v)| {
            let attr = from_attribute(v).map_err(|reason| StoreError::Corrupt {
                key: item::item_name(pk, sk),
                reason: format!("`{k}` is {reason}"),
            })?;
            Ok((k.clone(), attr))
        })
        .collect()
}

pub(super) fn string_of(raw: &HashMap<String, AttributeValue>, attr: &str) -> Option<String> {
    raw.get(attr).and_then(|v| v.as_s().ok()).cloned()
}
