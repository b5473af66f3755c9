//! CreateBucket through the store's own SigV4 signer, on the embedded server, moto and
//! SeaweedFS.

#![allow(clippy::unwrap_used)] // tests fail loudly on any error

use bucketload_server::FaultKind;
use bucketload_store::object_store::ObjectStoreExt;
use bucketload_store::object_store::path::Path;
use bucketload_store::{Error, Store, StoreConfig};
use bucketload_test_support::{
    EmbeddedServer, MotoServer, SEAWEED_COLLEAGUE, SEAWEED_WRITER, SeaweedServer, unique_bucket,
};

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
    // The second call finds the bucket with HeadBucket and sends no CreateBucket.
    let counters = server.counters();
    assert_eq!(counters.get("HeadBucket"), 2);
    assert_eq!(counters.get("CreateBucket"), 1);
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

/// What several servers (SeaweedFS for a bucket another identity created, MinIO and Ceph in
/// some set-ups) answer CreateBucket on a bucket that exists and that the caller may write to.
const TAKEN: FaultKind = FaultKind::Error {
    status: 409,
    code: "BucketAlreadyExists",
};

async fn put_get(store: &Store) {
    let key = Path::from("k");
    store.object_store().put(&key, "v".into()).await.unwrap();
    let got = store.object_store().get(&key).await.unwrap();
    assert_eq!(got.bytes().await.unwrap(), "v");
}

/// A bucket that exists is used as it is, even where CreateBucket would answer
/// BucketAlreadyExists.
#[tokio::test]
async fn existing_bucket_is_used_whatever_create_bucket_would_answer() {
    let server = EmbeddedServer::start().await;
    let bucket = server.bucket().await;
    let store = Store::open(&format!("s3://{bucket}/p"), &server.store_config()).unwrap();
    server.faults().fail_next("CreateBucket", 1, TAKEN);
    store.create_bucket().await.unwrap();
    put_get(&store).await;
}

/// HeadBucket misses the bucket, CreateBucket says the name is taken, and a second HeadBucket
/// finds the bucket ours (created meanwhile, or a server that answers so): no error.
#[tokio::test]
async fn taken_name_that_turns_out_ours_is_used() {
    let server = EmbeddedServer::start().await;
    let bucket = server.bucket().await;
    let store = Store::open(&format!("s3://{bucket}/p"), &server.store_config()).unwrap();
    let heads = server.counters().get("HeadBucket");
    server
        .faults()
        .fail_next("HeadBucket", 1, FaultKind::Status(404));
    server.faults().fail_next("CreateBucket", 1, TAKEN);
    store.create_bucket().await.unwrap();
    assert_eq!(server.counters().get("HeadBucket") - heads, 2);
    put_get(&store).await;
}

/// A bucket of another account: HeadBucket is refused and CreateBucket says the name is taken.
/// That is a permission error naming the bucket and what to do.
#[tokio::test]
async fn bucket_of_another_account_is_permission_denied() {
    let server = EmbeddedServer::start().await;
    let bucket = unique_bucket();
    let store = Store::open(&format!("s3://{bucket}/p"), &server.store_config()).unwrap();
    server
        .faults()
        .fail_next("HeadBucket", 2, FaultKind::Status(403));
    server.faults().fail_next("CreateBucket", 1, TAKEN);
    let err = store.create_bucket().await.unwrap_err();
    assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("s3://{bucket}: permission denied;")),
        "{text}"
    );
    assert!(text.contains("choose another bucket name"), "{text}");
    assert_eq!(server.faults().pending("HeadBucket"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seaweed_us_east_1() {
    create_use_and_recreate(SeaweedServer::shared().store_config()).await;
}

/// SeaweedFS answers CreateBucket on a bucket another identity created with 409
/// BucketAlreadyExists (an administrator) or 403 AccessDenied (an identity that may write but
/// not create buckets), though both may write there: the bucket is used as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seaweed_bucket_of_another_identity_is_used() {
    let server = SeaweedServer::shared();
    let bucket = server.bucket().await;
    for identity in [SEAWEED_COLLEAGUE, SEAWEED_WRITER] {
        let uri = format!("s3://{bucket}/{}", identity.0);
        let store = Store::open(&uri, &server.store_config_as(identity)).unwrap();
        store.create_bucket().await.unwrap();
        put_get(&store).await;
    }
}
