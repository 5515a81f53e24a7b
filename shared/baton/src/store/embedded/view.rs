//! One call's view of the embedded store: its own writes, over the pending ones, over the file's
//! last commit; and the items' bytes.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::{ITEMS, Layer, Pending, Value, failed};
use crate::store::item::{self, Item};
use crate::store::{StoreError, is_expired};

/// One call's view: its own writes, over the pending ones, over the file's last commit.
pub(super) struct View<'a> {
    table: redb::ReadOnlyTable<(&'static str, &'static str), &'static [u8]>,
    pending: &'a Layer,
    pub(super) staged: Layer,
}

impl<'a> View<'a> {
    pub(super) fn of(pending: &'a Pending) -> Result<View<'a>, StoreError> {
        let db = pending
            .db
            .as_deref()
            .ok_or_else(|| StoreError::Unavailable("the store file is closed".into()))?;
        let txn = db.begin_read().map_err(|e| failed("begin", e))?;
        let table = txn.open_table(ITEMS).map_err(|e| failed("open table", e))?;
        Ok(View { table, pending: &pending.writes, staged: Layer::new() })
    }

    /// The newest write of `pk` / `sk` not in the file yet, if any.
    pub(super) fn written(&self, pk: &str, sk: &str) -> Option<&Value> {
        [&self.staged, self.pending]
            .into_iter()
            .find_map(|layer| layer.get(pk).and_then(|p| p.get(sk)))
            .map(|(_, value)| value)
    }

    /// Reads the item at `pk` / `sk`, treating an expired one as absent.
    pub(super) fn get(&self, pk: &str, sk: &str, now_ms: u64) -> Result<Option<Item>, StoreError> {
        let item = match self.written(pk, sk) {
            Some(None) => return Ok(None),
            Some(Some(bytes)) => parse(pk, sk, bytes)?,
            None => {
                let Some(value) = self.table.get((pk, sk)).map_err(|e| failed("read", e))? else {
                    return Ok(None);
                };
                parse(pk, sk, value.value())?
            }
        };
        match item::ttl_of(pk, sk, &item)? {
            Some(ttl) if is_expired(ttl, now_ms) => Ok(None),
            _ => Ok(Some(item)),
        }
    }

    /// Calls `f` with each item of `pk` whose sort key is in `from..to`, newest sort key first,
    /// until it returns `false`.
    pub(super) fn each_rev(
        &self,
        pk: &str,
        from: &str,
        to: &str,
        f: impl FnMut(&str, &[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        self.walk(pk, from, to, true, f)
    }

    /// Calls `f` with each item of `pk` whose sort key is in `from..to`, oldest sort key first,
    /// until it returns `false`.
    pub(super) fn each(
        &self,
        pk: &str,
        from: &str,
        to: &str,
        f: impl FnMut(&str, &[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        self.walk(pk, from, to, false, f)
    }

    /// The items of `pk` in `from..to`, in sort-key order (`rev`: the reverse), the writes not
    /// in the file merged over the file's.
    fn walk(
        &self,
        pk: &str,
        from: &str,
        to: &str,
        rev: bool,
        mut f: impl FnMut(&str, &[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        // The writes not in the file (this call's own over the pending ones).
        let mut written: BTreeMap<&str, &Value> = BTreeMap::new();
        for layer in [self.pending, &self.staged] {
            if let Some(partition) = layer.get(pk) {
                for (sk, (_, value)) in
                    partition.range::<str, _>((Bound::Included(from), Bound::Excluded(to)))
                {
                    written.insert(sk, value);
                }
            }
        }
        let written: Box<dyn Iterator<Item = (&str, &Value)>> =
            if rev { Box::new(written.into_iter().rev()) } else { Box::new(written.into_iter()) };
        let mut written = written.peekable();
        let range = self.table.range((pk, from)..(pk, to)).map_err(|e| failed("read", e))?;
        let mut file: Box<dyn Iterator<Item = _>> = if rev { Box::new(range.rev()) } else { Box::new(range) };
        let mut next_file = file.next().transpose().map_err(|e| failed("read", e))?;
        loop {
            let file_sk = next_file.as_ref().map(|(k, _)| k.value().1);
            let take_written = match (written.peek(), file_sk) {
                (None, None) => return Ok(()),
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((w, _)), Some(f)) => {
                    if rev {
                        *w >= f
                    } else {
                        *w <= f
                    }
                }
            };
            let go_on = if take_written {
                let (sk, value) = written.next().expect("peeked");
                if file_sk == Some(sk) {
                    next_file = file.next().transpose().map_err(|e| failed("read", e))?;
                }
                match value {
                    Some(bytes) => f(sk, bytes)?,
                    None => true,
                }
            } else {
                let (k, v) = next_file.take().expect("compared");
                let go_on = f(k.value().1, v.value())?;
                next_file = file.next().transpose().map_err(|e| failed("read", e))?;
                go_on
            };
            if !go_on {
                return Ok(());
            }
        }
    }

    fn stage(&mut self, pk: &str, sk: &str, value: Value) {
        self.staged.entry(pk.to_owned()).or_default().insert(sk.to_owned(), (0, value));
    }

    pub(super) fn put(&mut self, pk: &str, sk: &str, item: &Item) {
        self.stage(pk, sk, Some(to_bytes(item).into()));
    }

    pub(super) fn remove(&mut self, pk: &str, sk: &str) {
        self.stage(pk, sk, None);
    }
}

pub(super) fn to_bytes(item: &Item) -> Vec<u8> {
    serde_json::to_vec(item).expect("attribute maps serialize")
}

pub(super) fn parse(pk: &str, sk: &str, bytes: &[u8]) -> Result<Item, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
        key: item::item_name(pk, sk),
        reason: format!("not an attribute map: {e}"),
    })
}
