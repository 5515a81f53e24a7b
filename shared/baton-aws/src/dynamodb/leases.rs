//! Leases on DynamoDB: a take is one put conditional on the lease being free, expired or the
//! caller's; a release is one delete conditional on the caller still holding it.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use baton::store::item;
use baton::store::{EpisodeKey, LeaseGrant, Leases, StoreError, lease_expiry, lease_sk};

use super::{DynamoDbStore, key, to_dynamo};
use crate::error::sdk_error;

#[async_trait::async_trait]
impl Leases for DynamoDbStore {
    async fn take_lease(
        &self,
        key: &EpisodeKey,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<LeaseGrant, StoreError> {
        let now = self.clock.now_ms();
        let expires_at = lease_expiry(now, ttl);
        let (pk, sk) = (key.pk(), lease_sk(name));
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_dynamo(&pk, &sk, &item::encode_lease(holder, expires_at))))
            .condition_expression("attribute_not_exists(pk) OR #holder = :holder OR #expires_at <= :now")
            .expression_attribute_names("#holder", "holder")
            .expression_attribute_names("#expires_at", "expires_at")
            .expression_attribute_values(":holder", AttributeValue::S(holder.to_owned()))
            .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
            .send()
            .await;
        match put {
            Ok(_) => Ok(LeaseGrant::Granted),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => {
                // Held by another: until when? Released in between, it is free now.
                let held =
                    self.get(&pk, &sk, now).await?.map(|i| item::decode_lease(&pk, &sk, &i)).transpose()?;
                let (holder, until) = held.unwrap_or((String::new(), now));
                Ok(LeaseGrant::Held { holder, until })
            }
            Err(e) => Err(sdk_error("take lease", e)),
        }
    }

    async fn release_lease(&self, key: &EpisodeKey, name: &str, holder: &str) -> Result<(), StoreError> {
        let deleted = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(self::key(&key.pk(), &lease_sk(name))))
            .condition_expression("#holder = :holder")
            .expression_attribute_names("#holder", "holder")
            .expression_attribute_values(":holder", AttributeValue::S(holder.to_owned()))
            .send()
            .await;
        match deleted {
            Ok(_) => Ok(()),
            // Expired and taken by another holder, or gone: nothing of ours to release.
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => {
                Ok(())
            }
            Err(e) => Err(sdk_error("release lease", e)),
        }
    }
}
