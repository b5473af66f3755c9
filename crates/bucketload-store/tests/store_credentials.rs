//! Temporary credentials from a profile's credential_process: one provider per store shared by
//! object_store's requests and the store's own signed ones (CreateBucket, the multipart upload
//! listing), cached while fresh and fetched again as their expiry nears. The embedded server
//! accepts only the keys the process prints.

#![allow(clippy::unwrap_used)] // tests fail loudly on any error

use std::collections::HashMap;
use std::path::{Path as FsPath, PathBuf};
use std::time::{Duration, Instant};

use bucketload_store::object_store::ObjectStoreExt;
use bucketload_store::object_store::path::Path;
use bucketload_store::{Addressing, Store, StoreConfig};
use bucketload_test_support::{EmbeddedServer, unique_bucket};
use chrono::Utc;

const KEY: &str = "ASIAPROCESS";
const SECRET: &str = "process-secret";

struct Setup {
    _dir: tempfile::TempDir,
    calls: PathBuf,
    config: StoreConfig,
}

/// A profile whose credential_process counts its runs in `calls` and prints the server's
/// keys expiring in `ttl`.
fn setup(server: &EmbeddedServer, ttl: Duration) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls");
    let expiration = (Utc::now() + ttl).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let script = dir.path().join("creds.sh");
    std::fs::write(
        &script,
        format!(
            "echo run >> '{}'\necho '{{\"Version\": 1, \"AccessKeyId\": \"{KEY}\", \
             \"SecretAccessKey\": \"{SECRET}\", \"SessionToken\": \"t\", \
             \"Expiration\": \"{expiration}\"}}'\n",
            calls.display()
        ),
    )
    .unwrap();
    let config_file = dir.path().join("config");
    std::fs::write(
        &config_file,
        format!("[default]\ncredential_process = sh {}\n", script.display()),
    )
    .unwrap();
    let vars = HashMap::from([(
        "AWS_CONFIG_FILE".to_owned(),
        config_file.display().to_string(),
    )]);
    let config = StoreConfig::from_env_map(&vars)
        .with_endpoint(server.endpoint())
        .with_region("us-east-1")
        .with_addressing(Addressing::Path);
    Setup {
        _dir: dir,
        calls,
        config,
    }
}

fn runs(calls: &FsPath) -> usize {
    std::fs::read_to_string(calls)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

async fn server() -> EmbeddedServer {
    EmbeddedServer::start_with(|b| b.with_credentials(KEY, SECRET)).await
}

#[tokio::test]
async fn one_fetch_signs_object_store_and_own_requests() {
    let server = server().await;
    let s = setup(&server, Duration::from_secs(3600));
    let store = Store::open(&format!("s3://{}/p", unique_bucket()), &s.config).unwrap();
    store.create_bucket().await.unwrap();
    let os = store.object_store();
    os.put(&Path::from("k"), "v".into()).await.unwrap();
    assert!(store.list_uploads("").await.unwrap().is_empty());
    let got = os
        .get(&Path::from("k"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(got, "v");
    assert_eq!(runs(&s.calls), 1, "one provider, cached until near expiry");
}

#[tokio::test]
async fn credentials_about_to_expire_are_fetched_again() {
    let server = server().await;
    // Inside the five minutes before expiry in which the SDKs refresh: every use refetches.
    let s = setup(&server, Duration::from_secs(60));
    let store = Store::open(&format!("s3://{}/p", unique_bucket()), &s.config).unwrap();
    store.create_bucket().await.unwrap();
    let os = store.object_store();
    os.put(&Path::from("a"), "1".into()).await.unwrap();
    os.put(&Path::from("b"), "2".into()).await.unwrap();
    assert!(store.list_uploads("").await.unwrap().is_empty());
    assert_eq!(runs(&s.calls), 4);
}

#[tokio::test]
async fn credentials_are_refreshed_when_their_expiry_comes_near() {
    let server = server().await;
    // Fresh for a few seconds, then inside the refresh margin.
    let fresh_for = Duration::from_secs(4);
    let started = Instant::now();
    let s = setup(&server, Duration::from_secs(300) + fresh_for);
    let store = Store::open(&format!("s3://{}/p", unique_bucket()), &s.config).unwrap();
    store.create_bucket().await.unwrap();
    let os = store.object_store();
    os.put(&Path::from("a"), "1".into()).await.unwrap();
    if started.elapsed() < fresh_for - Duration::from_secs(1) {
        assert_eq!(runs(&s.calls), 1, "still fresh: cached");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while runs(&s.calls) < 2 {
        assert!(Instant::now() < deadline, "never refreshed");
        tokio::time::sleep(Duration::from_millis(200)).await;
        os.put(&Path::from("a"), "1".into()).await.unwrap();
    }
}
