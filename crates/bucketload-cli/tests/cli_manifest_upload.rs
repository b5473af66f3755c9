//! `bucketload manifest` sending a manifest larger than one part: a multipart upload of parts
//! in flight, visible only once complete, aborted on failure, the dataset read back whole
//! through it. `BUCKETLOAD_MANIFEST_PART_SIZE` makes the parts small enough for a small
//! dataset to need several (the embedded server is told to take parts of 1 KiB).
#![allow(clippy::unwrap_used)]

mod common;

use common::{Fixture, Run, json, try_get};

const PART: &str = "1KiB";

fn small_parts() -> Fixture {
    Fixture::start_with(|b| b.with_min_part_size(1024))
}

/// `bucketload ARGS` with manifest parts of [`PART`].
fn with_small_parts(fx: &Fixture, args: &[&str]) -> Run {
    let out = fx
        .command()
        .args(args)
        .env("BUCKETLOAD_MANIFEST_PART_SIZE", PART)
        .output()
        .unwrap();
    Run::from(out)
}

fn samples_read(fx: &Fixture, uri: &str) -> u64 {
    let run = fx.run(&["read", uri, "--json", "--no-shuffle"]).ok();
    json(&run)["epochs"][0]["samples"].as_u64().unwrap()
}

#[test]
fn a_manifest_larger_than_a_part_is_one_multipart_upload_read_back_whole() {
    let fx = small_parts();
    fx.generate("s3://mpu/img", 300, 3, "1KB");
    for format in ["2", "1"] {
        let before = fx.server().counters();
        let args = ["manifest", "s3://mpu/img", "--manifest-format", format];
        let run = with_small_parts(&fx, &args);
        assert_eq!(run.code, 0, "{run:#?}");
        let after = fx.server().counters();
        let count = |op: &str| after.get(op) - before.get(op);
        assert_eq!(count("CompleteMultipartUpload"), 1, "format {format}");
        assert!(count("UploadPart") >= 3, "format {format}: {after:?}");
        assert_eq!(count("PutObject"), 0, "format {format}: {after:?}");
        assert_eq!(samples_read(&fx, "s3://mpu/img"), 300, "format {format}");
    }
    let store = fx.store("s3://mpu/img");
    assert!(try_get(&fx, &store, "_bucketload/manifest.bin").is_none());
    assert!(try_get(&fx, &store, "_bucketload/manifest.json").is_some());
}

/// A local folder lists in directory order: the entries that come out of order are merged in
/// from the sorted file, and the result sent in parts like any other.
#[test]
fn a_local_folder_listed_out_of_order_is_merged_and_sent_in_parts() {
    let fx = small_parts();
    let dir = fx.work_path("local");
    let uri = format!("file://{}", dir.display());
    fx.generate(&uri, 300, 3, "1KB");
    let run = with_small_parts(&fx, &["manifest", &uri]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(dir.join("_bucketload/manifest.bin").is_file());
    assert_eq!(samples_read(&fx, &uri), 300);
}

/// Parts that keep failing stop the run with an error naming the manifest; the upload is
/// aborted and no manifest appears.
#[test]
fn a_failed_upload_is_aborted_and_leaves_no_manifest() {
    let fx = small_parts();
    fx.generate("s3://mpu-fail/img", 300, 3, "1KB");
    fx.server().faults().fail_next(
        "UploadPart",
        1000,
        bucketload_server::FaultKind::Status(500),
    );
    let run = with_small_parts(
        &fx,
        &["--max-retries", "0", "manifest", "s3://mpu-fail/img"],
    );
    fx.server().faults().clear();
    assert_ne!(run.code, 0, "{run:#?}");
    assert!(
        run.stderr
            .contains("s3://mpu-fail/img/_bucketload/manifest.bin"),
        "{run:#?}"
    );
    assert!(fx.server().counters().get("AbortMultipartUpload") >= 1);
    assert_eq!(fx.server().counters().get("CompleteMultipartUpload"), 0);
    let store = fx.store("s3://mpu-fail/img");
    assert!(try_get(&fx, &store, "_bucketload/manifest.bin").is_none());
}

/// A manifest larger than one read range (`BUCKETLOAD_MANIFEST_RANGE`) is read by ranged GETs,
/// each read whole whatever the parser's pace, in either format; the dataset reads whole
/// through it.
#[test]
fn a_manifest_larger_than_a_range_is_read_by_ranged_gets() {
    let fx = small_parts();
    fx.generate("s3://mpr/img", 300, 3, "1KB");
    for format in ["2", "1"] {
        let args = ["manifest", "s3://mpr/img", "--manifest-format", format];
        assert_eq!(with_small_parts(&fx, &args).code, 0, "format {format}");
        let before = fx.server().counters();
        let out = fx
            .command()
            .args(["read", "s3://mpr/img", "--json", "--no-shuffle"])
            .env("BUCKETLOAD_MANIFEST_RANGE", "1KiB")
            .output()
            .unwrap();
        let run = Run::from(out).ok();
        assert_eq!(json(&run)["epochs"][0]["samples"].as_u64(), Some(300));
        let after = fx.server().counters();
        // One GET a sample and the manifest's first answer (and a 404 for the missing
        // format 2 one), then a ranged GET for each KiB of a manifest of several.
        let gets = after.get("GetObject") - before.get("GetObject");
        assert!(gets >= 300 + 4, "format {format}: {gets} GETs");
    }
}
