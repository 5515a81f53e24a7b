//! The conversation table: one table, string keys `pk` (partition) and `sk` (sort), on-demand
//! billing, TTL on the `ttl` attribute (docs/storage.md, "DynamoDB (production)").
//!
//! This module is the single source of the table's shape in code: [`create_table`] builds it
//! from these constants, and the contract tests create their tables with it. The SAM template
//! (`template.yaml`, the deployment work item) must declare the same:
//!
//! ```yaml
//! ConversationTable:
//!   Type: AWS::DynamoDB::Table
//!   Properties:
//!     BillingMode: PAY_PER_REQUEST
//!     AttributeDefinitions:
//!       - { AttributeName: pk, AttributeType: S }
//!       - { AttributeName: sk, AttributeType: S }
//!     KeySchema:
//!       - { AttributeName: pk, KeyType: HASH }
//!       - { AttributeName: sk, KeyType: RANGE }
//!     TimeToLiveSpecification: { AttributeName: ttl, Enabled: true }
//! ```

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType, TimeToLiveSpecification,
};
use baton::store::StoreError;

use crate::error::sdk_error;

/// The partition key attribute (a string).
pub(crate) const PARTITION_KEY: &str = "pk";
/// The sort key attribute (a string).
pub(crate) const SORT_KEY: &str = "sk";
/// The TTL attribute (a number: seconds since the Unix epoch).
pub(crate) const TTL_ATTRIBUTE: &str = "ttl";

fn build_error(e: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::Failed(format!("invalid table definition: {e}"))
}

/// Creates the conversation table `name` and turns TTL on.
pub async fn create_table(client: &Client, name: &str) -> Result<(), StoreError> {
    let key = |attr: &str, kind| KeySchemaElement::builder().attribute_name(attr).key_type(kind).build();
    let string = |attr: &str| {
        AttributeDefinition::builder().attribute_name(attr).attribute_type(ScalarAttributeType::S).build()
    };
    client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(string(PARTITION_KEY).map_err(build_error)?)
        .attribute_definitions(string(SORT_KEY).map_err(build_error)?)
        .key_schema(key(PARTITION_KEY, KeyType::Hash).map_err(build_error)?)
        .key_schema(key(SORT_KEY, KeyType::Range).map_err(build_error)?)
        .send()
        .await
        .map_err(|e| sdk_error("create table", e))?;
    client
        .update_time_to_live()
        .table_name(name)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .attribute_name(TTL_ATTRIBUTE)
                .enabled(true)
                .build()
                .map_err(build_error)?,
        )
        .send()
        .await
        .map_err(|e| sdk_error("enable TTL", e))?;
    Ok(())
}
