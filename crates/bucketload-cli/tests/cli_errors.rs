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
