//! Checkpoints on every backend (memory, local directory, the embedded server, moto, SeaweedFS),
//! one test each: the bytes come back exact, whole and through Read + Seek; retention keeps the newest; faults injected by
//! the embedded server are retried; a failed or dropped save leaves the previous checkpoint and
//! no upload behind; a background failure is reported by the next save.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Seek, SeekFrom};
use std::time::Duration;

use bucketload::checkpoint::{CheckpointConfig, Checkpoints};
use bucketload_server::FaultKind;
use bucketload_test_support::{Backend, Fixture, on_every_backend, pattern};
use bytes::Bytes;

const MIB: usize = 1 << 20;

/// Deterministic bytes that differ everywhere (a repeated pattern would hide misplaced parts).
fn data(len: usize, seed: u8) -> Bytes {
    pattern(len, seed).into()
}

fn config() -> CheckpointConfig {
    CheckpointConfig::default()
        .with_part_size(5 * MIB as u64)
        .with_parts_in_flight(3)
}

fn open(fx: &Fixture, suffix: &str, store: bucketload_store::StoreConfig) -> Checkpoints {
    let uri = match fx.dir() {
        Some(dir) => dir.join(suffix).display().to_string(),
        None => format!("{}/{suffix}", fx.uri),
    };
    Checkpoints::open(&uri, &store, config()).unwrap()
}

/// Save, load, Read + Seek, overwrite, list and retention on one backend.
async fn checkpoints_round_trip(fx: Fixture) {
    let ckpt = open(&fx, "run", fx.config.clone());
    let first = data(23 * MIB + 7, 1);
    let saved = ckpt.save("step-1.pt", first.clone()).await.unwrap();
    assert_eq!(saved.bytes, first.len() as u64);
    assert_eq!(ckpt.load("step-1.pt").await.unwrap(), first);

    // Read + Seek from a thread outside the runtime, as torch.load does.
    let reader = ckpt.reader("step-1.pt").await.unwrap();
    let handle = tokio::runtime::Handle::current();
    let expected = first.clone();
    tokio::task::spawn_blocking(move || {
        let mut r = reader.into_blocking(handle);
        let mut tail = [0u8; 100];
        r.seek(SeekFrom::End(-100)).unwrap();
        r.read_exact(&mut tail).unwrap();
        assert_eq!(&tail[..], &expected[expected.len() - 100..]);
        r.seek(SeekFrom::Start(5 * MIB as u64 - 3)).unwrap();
        let mut across = [0u8; 10];
        r.read_exact(&mut across).unwrap();
        assert_eq!(&across[..], &expected[5 * MIB - 3..5 * MIB + 7]);
        r.seek(SeekFrom::Start(0)).unwrap();
        let mut all = Vec::new();
        r.read_to_end(&mut all).unwrap();
        assert_eq!(all, expected);
    })
    .await
    .unwrap();

    // Small checkpoints (one part) and overwrites; retention keeps the newest.
    ckpt.save("step-2.pt", data(1000, 2)).await.unwrap();
    let newer = data(6 * MIB, 3);
    ckpt.save("step-2.pt", newer.clone()).await.unwrap();
    assert_eq!(ckpt.load("step-2.pt").await.unwrap(), newer);
    let listed = ckpt.list().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["step-1.pt", "step-2.pt"]);
    assert_eq!(listed[0].bytes, first.len() as u64);
    assert_eq!(ckpt.keep_last(1).await.unwrap(), ["step-1.pt"]);
    assert!(ckpt.reader("step-1.pt").await.is_err());
    assert!(ckpt.orphaned_uploads().await.unwrap().is_empty());
}

