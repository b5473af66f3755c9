//! `bucketload report`: PNG charts and a self-contained HTML page from the benchmark logs in
//! `tests/data/report/`, checked by decoding the PNGs and by rendering the page in headless
//! Chromium (Debian's `chromium` package, which scripts/setup.sh installs; the test fails
//! without it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The SVG size of every chart times the PNG scale (2).
const PNG_SIZE: (u32, u32) = (1760, 880);
const SLUGS: [&str; 4] = ["epochs", "throughput", "checkpoints", "requests"];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report")
}

fn report(logs: &[&Path], out: &Path) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bucketload"));
    cmd.arg("report").args(logs).arg("--out").arg(out);
    cmd.env_remove("RUST_LOG").output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Decodes a PNG; its size and whether any pixel is not white.
fn decode_png(path: &Path) -> ((u32, u32), bool) {
    let file = std::fs::File::open(path).unwrap();
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let inked = pixels.iter().any(|&v| v < 200);
    ((info.width, info.height), inked)
}

#[test]
fn report_writes_pngs_and_a_self_contained_page() {
    let out = tempfile::tempdir().unwrap();
    let run = report(&[&fixtures()], out.path());
    assert!(run.status.success(), "{}", text(&run.stderr));
    let stdout = text(&run.stdout);
    let page = out.path().join("index.html");
    assert!(stdout.starts_with(&page.display().to_string()), "{stdout}");
    for name in [
        "shards-cached",
        "files-uncached",
        "ckpt-disk-async",
        "s3torch-files",
    ] {
        assert!(stdout.contains(name), "summary lacks {name}: {stdout}");
    }
    for slug in SLUGS {
        let (size, inked) = decode_png(&out.path().join(format!("{slug}.png")));
        assert_eq!(size, PNG_SIZE, "{slug}.png");
        assert!(inked, "{slug}.png is blank");
    }
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(
        html.matches("<svg").count(),
        SLUGS.len(),
        "one svg per chart"
    );
    assert!(
        !html.to_ascii_lowercase().contains("http:"),
        "page refers to http"
    );
    assert!(
        !html.to_ascii_lowercase().contains("https:"),
        "page refers to https"
    );
    assert!(
        !html.contains("<link") && !html.contains("src="),
        "page loads resources"
    );
    assert!(html.contains("streamed every epoch"));
    assert!(html.contains("s3 · async") && html.contains("disk · sync"));
}

#[test]
fn charts_without_data_are_skipped_with_a_note() {
    let out = tempfile::tempdir().unwrap();
    let log = fixtures().join("ckpt-s3-sync.json");
    let run = report(&[&log], out.path());
    assert!(run.status.success(), "{}", text(&run.stderr));
    let stdout = text(&run.stdout);
    assert!(
        stdout.contains("skipped (no data): Epoch time per run"),
        "{stdout}"
    );
    let html = std::fs::read_to_string(out.path().join("index.html")).unwrap();
    assert_eq!(
        html.matches("<svg").count(),
        2,
        "checkpoints and requests only"
    );
    assert!(html.contains("Not drawn: no log has epoch times"));
    assert!(out.path().join("checkpoints.png").is_file());
    assert!(!out.path().join("epochs.png").exists());
}

#[test]
fn bad_json_names_the_file_and_exits_6() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixtures().join("ckpt-s3-sync.json"),
        dir.path().join("a.json"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("broken.json"),
        "{\"name\": \"x\",\n \"t_epoch_1\": }",
    )
    .unwrap();
    let run = report(&[dir.path()], &dir.path().join("out"));
    assert_eq!(run.status.code(), Some(6), "{}", text(&run.stderr));
    let stderr = text(&run.stderr);
    assert!(
        stderr.contains("broken.json") && stderr.contains("line 2"),
        "{stderr}"
    );

    let empty = tempfile::tempdir().unwrap();
    let run = report(&[empty.path()], &dir.path().join("out"));
    assert_eq!(run.status.code(), Some(3), "{}", text(&run.stderr));
    assert!(text(&run.stderr).contains("no *.json logs"));
}

/// Chromium's binary: `chromium` (Debian) or `chromium-browser` on the PATH.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// Runs a command, killing it after `limit`.
fn output_within(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            panic!("chromium did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn headless_chromium_renders_every_chart() {
    let chromium = chromium().expect(
        "chromium is not on PATH: run scripts/setup.sh (it installs Debian's chromium package)",
    );
    let out = tempfile::tempdir().unwrap();
    let run = report(&[&fixtures()], out.path());
    assert!(run.status.success(), "{}", text(&run.stderr));
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(chromium);
    cmd.args([
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--disable-dev-shm-usage",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .arg("--dump-dom")
    .arg(format!(
        "file://{}",
        out.path().join("index.html").display()
    ))
    .env("HOME", profile.path());
    let dom = output_within(cmd, Duration::from_secs(120));
    let stdout = text(&dom.stdout);
    let expected = format!("data-rendered=\"{}\"", SLUGS.len());
    assert!(
        stdout.contains(&expected),
        "the page's script did not see {} rendered charts; body: {:?}; stderr: {}",
        SLUGS.len(),
        stdout.lines().find(|l| l.contains("<body")),
        text(&dom.stderr)
    );
}
