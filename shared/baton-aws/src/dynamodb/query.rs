//! One `Query`, page after page: the SDK's own paginator (`into_paginator`, which sends each
//! page's `LastEvaluatedKey` as the next `ExclusiveStartKey` and asks for the next page only when
//! the previous one has been taken), bounded by a page cap. Every store read that may span pages
//! goes through [`query_pages`].

use std::collections::HashMap;
use std::ops::ControlFlow;

use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;
use baton::store::StoreError;

use crate::error::sdk_error;

/// The most pages one query reads unless told otherwise
/// ([`DynamoDbStore::with_query_page_cap`](super::DynamoDbStore::with_query_page_cap)): with the
/// default page size of 100 items, 100,000 items, far past any episode's messages, a turn's
/// event items or a reply's messages.
pub(crate) const DEFAULT_QUERY_PAGE_CAP: usize = 1_000;

/// One item as DynamoDB returns it.
pub(super) type RawItem = HashMap<String, AttributeValue>;

/// Reads `query`'s pages in order, handing each page's items to `visit`, until `visit` breaks or
/// the last page has been read (a caller that stops early costs no further request). A query
/// that still has pages after `cap` of them fails as [`StoreError::Failed`] naming `what`
/// rather than read on without bound; an SDK failure maps as [`sdk_error`] says.
pub(super) async fn query_pages(
    query: QueryFluentBuilder,
    what: &str,
    cap: usize,
    mut visit: impl FnMut(&[RawItem]) -> Result<ControlFlow<()>, StoreError>,
) -> Result<(), StoreError> {
    let mut pages = query.into_paginator().send();
    let mut read = 0;
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| sdk_error(what, e))?;
        read += 1;
        if visit(page.items())?.is_break() {
            return Ok(());
        }
        if read >= cap && page.last_evaluated_key().is_some_and(|k| !k.is_empty()) {
            return Err(StoreError::Failed(format!("{what}: the query has more than {cap} pages")));
        }
    }
    Ok(())
}
