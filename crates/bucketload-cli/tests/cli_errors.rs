//! Bad input: each case gives one `error:` line naming the object and a documented exit code.
#![allow(clippy::unwrap_used)]

mod common;

use common::Fixture;

#[test]
fn usage_errors_exit_2() {
    let fx = Fixture::start();
    let run = fx.run(&["gen", "s3://demo/x", "--size", "12XB"]);
    assert_eq!(run.code, 2, "{run:#?}");
    assert!(run.stderr.contains("12XB"), "{run:#?}");
    let run = fx.run(&["frobnicate"]);
    assert_eq!(run.code, 2, "{run:#?}");
    let run = fx.run(&["serve", "--root", "x", "--latency", "120ms..30ms"]);
    assert_eq!(run.code, 2, "{run:#?}");
    assert!(run.stderr.contains("120ms..30ms"), "{run:#?}");
}

#[test]
fn invalid_values_exit_6() {
    let fx = Fixture::start();
    let run = fx.run(&["gen", "s3://demo/x", "--samples", "0"]);
    assert_eq!(run.code, 6, "{run:#?}");
    assert!(run.error_line().contains("--samples"), "{run:#?}");
    let run = fx.run(&["ls", "ftp://host/data"]);
    assert_eq!(run.code, 6, "{run:#?}");
    assert!(run.error_line().contains("ftp://host/data"), "{run:#?}");
}

#[test]
fn missing_bucket_and_key_exit_3() {
    let fx = Fixture::start();
    let run = fx.run(&["ls", "s3://no-such-bucket/train"]);
    assert_eq!(run.code, 3, "{run:#?}");
    assert!(run.error_line().contains("s3://no-such-bucket"), "{run:#?}");

    fx.run(&[
        "gen",
        "s3://demo/train",
        "--samples",
        "2",
        "--classes",
        "1",
        "--size",
        "2KB",
    ])
    .ok();
    let run = fx.run(&["cp", "s3://demo/train/class_000/missing.jpg", "out.jpg"]);
    assert_eq!(run.code, 3, "{run:#?}");
    assert!(
        run.error_line()
            .contains("s3://demo/train/class_000/missing.jpg"),
        "{run:#?}"
    );
    assert!(
        !fx.work_path("out.jpg").exists(),
        "a failed copy left a file"
    );

    let run = fx.run(&["stats", "s3://demo/nothing-here"]);
    assert_eq!(run.code, 3, "{run:#?}");
    assert!(
        run.error_line().contains("s3://demo/nothing-here"),
        "{run:#?}"
    );

    let run = fx.run(&["cp", "no-such-file.bin", "s3://demo/x.bin"]);
    assert_eq!(run.code, 3, "{run:#?}");
    assert!(run.error_line().contains("no-such-file.bin"), "{run:#?}");
}

#[test]
fn wrong_credentials_exit_4() {
    let fx = Fixture::start();
    fx.run(&[
        "gen",
        "s3://demo/train",
        "--samples",
        "2",
        "--classes",
        "1",
        "--size",
        "2KB",
    ])
    .ok();
    let run = Run::from(
        fx.command()
            .env("AWS_SECRET_ACCESS_KEY", "wrong")
            .args(["ls", "s3://demo/train"])
            .output()
            .unwrap(),
    );
    assert_eq!(run.code, 4, "{run:#?}");
    assert!(run.error_line().contains("s3://demo/train"), "{run:#?}");
    assert!(
        run.error_line().contains("AWS_SECRET_ACCESS_KEY"),
        "{run:#?}"
    );
}

#[test]
fn unreachable_endpoint_exits_5() {
    let fx = Fixture::start();
    // Port 9 (discard) on loopback: nothing listens there in the test environment.
    let args = [
        "--endpoint",
        "http://127.0.0.1:9",
        "--max-retries",
        "0",
        "--connect-timeout",
        "2s",
        "ls",
        "s3://demo/x",
    ];
    let run = fx.run(&args);
    assert_eq!(run.code, 5, "{run:#?}");
    assert!(run.error_line().contains("s3://demo/x"), "{run:#?}");
    assert!(run.error_line().contains("127.0.0.1:9"), "{run:#?}");
}

