//! CreateBucket through the store's own SigV4 signer, on both S3 servers.

#![allow(clippy::unwrap_used)] // tests fail loudly on any error

use bucketload_store::object_store::ObjectStoreExt;
use bucketload_store::object_store::path::Path;
use bucketload_store::{Store, StoreConfig};
use bucketload_test_support::{EmbeddedServer, MotoServer, unique_bucket};

async fn create_use_and_recreate(config: StoreConfig) {
    let uri = format!("s3://{}/p", unique_bucket());
    let store = Store::open(&uri, &config).unwrap();
    store.create_bucket().await.unwrap();
    store
        .object_store()
        .put(&Path::from("k"), "v".into())
        .await
        .unwrap();
    let got = store.object_store().get(&Path::from("k")).await.unwrap();
    assert_eq!(got.bytes().await.unwrap(), "v");
    store.create_bucket().await.unwrap();
}

#[tokio::test]
async fn embedded_us_east_1() {
    let server = EmbeddedServer::start().await;
    create_use_and_recreate(server.store_config()).await;
    assert_eq!(server.counters().get("CreateBucket"), 2);
}

#[tokio::test]
async fn embedded_other_region() {
    let server = EmbeddedServer::start().await;
    create_use_and_recreate(server.store_config().with_region("eu-west-1")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_us_east_1() {
    let moto = MotoServer::start();
    create_use_and_recreate(moto.store_config()).await;
}

/// moto rejects a CreateBucket outside us-east-1 without a LocationConstraint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_other_region_sends_location_constraint() {
    let moto = MotoServer::start();
    create_use_and_recreate(moto.store_config().with_region("eu-west-1")).await;
}

/// CreateBucket is retried like every other request: through server errors, and through a
/// reset that lost the answer of a creation that took effect (the retry finds the bucket ours).
#[tokio::test]
async fn create_bucket_is_retried_through_errors_and_lost_answers() {
    use bucketload_server::FaultKind;
    let server = EmbeddedServer::start().await;
    for (n, fault) in [(2, FaultKind::Status(500)), (1, FaultKind::ResetMidBody)] {
        let store = Store::open(
            &format!("s3://{}/p", unique_bucket()),
            &server.store_config(),
        )
        .unwrap();
        let before = server.counters().get("CreateBucket");
        server.faults().fail_next("CreateBucket", n, fault);
        store.create_bucket().await.unwrap();
        assert_eq!(server.counters().get("CreateBucket") - before, n as u64 + 1);
        store
            .object_store()
            .put(&Path::from("k"), "v".into())
            .await
            .unwrap();
    }
}
