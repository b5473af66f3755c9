//! WAN emulation: faults (random and by rule), counters, rate limit, latency, bandwidth, auth.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use bucketload_server::{FaultConfig, FaultKind, LatencySpec};
use bucketload_test_support::pattern;
use common::{TestServer, raw_request};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};

async fn with_object(t: &TestServer, len: usize) -> Vec<u8> {
    let data = pattern(len, 9);
    t.store()
        .put(&Path::from("obj"), PutPayload::from(data.clone()))
        .await
        .unwrap();
    data
}

#[tokio::test]
async fn status_rules_fail_exactly_the_next_requests() {
    let t = TestServer::start().await;
    let data = with_object(&t, 10_000).await;
    for status in [503, 500] {
        t.server
            .faults()
            .fail_next("GetObject", 2, FaultKind::Status(status));
        let before = t.server.counters().get("GetObject");
        let got = t
            .store_with_retries(3)
            .get(&Path::from("obj"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(&got[..], &data[..]);
        assert_eq!(
            t.server.counters().get("GetObject") - before,
            3,
            "two failures then one success"
        );
        assert_eq!(t.server.faults().pending("GetObject"), 0);
    }
    t.server
        .faults()
        .fail_next("GetObject", 1, FaultKind::Status(503));
    let err = t
        .store()
        .get(&Path::from("obj"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("503") || err.contains("SlowDown"), "{err}");
}

#[tokio::test]
async fn reset_and_truncate_break_the_body() {
    let t = TestServer::start().await;
    with_object(&t, 200_000).await;
    for kind in [FaultKind::ResetMidBody, FaultKind::Truncate] {
        t.server.faults().fail_next("GetObject", 1, kind);
        let result = async { t.store().get(&Path::from("obj")).await?.bytes().await }.await;
        assert!(
            result.is_err(),
            "{kind:?} must fail the body, got {} bytes",
            result.map(|b| b.len()).unwrap_or(0)
        );
    }
    // The connection is healthy again afterwards.
    assert_eq!(
        t.store()
            .get(&Path::from("obj"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
            .len(),
        200_000
    );
}

#[tokio::test]
async fn faults_on_bodiless_responses_drop_the_connection() {
    let t = TestServer::start().await;
    with_object(&t, 100).await;
    t.server
        .faults()
        .fail_next("HeadObject", 1, FaultKind::ResetMidBody);
    assert!(t.store().head(&Path::from("obj")).await.is_err());
    t.server
        .faults()
        .fail_next("PutObject", 2, FaultKind::Truncate);
    let before = t.server.counters().get("PutObject");
    t.store_with_retries(5)
        .put(&Path::from("again"), PutPayload::from_static(b"abc"))
        .await
        .unwrap();
    assert_eq!(t.server.counters().get("PutObject") - before, 3);
}

#[tokio::test]
async fn random_faults_are_reproducible_for_a_seed() {
    async fn failures(seed: u64) -> Vec<bool> {
        let faults: FaultConfig = format!("error=0.5,seed={seed}").parse().unwrap();
        let t = TestServer::start_with(|b| b.with_faults(faults)).await;
        std::fs::write(t.dir.path().join("bkt/obj"), b"data").unwrap();
        let store = t.store();
        let mut out = Vec::new();
        for _ in 0..40 {
            out.push(store.head(&Path::from("obj")).await.is_err());
        }
        out
    }
    let a = failures(7).await;
    assert_eq!(a, failures(7).await);
    let failed = a.iter().filter(|f| **f).count();
    assert!(
        (8..=32).contains(&failed),
        "{failed} of 40 failed at rate 0.5"
    );
}

#[tokio::test]
async fn counters_in_process_and_over_http() {
    let t = TestServer::start().await;
    with_object(&t, 10).await;
    let store = t.store();
    store.head(&Path::from("obj")).await.unwrap();
    let _ = store.head(&Path::from("missing")).await;
    let counters = t.server.counters();
    assert_eq!(counters.get("PutObject"), 1);
    assert_eq!(counters.get("HeadObject"), 2);
    let (status, body) = raw_request(&t.server, "GET", "/_bucketload/counters").await;
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["HeadObject"], 2);
    assert_eq!(json["PutObject"], 1);
}

#[tokio::test]
async fn wrong_credentials_are_refused_with_403() {
    let t = TestServer::start().await;
    with_object(&t, 10).await;
    let bad_secret = t.store_for("bkt", "bucketload", "wrong", 0);
    let err = bad_secret.get(&Path::from("obj")).await.unwrap_err();
    assert!(
        matches!(err, object_store::Error::PermissionDenied { .. }),
        "{err}"
    );
    let bad_key = t.store_for("bkt", "nobody", "bucketload-dev-secret", 0);
    let err = bad_key.get(&Path::from("obj")).await.unwrap_err();
    assert!(
        matches!(err, object_store::Error::PermissionDenied { .. }),
        "{err}"
    );
    let (status, body) = raw_request(&t.server, "GET", "/bkt/obj").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        t.server.counters().get("GetObject"),
        3,
        "refused requests are counted"
    );
}

#[tokio::test]
async fn custom_credentials_replace_the_defaults() {
    let t = TestServer::start_with(|b| b.with_credentials("AKIDTEST", "s3cret")).await;
    let store = t.store_for("bkt", "AKIDTEST", "s3cret", 0);
    store
        .put(&Path::from("x"), PutPayload::from_static(b"1"))
        .await
        .unwrap();
    assert!(t.store().head(&Path::from("x")).await.is_err());
}

#[tokio::test]
async fn rate_limit_answers_slow_down_per_prefix() {
    let t = TestServer::start_with(|b| b.with_rate_limit(5)).await;
    std::fs::create_dir_all(t.dir.path().join("bkt/hot")).unwrap();
    std::fs::write(t.dir.path().join("bkt/hot/k"), b"x").unwrap();
    std::fs::create_dir_all(t.dir.path().join("bkt/cold")).unwrap();
    std::fs::write(t.dir.path().join("bkt/cold/k"), b"x").unwrap();
    let store = t.store();
    let mut refused = None;
    for i in 0..20 {
        if let Err(e) = store.head(&Path::from("hot/k")).await {
            refused = Some((i, e.to_string()));
            break;
        }
    }
    let (i, err) = refused.expect("the rate limit refuses requests beyond the burst");
    assert!(i >= 5, "the first 5 requests fit the burst, refused at {i}");
    assert!(err.contains("503") || err.contains("SlowDown"), "{err}");
    store.head(&Path::from("cold/k")).await.unwrap();
}

#[tokio::test]
async fn latency_is_at_least_the_configured_minimum() {
    let latency: LatencySpec = "40ms..60ms".parse().unwrap();
    let t = TestServer::start_with(|b| b.with_latency(latency)).await;
    std::fs::write(t.dir.path().join("bkt/obj"), b"data").unwrap();
    let store = t.store();
    for _ in 0..3 {
        let started = Instant::now();
        store.head(&Path::from("obj")).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(40));
    }
}

#[tokio::test]
async fn bandwidth_cap_slows_a_download_to_at_least_its_floor() {
    let t = TestServer::start_with(|b| b.with_bandwidth(1_000_000)).await;
    let data = with_object(&t, 300_000).await;
    let started = Instant::now();
    let got = t
        .store()
        .get(&Path::from("obj"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&got[..], &data[..]);
    // 300 KB at 1 MB/s after a 50 KB burst takes at least 0.25 s.
    assert!(
        started.elapsed() >= Duration::from_millis(240),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn shutdown_stops_serving() {
    let t = TestServer::start().await;
    let addr = t.server.addr();
    t.server.shutdown().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn serve_forever_runs_until_its_shutdown_future_completes() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let config = bucketload_server::ServerConfig::builder(dir.path())
        .with_addr(addr)
        .build()
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(bucketload_server::serve_forever(config, async {
        let _ = stopped.await;
    }));
    let mut connected = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            connected = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(connected, "serve_forever listens on {addr}");
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}
