//! The store contract suite (`baton_tests::contract`), run against both stores.

mod embedded {
    baton_tests::store_contract_tests!(baton_tests::stores::Embedded);
}

mod dynamodb {
    baton_tests::store_contract_tests!(baton_tests::stores::Moto);
}

/// The table the DynamoDB tests use is the one `baton_aws::table::create_table` defines for
/// production: string keys `pk` (hash) and `sk` (range), on-demand billing, TTL on `ttl`.
#[tokio::test]
async fn the_dynamodb_test_table_has_the_production_shape() {
    use aws_sdk_dynamodb::types::{BillingMode, KeyType, ScalarAttributeType, TimeToLiveStatus};
    use baton_tests::stores::{Moto, StoreHarness, TEST_TABLE, dynamodb_client, test_clock};

    let moto = Moto::start(test_clock()).await;
    let client = dynamodb_client(moto.endpoint());
    let table = client.describe_table().table_name(TEST_TABLE).send().await.unwrap();
    let table = table.table().unwrap();
    let keys: Vec<(&str, &KeyType)> =
        table.key_schema().iter().map(|k| (k.attribute_name(), k.key_type())).collect();
    assert_eq!(keys, [("pk", &KeyType::Hash), ("sk", &KeyType::Range)]);
    assert!(table.attribute_definitions().iter().all(|a| a.attribute_type() == &ScalarAttributeType::S));
    assert_eq!(
        table.billing_mode_summary().and_then(|b| b.billing_mode()),
        Some(&BillingMode::PayPerRequest)
    );
    let ttl = client.describe_time_to_live().table_name(TEST_TABLE).send().await.unwrap();
    let ttl = ttl.time_to_live_description().unwrap();
    assert_eq!(ttl.time_to_live_status(), Some(&TimeToLiveStatus::Enabled));
    assert_eq!(ttl.attribute_name(), Some("ttl"));
}
