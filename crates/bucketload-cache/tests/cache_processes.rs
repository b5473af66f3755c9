//! Several processes sharing one cache directory, and processes killed in
//! the middle of a write. Children are this test binary run again with
//! `BUCKETLOAD_CACHE_CHILD` naming their role (see [`child`]).

use std::fs::{self, File, TryLockError};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use bucketload_cache::{
    BLOCK, Cache, CacheBuilder, CacheKey, CacheStats, Inserted, ObjectVersion, Policy,
};
use bytes::Bytes;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const ROLE: &str = "BUCKETLOAD_CACHE_CHILD";
const DIR: &str = "BUCKETLOAD_CACHE_DIR";
const SEED: &str = "BUCKETLOAD_CACHE_SEED";
const STORE: &str = "s3://bucket/dataset";
const CAPACITY: u64 = 4 << 20;
/// Objects the workers share: about 3.5 times the capacity.
const OBJECTS: u64 = 180;

/// The size and bytes of shared object `i`: 5 KB to 155 KB, a pattern that
/// differs per object and per position.
fn object(i: u64) -> Bytes {
    let len = 5_000 + (i * 7_919) % 150_000;
    (0..len)
        .map(|p| ((p * 131 + i * 17) % 253) as u8)
        .collect::<Vec<_>>()
        .into()
}

fn version(i: u64, len: usize) -> ObjectVersion {
    ObjectVersion::new(format!("\"etag-{i}\""), len as u64)
}

/// Entry point of child processes; does nothing in a normal test run.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let dir = PathBuf::from(std::env::var(DIR).expect("child needs a directory"));
    let seed: u64 = std::env::var(SEED)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    match role.as_str() {
        "lru" => worker(&dir, Policy::Lru, seed),
        "resident" => worker(&dir, Policy::default(), seed),
        "writer" => big_writer(&dir),
        other => panic!("unknown child role {other}"),
    }
}

/// Reads and inserts shared objects in shuffled epochs, checking every hit
/// byte for byte and the size bound after every insert; prints its stats.
fn worker(dir: &Path, policy: Policy, seed: u64) {
    let cache = CacheBuilder::new(dir, CAPACITY)
        .with_policy(policy)
        .build()
        .expect("open cache");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut order: Vec<u64> = (0..OBJECTS).collect();
    for epoch in 0..3 {
        cache.begin_epoch(STORE, epoch).expect("begin epoch");
        order.shuffle(&mut rng);
        for &i in &order {
            let data = object(i);
            let key = CacheKey::new(STORE, format!("train/{i:05}.jpg"));
            let v = version(i, data.len());
            match cache.get(&key, &v).expect("get").hit() {
                Some(got) => assert!(got == data, "object {i}: wrong bytes served"),
                None => {
                    cache.insert(&key, &v, data).expect("insert");
                    let size = cache.stats().expect("stats").size_bytes;
                    assert!(size <= CAPACITY, "accounted {size} > {CAPACITY}");
                }
            }
            if rng.random_ratio(1, 50) {
                thread::yield_now();
            }
        }
    }
    let stats = cache.stats().expect("stats");
    println!("STATS {}", serde_json::to_string(&stats).expect("json"));
}

/// Inserts 64 MiB entries forever, to be killed mid-write.
fn big_writer(dir: &Path) {
    let cache = CacheBuilder::new(dir, 1 << 30).build().expect("open cache");
    let data = big_body();
    for i in 0.. {
        let key = CacheKey::new(STORE, format!("big/{i}"));
        let v = ObjectVersion::size_only(data.len() as u64);
        if cache.insert(&key, &v, data.clone()).expect("insert") != Inserted::Stored {
            break;
        }
    }
}

fn big_body() -> Bytes {
    (0..64u32 << 20)
        .map(|p| (p % 241) as u8)
        .collect::<Vec<_>>()
        .into()
}

fn spawn(role: &str, dir: &Path, seed: u64) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args(["child", "--exact", "--nocapture", "--test-threads", "1"])
        .env(ROLE, role)
        .env(DIR, dir)
        .env(SEED, seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child")
}

fn entry_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let Ok(subs) = fs::read_dir(dir.join("entries")) else {
        return 0;
    };
    for sub in subs.flatten() {
        for e in fs::read_dir(sub.path()).into_iter().flatten().flatten() {
            if let Ok(m) = e.metadata() {
                total += m.len().div_ceil(BLOCK).max(1) * BLOCK;
            }
        }
    }
    total
}

fn temp_files(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir.join("tmp"))
        .expect("tmp dir")
        .map(|e| e.expect("tmp entry").path())
        .collect()
}

/// Runs four workers of `role` at once, watching the directory meanwhile;
/// returns their stats.
fn run_workers(role: &str, dir: &Path) -> Vec<CacheStats> {
    let children: Vec<Child> = (0..4).map(|w| spawn(role, dir, 100 + w)).collect();
    // Watching is not atomic: an entry evicted and another inserted during
    // one walk can both be seen, hence the allowance of a few entries.
    let allowance = 4 * 160_000u64.next_multiple_of(BLOCK);
    let mut peak = 0;
    let mut children: Vec<Option<Child>> = children.into_iter().map(Some).collect();
    let mut outputs = Vec::new();
    while children.iter().any(Option::is_some) {
        peak = peak.max(entry_bytes(dir));
        for slot in &mut children {
            if let Some(c) = slot
                && c.try_wait().expect("wait").is_some()
            {
                outputs.push(
                    slot.take()
                        .expect("child")
                        .wait_with_output()
                        .expect("output"),
                );
            }
        }
        thread::sleep(Duration::from_millis(2));
    }
    assert!(peak <= CAPACITY + allowance, "peak {peak} bytes on disk");
    outputs
        .into_iter()
        .map(|out| {
            assert!(
                out.status.success(),
                "a {role} worker failed: {}",
                out.status
            );
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text
                .lines()
                .find_map(|l| l.split_once("STATS ").map(|(_, json)| json))
                .unwrap_or_else(|| panic!("no stats from worker:\n{text}"));
            let v: serde_json::Value = serde_json::from_str(line).expect("stats json");
            let mut s = CacheStats::default();
            s.hits = v["hits"].as_u64().expect("hits");
            s.corrupt = v["corrupt"].as_u64().expect("corrupt");
            s.inserts = v["inserts"].as_u64().expect("inserts");
            s.evictions = v["evictions"].as_u64().expect("evictions");
            s.rejected = v["rejected"].as_u64().expect("rejected");
            s
        })
        .collect()
}

