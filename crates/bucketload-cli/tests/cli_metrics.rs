//! `--metrics` reports the requests a command made, as the server counted them, and
//! `--price-table` changes what they cost.
#![allow(clippy::unwrap_used)]

mod common;

use common::Fixture;

#[test]
fn metrics_match_the_servers_counters() {
    let fx = Fixture::start();
    let gen_args = [
        "--metrics",
        "gen",
        "s3://metrics/d",
        "--samples",
        "12",
        "--classes",
        "2",
        "--size",
        "5KB",
    ];
    let run = fx.run(&gen_args).ok();
    let puts = fx.server().counters().get("PutObject");
    assert_eq!(puts, 12);
    assert!(
        run.stderr.contains("requests to s3://metrics/d"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("requests  12 (PUT 12)"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("0 retries"), "{}", run.stderr);
    // 12 PUTs at the default $0.005 per 1,000.
    assert!(run.stderr.contains("cost      $0.000060"), "{}", run.stderr);

    let prices = fx.work_path("prices.json");
    std::fs::write(&prices, r#"{"write_per_1000": 1.0}"#).unwrap();
    let prices = prices.to_str().unwrap();
    let run = fx
        .run(&[
            "--metrics",
            "--price-table",
            prices,
            "ls",
            "s3://metrics/d/",
        ])
        .ok();
    assert!(run.stderr.contains("LIST 1"), "{}", run.stderr);
    // One LIST at $1 per 1,000.
    assert!(run.stderr.contains("cost      $0.001000"), "{}", run.stderr);
}

#[test]
fn invalid_price_table_is_a_usage_error() {
    let fx = Fixture::start();
    let prices = fx.work_path("bad.json");
    std::fs::write(&prices, r#"{"free_lunch": true}"#).unwrap();
    let run = fx.run(&[
        "--price-table",
        prices.to_str().unwrap(),
        "ls",
        "s3://metrics/",
    ]);
    assert_eq!(run.code, 6, "{run:#?}");
    assert!(run.error_line().contains("bad.json"), "{run:#?}");
}

/// `read --metrics` reports the loader's requests (it used to print nothing: the loader's store
/// was not registered).
#[test]
fn read_reports_the_loaders_requests() {
    let fx = Fixture::start();
    fx.generate("s3://metrics/r", 4, 2, "2KB");
    let run = fx.run(&["read", "s3://metrics/r", "--metrics"]).ok();
    assert!(
        run.stderr.contains("requests to s3://metrics/r"),
        "{run:#?}"
    );
    let gets = fx.server().counters().get("GetObject");
    assert!(
        run.stderr.contains(&format!("GET {gets}")),
        "{gets} GETs: {run:#?}"
    );
}

/// Logs that go to a file or a pipe are plain text, without terminal colour codes.
#[test]
fn logs_to_a_file_carry_no_colour_codes() {
    let fx = Fixture::start();
    fx.generate("s3://metrics/l", 2, 1, "2KB");
    let log = std::fs::File::create(fx.work_path("log.txt")).unwrap();
    let status = fx
        .command()
        .args(["-vv", "ls", "s3://metrics/l"])
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(fx.work_path("log.txt")).unwrap();
    assert!(text.contains("DEBUG"), "{text}");
    assert!(!text.contains('\u{1b}'), "{text}");
}
