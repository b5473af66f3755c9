//! `cp` round trips: local → S3 → local, single objects and trees, large objects in parts.
#![allow(clippy::unwrap_used)]

mod common;

use bucketload_server::FaultKind;
use bucketload_test_support::pattern;
use common::Fixture;

#[test]
fn tree_round_trip_is_byte_exact() {
    let fx = Fixture::start();
    let src = fx.work_path("src");
    std::fs::create_dir_all(src.join("nested/deeper")).unwrap();
    let files = [
        ("a.bin", 1000usize),
        ("nested/b.bin", 70_000),
        ("nested/deeper/c.bin", 0),
    ];
    for (i, (name, len)) in files.iter().enumerate() {
        std::fs::write(src.join(name), pattern(*len, i as u8)).unwrap();
    }
    let run = fx
        .run(&[
            "cp",
            "--recursive",
            src.to_str().unwrap(),
            "s3://cp-tests/tree",
        ])
        .ok();
    assert!(run.stdout.contains("copied 3 objects"), "{run:#?}");
    let ls = fx.run(&["ls", "-r", "s3://cp-tests/tree"]).ok();
    assert!(ls.stdout.contains("nested/deeper/c.bin"), "{}", ls.stdout);

    fx.run(&[
        "cp",
        "--recursive",
        "s3://cp-tests/tree",
        "s3://cp-tests2/tree-copy",
    ])
    .ok();
    fx.run(&["cp", "--recursive", "s3://cp-tests2/tree-copy", "back"])
        .ok();
    fx.run(&["cp", "back/a.bin", "s3://cp-tests2"]).ok();
    let ls = fx.run(&["ls", "s3://cp-tests2/a.bin"]).ok();
    assert!(ls.stdout.contains(" 1000 a.bin"), "{}", ls.stdout);
    for (name, _) in files {
        let want = std::fs::read(src.join(name)).unwrap();
        let got = std::fs::read(fx.work_path("back").join(name)).unwrap();
        assert!(want == got, "{name} differs after the round trip");
    }
}

#[test]
fn large_object_goes_through_parts_and_back() {
    let fx = Fixture::start();
    // 5 MiB parts (the smallest S3 allows) and a 12 MiB file: three parts each way.
    let data = pattern(12 << 20, 3);
    std::fs::write(fx.work_path("big.bin"), &data).unwrap();
    fx.run(&[
        "cp",
        "--part-size",
        "5MiB",
        "big.bin",
        "s3://cp-tests/big/big.bin",
    ])
    .ok();
    fx.run(&[
        "cp",
        "--part-size",
        "5MiB",
        "s3://cp-tests/big/big.bin",
        "out/",
    ])
    .ok();
    let got = std::fs::read(fx.work_path("out/big.bin")).unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got == data, "large object differs after the round trip");
    let ls = fx.run(&["ls", "s3://cp-tests/big/big.bin"]).ok();
    assert!(
        ls.stdout.contains(&(12u64 << 20).to_string()),
        "{}",
        ls.stdout
    );
}

#[test]
fn failed_upload_leaves_no_object() {
    let fx = Fixture::start();
    std::fs::write(fx.work_path("big.bin"), pattern(11 << 20, 5)).unwrap();
    fx.run(&["cp", "big.bin", "s3://cp-tests/ok.bin"]).ok();
    fx.server()
        .faults()
        .fail_next("UploadPart", 1000, FaultKind::Status(500));
    let args = [
        "--max-retries",
        "0",
        "--part-size",
        "5MiB",
        "cp",
        "big.bin",
        "s3://cp-tests/fail/big.bin",
    ];
    let run = fx.run(&args);
    assert_ne!(run.code, 0, "{run:#?}");
    assert!(
        run.error_line().contains("s3://cp-tests/fail/big.bin"),
        "{run:#?}"
    );
    fx.server().faults().clear();
    assert!(
        fx.server().counters().get("AbortMultipartUpload") >= 1,
        "upload not aborted"
    );
    let ls = fx.run(&["ls", "s3://cp-tests/fail/big.bin"]);
    assert_eq!(ls.code, 3, "a partial object is visible: {ls:#?}");
}

#[test]
fn failed_download_leaves_no_file() {
    let fx = Fixture::start();
    std::fs::write(fx.work_path("big.bin"), pattern(11 << 20, 6)).unwrap();
    fx.run(&[
        "cp",
        "--part-size",
        "5MiB",
        "big.bin",
        "s3://cp-tests/big.bin",
    ])
    .ok();
    fx.server()
        .faults()
        .fail_next("GetObject", 1000, FaultKind::Status(500));
    let args = [
        "--max-retries",
        "0",
        "--part-size",
        "5MiB",
        "cp",
        "s3://cp-tests/big.bin",
        "down.bin",
    ];
    let run = fx.run(&args);
    assert_ne!(run.code, 0, "{run:#?}");
    assert!(
        run.error_line().contains("s3://cp-tests/big.bin"),
        "{run:#?}"
    );
    assert!(
        !fx.work_path("down.bin").exists(),
        "a partial file is visible"
    );
}
