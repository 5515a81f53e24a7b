//! "Events, then a result": the one item type of every stream that reports to the client as it
//! goes and ends with a value for whoever started it (a model step, a fork, a tool call, a
//! mini-agent), instead of a bespoke enum per stream or a side channel filled before the end.

use std::pin::Pin;

use futures::{Stream, StreamExt};

use crate::event::Event;

/// One item of work that reports as it goes and ends with a result: its events for the client
/// now, then its result as the last item.
#[derive(Debug, Clone, PartialEq)]
pub enum Item<T> {
    /// An event for the client now.
    Event(Event),
    /// The result: the last item.
    Done(T),
}

/// A boxed stream of [`Item`]s.
pub type ItemStream<T> = Pin<Box<dyn Stream<Item = Item<T>> + Send>>;

impl<T> Item<T> {
    /// The result of `items`, its events dropped; `None` when it ended without one.
    pub async fn result(items: impl Stream<Item = Item<T>>) -> Option<T> {
        let mut items = std::pin::pin!(items);
        let mut result = None;
        while let Some(item) = items.next().await {
            if let Item::Done(done) = item {
                result = Some(done);
            }
        }
        result
    }
}