on_every_backend!(checkpoints_round_trip);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_faults_are_retried_and_the_bytes_are_exact() {
    let fx = Backend::Embedded.setup().await;
    let faults = fx.embedded().unwrap().faults();
    faults.fail_next("UploadPart", 1, FaultKind::Status(500));
    faults.fail_next("UploadPart", 1, FaultKind::ResetMidBody);
    faults.fail_next("UploadPart", 3, FaultKind::Status(503));
    faults.fail_next("CompleteMultipartUpload", 1, FaultKind::Status(503));
    let ckpt = open(&fx, "faults", fx.config.clone());
    let bytes = data(31 * MIB, 4);
    ckpt.save("c.pt", bytes.clone()).await.unwrap();
    let counters = fx.embedded().unwrap().counters();
    assert!(
        counters.get("UploadPart") >= 7 + 5,
        "the failed parts were sent again"
    );
    // Read back by a plain GET through a separate client.
    let plain = bucketload_store::Store::open(&format!("{}/faults", fx.uri), &fx.config).unwrap();
    let got = bucketload_test_support::get_whole(&plain, &bucketload_store::key_path("c.pt")).await;
    assert_eq!(got, bytes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_or_dropped_save_keeps_the_previous_checkpoint() {
    let fx = Backend::Embedded.setup().await;
    let store = fx.config.clone().with_max_retries(1);
    let ckpt = open(&fx, "keep", store);
    let old = data(7 * MIB, 5);
    ckpt.save("c.pt", old.clone()).await.unwrap();

    // Every part fails: the save fails and is aborted.
    let faults = fx.embedded().unwrap().faults();
    faults.fail_next("UploadPart", 1000, FaultKind::Status(500));
    let err = ckpt.save("c.pt", data(12 * MIB, 6)).await.unwrap_err();
    assert!(err.to_string().contains("c.pt"), "{err}");
    faults.clear();
    assert_eq!(ckpt.load("c.pt").await.unwrap(), old);
    assert!(ckpt.orphaned_uploads().await.unwrap().is_empty());

    // A writer dropped half-way aborts its upload.
    let mut writer = ckpt.writer("c.pt").await.unwrap();
    writer.write(data(11 * MIB, 7)).await.unwrap();
    drop(writer);
    let mut left = ckpt.orphaned_uploads().await.unwrap();
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = ckpt.orphaned_uploads().await.unwrap();
    }
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(ckpt.load("c.pt").await.unwrap(), old);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_saves_report_failures_once() {
    let fx = Backend::Embedded.setup().await;
    let ckpt = open(&fx, "bg", fx.config.clone().with_max_retries(0));
    let bytes = data(12 * MIB, 8);
    let handle = ckpt.save_background("a.pt", bytes.clone()).await.unwrap();
    assert_eq!(handle.wait().await.unwrap().bytes, bytes.len() as u64);
    assert_eq!(ckpt.load("a.pt").await.unwrap(), bytes);

    let faults = fx.embedded().unwrap().faults();
    faults.fail_next("UploadPart", 1000, FaultKind::Status(500));
    let lost = ckpt.save_background("b.pt", bytes.clone()).await.unwrap();
    drop(lost); // nobody waits on it
    let err = ckpt.wait_background().await.unwrap_err();
    assert!(err.to_string().contains("background save of"), "{err}");
    assert!(err.to_string().contains("b.pt"), "{err}");
    faults.clear();
    // Reported once: the next save goes through.
    ckpt.save("c.pt", data(MIB, 9)).await.unwrap();
    // A failure the caller waited for is not reported again.
    faults.fail_next("UploadPart", 1000, FaultKind::Status(500));
    let seen = ckpt.save_background("d.pt", bytes).await.unwrap();
    assert!(seen.wait().await.is_err());
    faults.clear();
    ckpt.save("e.pt", data(MIB, 10)).await.unwrap();
    assert!(ckpt.reader("b.pt").await.is_err() && ckpt.reader("d.pt").await.is_err());
}

/// Saves `len` bytes as `name` through the blocking writer (as `torch.save` writes, from a
/// thread outside the runtime), in pieces of `sizes` in turn, and checks they read back exact.
async fn save_through_blocking_writer(dir: &str, len: usize, sizes: &'static [usize]) {
    let fx = Backend::Embedded.setup().await;
    let ckpt = open(&fx, dir, fx.config.clone());
    let writer = ckpt.writer("w.pt").await.unwrap();
    let handle = tokio::runtime::Handle::current();
    let bytes = data(len, (len % 251) as u8);
    let expected = bytes.clone();
    let saved = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut w = writer.into_blocking(handle);
        let mut rest = &bytes[..];
        for size in sizes.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (now, later) = rest.split_at((*size).min(rest.len()));
            w.write_all(now).unwrap();
            rest = later;
        }
        w.finish().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(saved.bytes, expected.len() as u64);
    assert_eq!(ckpt.load("w.pt").await.unwrap(), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_writer_is_a_file_for_torch_save() {
    save_through_blocking_writer("io", 9 * MIB + 3, &[64 * 1024 + 1]).await;
}

/// The blocking writer hands its chunk buffers back and forth with the upload: a checkpoint
/// many times what the upload holds in flight, written in pieces smaller and larger than a
/// chunk, reads back exact (a buffer reused before its part was sent would show here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_writer_reuses_its_buffers_without_mixing_bytes() {
    let sizes = &[1, 64 * 1024 + 1, 9 * MIB + 3, 4 * MIB, 17];
    save_through_blocking_writer("reuse", 61 * MIB + 5, sizes).await;
}
