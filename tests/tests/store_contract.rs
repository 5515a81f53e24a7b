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

/// A DynamoDB query reads at most the pages its cap allows (`query_pages`, every read that may
/// span pages): within the cap it reads page after page until it has enough; a read that needs
/// more pages fails as `Failed`, naming the read and the cap, instead of reading on.
#[tokio::test]
async fn a_dynamodb_query_reads_every_page_up_to_its_cap_and_no_further() {
    use baton::store::{Conversations, EpisodeKey, StoreError, StoredMessage, new_turn_id};
    use baton_aws::DynamoDbStore;
    use baton_tests::stores::{Moto, StoreHarness, TEST_TABLE, dynamodb_client, test_clock};

    let clock = test_clock();
    let moto = Moto::start(clock.clone()).await;
    let store = |cap| {
        DynamoDbStore::new(dynamodb_client(moto.endpoint()), TEST_TABLE, clock.clone())
            .with_page_size(2)
            .with_query_page_cap(cap)
    };
    let key = EpisodeKey::new("u", "e").unwrap();
    for i in 0..6 {
        let message = StoredMessage::user(new_turn_id(), format!("m{i}"), 1);
        store(1).record_user_message(&key, &message, None).await.unwrap();
    }
    // Six messages, two a page: three pages.
    let all = store(3).recent_messages(&key, 6).await.unwrap();
    let texts: Vec<&str> = all.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(texts, ["m0", "m1", "m2", "m3", "m4", "m5"]);
    let err = store(2).recent_messages(&key, 6).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Failed(m) if m.contains("read history") && m.contains("more than 2 pages")),
        "{err}"
    );
    // A read that has enough within the cap stops there.
    assert_eq!(store(1).recent_messages(&key, 2).await.unwrap().len(), 2);
}
