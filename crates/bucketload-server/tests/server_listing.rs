//! ListObjectsV2 through object_store: order, delimiter, pagination, ETags on every entry.
#![allow(clippy::unwrap_used)]

mod common;

use common::{TestServer, md5_hex};
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

const KEYS: &[&str] = &[
    "a-c", "a/b", "a/c/d", "a0", "b", "a/c-x", "ab/x", "z/y/x", "a/c/e",
];

async fn fill(t: &TestServer) {
    let store = t.store();
    for key in KEYS {
        store
            .put(&Path::from(*key), PutPayload::from(key.as_bytes().to_vec()))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn recursive_listing_is_in_byte_order_with_etags() {
    let t = TestServer::start().await;
    fill(&t).await;
    let listed: Vec<_> = t.store().list(None).try_collect().await.unwrap();
    let keys: Vec<String> = listed.iter().map(|m| m.location.to_string()).collect();
    let mut expected: Vec<String> = KEYS.iter().map(|k| k.to_string()).collect();
    expected.sort();
    assert_eq!(keys, expected);
    for meta in &listed {
        let key = meta.location.to_string();
        assert_eq!(
            meta.e_tag.as_deref(),
            Some(format!("\"{}\"", md5_hex(key.as_bytes())).as_str()),
            "{key}"
        );
        assert_eq!(meta.size, key.len() as u64);
    }
    assert!(!keys.iter().any(|k| k.contains(".bucketload")));
}

#[tokio::test]
async fn delimiter_listing_returns_common_prefixes() {
    let t = TestServer::start().await;
    fill(&t).await;
    let store = t.store();
    let top = store.list_with_delimiter(None).await.unwrap();
    let objects: Vec<String> = top.objects.iter().map(|m| m.location.to_string()).collect();
    let prefixes: Vec<String> = top
        .common_prefixes
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(objects, ["a-c", "a0", "b"]);
    assert_eq!(prefixes, ["a", "ab", "z"]);
    let inner = store
        .list_with_delimiter(Some(&Path::from("a")))
        .await
        .unwrap();
    let objects: Vec<String> = inner
        .objects
        .iter()
        .map(|m| m.location.to_string())
        .collect();
    let prefixes: Vec<String> = inner
        .common_prefixes
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(objects, ["a/b", "a/c-x"]);
    assert_eq!(prefixes, ["a/c"]);
}

#[tokio::test]
async fn pagination_visits_every_key_once() {
    let t = TestServer::start().await;
    let store = t.store();
    let mut expected = Vec::new();
    for d in 0..3 {
        for i in 0..700 {
            let key = format!("p/{d}/{i:04}");
            std::fs::create_dir_all(t.dir.path().join(format!("bkt/p/{d}"))).unwrap();
            std::fs::write(t.dir.path().join("bkt").join(&key), b"").unwrap();
            expected.push(key);
        }
    }
    expected.sort();
    let listed: Vec<String> = store
        .list(Some(&Path::from("p")))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    assert_eq!(listed, expected);
    // 2100 keys in pages of at most 1000.
    assert_eq!(t.server.counters().get("ListObjectsV2"), 3);
    let offset: Vec<String> = store
        .list_with_offset(Some(&Path::from("p")), &Path::from("p/1/0500"))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    let first = expected.iter().position(|k| k == "p/1/0500").unwrap();
    assert_eq!(offset, expected[first + 1..]);
}
