//! The store contract suite (`baton_tests::contract`), run against both stores.

mod embedded {
    baton_tests::store_contract_tests!(baton_tests::stores::Embedded);
}

mod dynamodb {
    baton_tests::store_contract_tests!(baton_tests::stores::Moto);
}