#[test]
fn interrupt_exits_130() {
    let fx = Fixture::start();
    let child = fx
        .command()
        .args([
            "gen",
            "s3://slow/x",
            "--samples",
            "1000000",
            "--size",
            "50KB",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Long enough for the runtime to install its Ctrl-C handler and start uploading.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let sent = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    let run = Run::from(out);
    assert_eq!(run.code, 130, "{run:#?}");
    assert_eq!(run.error_line(), "error: interrupted");
}

use common::Run;

/// An endpoint typed without a scheme (as MinIO users do) or an IP endpoint with virtual-hosted
/// addressing is one `error:` line saying what to write, exit 6: never a panic.
#[test]
fn endpoints_the_client_cannot_use_say_what_to_write() {
    let fx = Fixture::start();
    let bare = fx.endpoint().replace("http://", "");
    for command in [
        &["ls", "s3://demo/x"][..],
        &["read", "s3://demo/x"],
        &["stats", "s3://demo/x"],
    ] {
        let run = fx.run(&[command, &["--endpoint", &bare]].concat());
        assert_eq!(run.code, 6, "{run:#?}");
        assert!(!run.stderr.contains("panicked"), "{run:#?}");
        let wanted = format!("--endpoint http://{bare}");
        assert!(run.error_line().contains(&wanted), "{run:#?}");
    }
    let endpoint = fx.endpoint();
    let run = fx.run(&[
        "ls",
        "s3://demo/x",
        "--endpoint",
        &endpoint,
        "--addressing",
        "virtual",
    ]);
    assert_eq!(run.code, 6, "{run:#?}");
    assert!(!run.stderr.contains("panicked"), "{run:#?}");
    assert!(run.error_line().contains("--addressing path"), "{run:#?}");
}

/// Asserts `run` failed with `code` and one `error:` line that holds `wanted`, and that no line
/// of stderr carries a server's raw XML.
fn fails(run: &Run, code: i32, wanted: &str) {
    assert_eq!(run.code, code, "{run:#?}");
    assert!(run.error_line().contains(wanted), "{wanted}: {run:#?}");
    assert!(
        !run.stderr.contains("<?xml") && !run.stderr.contains("<Error>"),
        "raw XML: {run:#?}"
    );
}

fn put(fx: &Fixture, uri: &str, data: &[u8]) {
    use bucketload_store::object_store::{ObjectStoreExt, PutPayload};
    let (dir, name) = uri.rsplit_once('/').unwrap();
    let store = fx.store(dir);
    let payload = PutPayload::from(data.to_vec());
    fx.block_on(
        store
            .object_store()
            .put(&bucketload_store::key_path(name), payload),
    )
    .unwrap();
}

/// Each row of the exit-code table of docs/CLI.md, triggered by a real case against the
/// embedded server (130 is `interrupt_exits_130`).
#[test]
fn documented_exit_codes_row_by_row() {
    use bucketload_server::FaultKind;
    let fx = Fixture::start();
    fx.generate("s3://rows/img", 4, 2, "2KB");
    fx.run(&[
        "shard",
        "s3://rows/img",
        "s3://rows/shards",
        "--samples-per-shard",
        "2",
    ])
    .ok();

    // 0: success, also when stdout is closed early.
    fx.run(&["ls", "s3://rows/img", "-r"]).ok();

    // 1: an unexpected server answer.
    fx.server()
        .faults()
        .fail_next("GetObject", 1, FaultKind::Status(500));
    let run = fx.run(&[
        "--max-retries",
        "0",
        "cp",
        "s3://rows/img/class_000/000000.jpg",
        "one.jpg",
    ]);
    fails(&run, 1, "s3://rows/img/class_000/000000.jpg");

    // 2: usage.
    fails(
        &fx.run(&["ls", "--frobnicate", "s3://rows"]),
        2,
        "--frobnicate",
    );
    fails(
        &fx.run(&["--part-size", "1XB", "ls", "s3://rows"]),
        2,
        "1XB",
    );

    // 3: missing bucket (named as a bucket, even reading one object), key, prefix, local file.
    let run = fx.run(&["cp", "s3://no-such-bucket/k.bin", "k.bin"]);
    fails(&run, 3, "s3://no-such-bucket: bucket not found");
    let run = fx.run(&["ckpt", "load", "s3://no-such-bucket/run/c.pt", "c.pt"]);
    fails(&run, 3, "s3://no-such-bucket: bucket not found");
    let run = fx.run(&["cp", "s3://rows/img/missing.jpg", "k.bin"]);
    fails(&run, 3, "s3://rows/img/missing.jpg: object not found");
    let run = fx.run(&["cp", "-r", "s3://rows/nothing", "out"]);
    fails(&run, 3, "s3://rows/nothing");
    assert!(run.stdout.is_empty(), "{run:#?}");
    let missing = fx.work_path("no-such-folder");
    let run = fx.run(&["cp", "-r", missing.to_str().unwrap(), "s3://rows/copy"]);
    fails(&run, 3, "no-such-folder");

    // 4: permission or credentials; the server's XML answer is not printed.
    let run = Run::from(
        fx.command()
            .env("AWS_SECRET_ACCESS_KEY", "wrong")
            .args(["ls", "s3://rows/img"])
            .output()
            .unwrap(),
    );
    fails(&run, 4, "s3://rows/img: permission denied");
    assert!(run.stderr.contains("SignatureDoesNotMatch"), "{run:#?}");

    // 5: throttled after retries.
    fx.server()
        .faults()
        .fail_next("ListObjectsV2", 3, FaultKind::Status(503));
    let run = fx.run(&["--max-retries", "1", "ls", "s3://rows/img"]);
    fails(&run, 5, "throttled");
    // The store's advice, in the CLI's words.
    assert!(
        run.stderr
            .contains("lower --concurrency, pass --retry-mode adaptive, or try later"),
        "{run:#?}"
    );
    fx.server().faults().clear();

    // 6: a corrupt shard, index, manifest and image; an unknown scheme.
    fails(&fx.run(&["ls", "ftp://host/x"]), 6, "ftp://host/x");
    put(&fx, "s3://rows/shards/shard-000001.tar", &[7u8; 3072]);
    let run = fx.run(&["read", "s3://rows/shards", "--format", "shards"]);
    fails(&run, 6, "s3://rows/shards/shard-000001.tar");
    put(&fx, "s3://rows/shards/shard-000000.tar.idx", b"garbage");
    let run = fx.run(&["ls", "--samples", "s3://rows/shards"]);
    fails(&run, 6, "s3://rows/shards/shard-000000.tar.idx");
    fx.run(&["manifest", "s3://rows/img"]).ok();
    put(
        &fx,
        "s3://rows/img/class_001/000001.jpg",
        b"not a jpeg at all",
    );
    let run = fx.run(&["read", "s3://rows/img", "--decode", "--batch-size", "1"]);
    fails(&run, 6, "class_001/000001.jpg");
    let run = fx.run(&["read", "s3://rows/img", "--decode", "--batch-size", "1"]);
    assert!(!run.stderr.contains("on_error"), "{run:#?}");
    // A truncated manifest of either format: an error naming it, exit 6.
    put(
        &fx,
        "s3://rows/img/_bucketload/manifest.bin",
        b"\x89BLMF\r\n\x1a\x02\x00",
    );
    let run = fx.run(&["stats", "s3://rows/img"]);
    fails(&run, 6, "s3://rows/img/_bucketload/manifest.bin");
    assert!(run.stderr.contains("truncated"), "{run:#?}");
    assert!(run.stderr.contains("bucketload manifest"), "{run:#?}");
    use bucketload_store::object_store::ObjectStoreExt as _;
    let img = fx.store("s3://rows/img/_bucketload");
    fx.block_on(
        img.object_store()
            .delete(&bucketload_store::key_path("manifest.bin")),
    )
    .unwrap();
    put(
        &fx,
        "s3://rows/img/_bucketload/manifest.json",
        b"{\"bad\": ",
    );
    let run = fx.run(&["stats", "s3://rows/img"]);
    fails(&run, 6, "s3://rows/img/_bucketload/manifest.json");
}

/// A truncated JPEG names the flag that skips bad samples, `--skip-corrupt`.
#[test]
fn a_corrupt_image_suggests_skip_corrupt() {
    let fx = Fixture::start();
    fx.generate("s3://jpeg/img", 2, 1, "2KB");
    let store = fx.store("s3://jpeg/img");
    let key = bucketload_store::key_path("class_000/000001.jpg");
    let whole = fx.block_on(bucketload_test_support::get_whole(&store, &key));
    put(&fx, "s3://jpeg/img/class_000/000001.jpg", &whole[..300]);
    let run = fx.run(&["read", "s3://jpeg/img", "--decode", "--batch-size", "1"]);
    fails(&run, 6, "--skip-corrupt");
    let run = fx.run(&[
        "read",
        "s3://jpeg/img",
        "--decode",
        "--batch-size",
        "1",
        "--skip-corrupt",
    ]);
    assert_eq!(run.code, 0, "{run:#?}");
}

/// Malformed endpoints, URIs, sizes, durations and addressing modes across the commands: each
/// is one `error:` line and a documented exit code, never a panic (101, or 1 with the panic's
/// message) or a backtrace.
#[test]
fn no_command_panics_on_malformed_input() {
    let fx = Fixture::start();
    let run = |args: &[&str]| {
        Run::from(
            fx.command()
                .env_remove("RUST_BACKTRACE")
                .args(args)
                .output()
                .unwrap(),
        )
    };
    let check = |args: &[&str], codes: &[i32]| {
        let r = run(args);
        assert!(codes.contains(&r.code), "{args:?}: {r:#?}");
        let line = r.error_line();
        assert!(!line.is_empty(), "{args:?}: {r:#?}");
        assert!(!r.stderr.contains("stack backtrace"), "{args:?}: {r:#?}");
        assert!(
            !r.stderr.to_lowercase().contains("panic"),
            "{args:?}: {r:#?}"
        );
    };
    let port = fx.endpoint().rsplit(':').next().unwrap().to_owned();
    let endpoints = [
        format!("127.0.0.1:{port}"),
        "http://127.0.0.1:99999".to_owned(),
        "http://".to_owned(),
        "https://".to_owned(),
        "http:// spaced".to_owned(),
        "http://a b:9000".to_owned(),
        "http://\u{fc}n\u{ef}.example:9000".to_owned(),
        "::1:9000".to_owned(),
        "http://::1:9000".to_owned(),
        "http://[::1]:notaport".to_owned(),
        "HTTP://127.0.0.1:1".to_owned(),
        String::new(),
        " ".to_owned(),
        "ftp://127.0.0.1".to_owned(),
    ];
    let commands: [&[&str]; 6] = [
        &["ls", "s3://bad/x"],
        &["read", "s3://bad/x"],
        &["stats", "s3://bad/x"],
        &["cp", "s3://bad/x", "out"],
        &["gen", "s3://bad/x", "--samples", "1"],
        &["ckpt", "ls", "s3://bad/x"],
    ];
    for endpoint in &endpoints {
        for command in commands {
            let args = [
                &["--endpoint", endpoint.as_str(), "--max-retries", "0"],
                command,
            ]
            .concat();
            check(&args, &[2, 6]);
        }
    }

    let long_bucket = "a".repeat(300);
    let long_key = format!("s3://bad/{}", "b".repeat(5000));
    let uris = [
        "s3://",
        "s3:///x",
        // S3 keys may hold `.` and `..` segments; GCS and Azure prefixes may not.
        "gs://b/../x",
        "az://c/a/./x",
        "s3://de mo/x",
        "s3://d\u{e9}/x",
        "s3://b?x",
        "zz://x",
        "",
        "file://",
        "file://relative",
        "gs://",
        &format!("s3://{long_bucket}"),
    ];
    for uri in uris {
        for command in [
            &["ls", uri][..],
            &["read", uri],
            &["stats", uri],
            &["index", uri],
            &["manifest", uri],
            &["verify", uri],
            &["gen", uri, "--samples", "1"],
            &["cp", "-r", uri, "out"],
            &["shard", uri, "s3://ok/shards"],
            &["bench", "--dataset", uri, "--epochs", "1"],
            &["ckpt", "ls", uri],
            &["ckpt", "load", uri, "out"],
            &["merge", uri],
        ] {
            check(command, &[2, 3, 5, 6]);
        }
    }
    check(&["ls", &long_key], &[3, 6]);

    let sizes = ["-1", "1.5.5MB", "99999999999999999999", "1XB", "", "0"];
    for size in sizes {
        check(&["--part-size", size, "ls", "s3://bad"], &[2]);
        check(&["gen", "s3://bad/g", "--size", size], &[2, 6]);
        check(
            &["shard", "s3://bad/a", "s3://bad/b", "--shard-size", size],
            &[2, 3, 6],
        );
        check(&["read", "s3://bad/a", "--memory-budget", size], &[2, 3, 6]);
        check(
            &["mount", "s3://bad", "nowhere", "--memory-limit", size],
            &[2, 3, 6],
        );
        check(&["serve", "--root", "srv", "--bandwidth", size], &[2, 6]);
    }
    let durations = ["-1s", "1y2", "", "99999999999999999999999s", "abc"];
    for duration in durations {
        check(&["--retry-timeout", duration, "ls", "s3://bad"], &[2]);
        check(&["--connect-timeout", duration, "ls", "s3://bad"], &[2]);
        check(
            &["ckpt", "gc", "s3://bad/c", "--older-than", duration],
            &[2],
        );
        check(&["serve", "--root", "srv", "--latency", duration], &[2]);
        check(
            &["mount", "s3://bad", "nowhere", "--metadata-ttl", duration],
            &[2],
        );
    }
    let endpoint = fx.endpoint();
    for addressing in ["virtual", "bogus", "", "VIRTUALLY"] {
        let args = [
            "--endpoint",
            &endpoint,
            "--addressing",
            addressing,
            "ls",
            "s3://bad",
        ];
        check(&args, &[2, 6]);
    }
    for (flag, value) in [
        ("--samples", "0"),
        ("--samples", "-1"),
        ("--classes", "0"),
        ("--seed", "x"),
    ] {
        check(
            &["gen", "s3://bad/g", "--samples", "2", flag, value],
            &[2, 6],
        );
    }
    check(
        &["shard", "s3://bad/a", "s3://bad/b", "--part", "3/2"],
        &[2, 6],
    );
    check(
        &["shard", "s3://bad/a", "s3://bad/b", "--part", "1/0"],
        &[2, 6],
    );
    check(
        &["serve", "--root", "srv", "--addr", "127.0.0.1:99999"],
        &[2, 6],
    );
    check(&["serve", "--root", "srv", "--fault-rate", "2"], &[2, 6]);
    check(
        &["ckpt", "save", "nothing-here.bin", "s3://bad/c/"],
        &[3, 6],
    );
    check(
        &["bench", "--dataset", "s3://bad/x", "--compute-ms", "-1"],
        &[2, 6],
    );
}
