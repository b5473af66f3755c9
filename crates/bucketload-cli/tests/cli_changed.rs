//! An object changed after `bucketload manifest`: `read` (with and without `--cache`),
//! `read --decode` and `shard` fail naming it, or with `--skip-changed` leave it out, count it
//! and succeed; the cache never serves its changed bytes, also after the object is restored;
//! `shard` never packages them.
#![allow(clippy::unwrap_used)]

mod common;

use bucketload_format::{MANIFEST_BIN_PATH, Manifest};
use bucketload_store::Store;
use bucketload_store::object_store::{ObjectStoreExt, path::Path};
use common::{Fixture, get, json, put};

/// The same JPEG with one byte of its entropy-coded data changed: same size, still decodes.
fn altered(jpeg: &[u8]) -> Vec<u8> {
    let mut other = jpeg.to_vec();
    let mid = (jpeg.len() / 2..jpeg.len() - 2)
        .find(|&i| !matches!(jpeg[i], 0x00 | 0xfe | 0xff) && jpeg[i - 1] != 0xff)
        .unwrap();
    other[mid] ^= 0x01;
    other
}

/// A dataset of 12 JPEGs with a manifest, and the key of its first object.
fn dataset(fx: &Fixture, uri: &str) -> (Store, String, Vec<u8>) {
    fx.generate(uri, 12, 3, "3KB");
    fx.run(&["manifest", uri]).ok();
    let store = fx.store(uri);
    let manifest =
        Manifest::from_json(MANIFEST_BIN_PATH, &get(fx, &store, MANIFEST_BIN_PATH)).unwrap();
    let key = manifest.files[0].key.clone();
    let original = get(fx, &store, &key);
    (store, key, original)
}

#[test]
fn the_cache_never_serves_a_changed_objects_bytes_after_it_is_restored() {
    let fx = Fixture::start();
    let uri = "s3://changed-tests/cache";
    let (store, key, original) = dataset(&fx, uri);
    let cache = fx.work_path("cache");
    let cache = cache.to_str().unwrap();
    put(&fx, &store, &key, &altered(&original));

    let run = fx.run(&["read", uri, "--cache", cache]);
    assert_eq!(run.code, 6, "a changed object must fail the read: {run:#?}");
    assert!(run.stderr.contains(&format!("{uri}/{key}")), "{run:#?}");
    assert!(run.stderr.contains("has ETag"), "{run:#?}");

    let run = fx.run(&["read", uri, "--cache", cache, "--skip-changed", "--json"]);
    let report = json(&run.ok());
    assert_eq!(report["loader"]["skipped_changed"], 1, "{report:#}");
    assert_eq!(report["epochs"][0]["samples"], 11, "{report:#}");

    put(&fx, &store, &key, &original);
    let gets = fx.server().counters().get("GetObject");
    let run = fx.run(&["read", uri, "--cache", cache, "--json"]);
    let report = json(&run.ok());
    let epoch = &report["epochs"][0];
    assert_eq!(epoch["samples"], 12, "{report:#}");
    assert_eq!(report["loader"]["skipped_changed"], 0, "{report:#}");
    // The restored object is fetched again (its changed bytes were filed under the changed
    // version); the other eleven come from the cache.
    assert_eq!(epoch["cache_misses"], 1, "{report:#}");
    assert_eq!(epoch["cache_hits"], 11, "{report:#}");
    assert_eq!(epoch["get"], 1, "{report:#}");
    // The manifest, then the restored object.
    assert_eq!(fx.server().counters().get("GetObject") - gets, 2);
    fx.run(&["verify", uri]).ok();
}

#[test]
fn read_and_read_decode_fail_naming_a_changed_object_or_skip_it_when_asked() {
    let fx = Fixture::start();
    let uri = "s3://changed-tests/read";
    let (store, key, original) = dataset(&fx, uri);
    put(&fx, &store, &key, &altered(&original));
    let named = format!("{uri}/{key}");
    for args in [vec!["read", uri], vec!["read", uri, "--decode"]] {
        let run = fx.run(&args);
        assert_eq!(run.code, 6, "{run:#?}");
        assert!(run.stderr.contains(&named), "{run:#?}");
        assert!(run.stderr.contains("--skip-changed"), "{run:#?}");
    }
    let run = fx.run(&["read", uri, "--decode", "--skip-changed"]).ok();
    assert!(
        run.stdout
            .contains("skipped   1 samples whose objects changed"),
        "{run:#?}"
    );
    assert!(
        run.stdout.contains("incomplete: 1 samples skipped"),
        "{run:#?}"
    );
}

#[test]
fn shard_never_packages_a_changed_object() {
    let fx = Fixture::start();
    let uri = "s3://changed-tests/src";
    let (store, key, original) = dataset(&fx, uri);
    put(&fx, &store, &key, &altered(&original));

    let dst = "s3://changed-tests/shards";
    let run = fx.run(&["shard", uri, dst]);
    assert_eq!(run.code, 6, "{run:#?}");
    assert!(run.stderr.contains(&format!("{uri}/{key}")), "{run:#?}");
    let dst_store = fx.store(dst);
    let manifest = fx.block_on(async {
        let os = dst_store.object_store();
        os.get(&Path::from(MANIFEST_BIN_PATH)).await
    });
    assert!(manifest.is_err(), "a failed run must not write a manifest");

    let run = fx.run(&["shard", uri, dst, "--skip-changed"]).ok();
    let line = format!("left out (changed since listed): {uri}/{key}: has ETag");
    assert!(run.stdout.contains(&line), "{run:#?}");
    assert!(
        run.stdout
            .contains("left out 1 objects changed since the manifest or listing"),
        "{run:#?}"
    );
    fx.run(&["verify", dst]).ok();
    let shards =
        Manifest::from_json(MANIFEST_BIN_PATH, &get(&fx, &dst_store, MANIFEST_BIN_PATH)).unwrap();
    assert_eq!(shards.samples, 11, "the changed sample is not packaged");
}