/// A handle opened before the workers, so that the accounting they kept is
/// read as they left it (a lone open would rebuild it).
fn watcher(dir: &Path) -> Cache {
    CacheBuilder::new(dir, CAPACITY)
        .build()
        .expect("open watcher")
}

/// After the workers: exact accounting, the bound, no temporary files.
fn check_after(dir: &Path, watcher: &Cache, stats: &[CacheStats]) {
    assert!(temp_files(dir).is_empty(), "{:?}", temp_files(dir));
    let on_disk = entry_bytes(dir);
    assert!(on_disk <= CAPACITY, "{on_disk} bytes on disk");
    assert_eq!(stats.iter().map(|s| s.corrupt).sum::<u64>(), 0);
    assert!(stats.iter().map(|s| s.hits).sum::<u64>() > 0, "{stats:?}");
    let shared = watcher.stats().expect("stats");
    assert_eq!(shared.size_bytes, on_disk, "accounting kept by the workers");
}

#[test]
fn processes_share_one_cache_under_lru() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = watcher(dir.path());
    let stats = run_workers("lru", dir.path());
    assert!(
        stats.iter().map(|s| s.evictions).sum::<u64>() > 0,
        "{stats:?}"
    );
    check_after(dir.path(), &cache, &stats);
}

#[test]
fn processes_share_one_cache_under_resident() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = watcher(dir.path());
    let stats = run_workers("resident", dir.path());
    assert!(
        stats.iter().map(|s| s.rejected).sum::<u64>() > 0,
        "{stats:?}"
    );
    check_after(dir.path(), &cache, &stats);
    // Every entry left is intact and holds the right bytes.
    let mut hits = 0;
    for i in 0..OBJECTS {
        let data = object(i);
        let key = CacheKey::new(STORE, format!("train/{i:05}.jpg"));
        if let Some(got) = cache.get(&key, &version(i, data.len())).expect("get").hit() {
            assert!(got == data, "object {i}");
            hits += 1;
        }
    }
    let s = cache.stats().expect("stats");
    assert_eq!((s.hits, s.corrupt, s.entries), (hits, 0, hits));
}

/// Whether some process holds a lock on `path`.
fn locked(path: &Path) -> bool {
    let file = File::open(path).expect("open");
    match file.try_lock() {
        Ok(()) => false,
        Err(TryLockError::WouldBlock) => true,
        Err(TryLockError::Error(e)) => panic!("lock {}: {e}", path.display()),
    }
}

/// Spawns a writer and kills it while it holds a locked temporary file;
/// returns whether the kill landed mid-write (a temporary file is left).
fn kill_mid_write(dir: &Path) -> bool {
    let mut child = spawn("writer", dir, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if temp_files(dir).iter().any(|p| p.exists() && locked(p)) {
            break;
        }
        thread::sleep(Duration::from_micros(200));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    !temp_files(dir).is_empty()
}

#[test]
fn a_process_killed_mid_write_leaves_no_entry_and_no_lock() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A live handle throughout: the writer and the later handle are not
    // alone, so abandoned files must be recognised by their missing lock.
    let watcher = CacheBuilder::new(dir.path(), 1 << 30)
        .build()
        .expect("open");
    let landed = (0..5).any(|_| kill_mid_write(dir.path()));
    assert!(landed, "no kill landed during a write in five tries");
    assert!(
        locked(&dir.path().join("users")),
        "the watcher holds users shared"
    );
    assert!(!locked(&dir.path().join("state")), "no stale state lock");
    let second = CacheBuilder::new(dir.path(), 1 << 30)
        .with_temp_grace(Duration::ZERO)
        .build()
        .expect("open while another handle is live");
    assert!(
        temp_files(dir.path()).is_empty(),
        "abandoned temp file removed"
    );
    assert!(second.stats().expect("stats").temp_removed >= 1);
    // Every entry the writers completed is whole; nothing else is visible.
    let data = big_body();
    let v = ObjectVersion::size_only(data.len() as u64);
    let mut hits = 0;
    for i in 0..64 {
        let key = CacheKey::new(STORE, format!("big/{i}"));
        if let Some(got) = second.get(&key, &v).expect("get").hit() {
            assert!(got == data);
            hits += 1;
        }
    }
    let s = second.stats().expect("stats");
    assert_eq!((s.corrupt, s.hits), (0, hits));
    assert_eq!(s.size_bytes, entry_bytes(dir.path()));
    drop((watcher, second));
    let lone = CacheBuilder::new(dir.path(), 1 << 30)
        .build()
        .expect("reopen alone");
    assert_eq!(lone.stats().expect("stats").entries, hits);
}
