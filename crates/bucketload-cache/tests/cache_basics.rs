//! One process: round trips, validation, damage, the size bound, repair.

use std::fs;
use std::path::{Path, PathBuf};

use bucketload_cache::{
    BLOCK, Cache, CacheBuilder, CacheKey, Error, Inserted, Lookup, Miss, ObjectVersion, Policy,
    Rejection,
};
use bytes::Bytes;

const MIB: u64 = 1 << 20;

fn open(dir: &Path, capacity: u64, policy: Policy) -> Cache {
    CacheBuilder::new(dir, capacity)
        .with_policy(policy)
        .build()
        .expect("open cache")
}

fn body(seed: u64, len: usize) -> Bytes {
    (0..len)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8)
        .collect::<Vec<_>>()
        .into()
}

fn put(cache: &Cache, name: &str, data: &Bytes) -> Inserted {
    let key = CacheKey::new("s3://b/ds", name);
    let version = ObjectVersion::new(format!("\"{name}\""), data.len() as u64);
    cache.insert(&key, &version, data.clone()).expect("insert")
}

fn get(cache: &Cache, name: &str, len: usize) -> Lookup {
    let key = CacheKey::new("s3://b/ds", name);
    let version = ObjectVersion::new(format!("\"{name}\""), len as u64);
    cache.get(&key, &version).expect("get")
}

/// Every entry file under the cache directory.
fn entry_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for sub in fs::read_dir(dir.join("entries")).expect("entries dir") {
        for e in fs::read_dir(sub.expect("subdir").path()).expect("read subdir") {
            files.push(e.expect("entry").path());
        }
    }
    files
}

/// Disk bytes of the entry files, rounded up to blocks as the cache counts them.
fn entry_bytes(dir: &Path) -> u64 {
    entry_files(dir)
        .iter()
        .map(|p| fs::metadata(p).expect("stat").len().div_ceil(BLOCK).max(1) * BLOCK)
        .sum()
}

#[test]
fn round_trip_whole_objects_and_ranges() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = open(dir.path(), 16 * MIB, Policy::default());
    let data = body(1, 100_000);
    assert_eq!(get(&cache, "a.jpg", data.len()), Lookup::Miss(Miss::Absent));
    assert_eq!(put(&cache, "a.jpg", &data), Inserted::Stored);
    assert_eq!(get(&cache, "a.jpg", data.len()).hit(), Some(data.clone()));

    let shard = CacheKey::new("s3://b/ds", "shard-0.tar");
    let version = ObjectVersion::new("\"s\"", 1_000_000);
    let block = shard.clone().with_range(4096..8192);
    cache
        .insert(&block, &version, data.slice(..4096))
        .expect("insert range");
    assert_eq!(
        cache.get(&block, &version).expect("get").hit(),
        Some(data.slice(..4096))
    );
    assert_eq!(
        cache.get(&shard, &version).expect("get"),
        Lookup::Miss(Miss::Absent)
    );
    let other = shard.with_range(0..4096);
    assert_eq!(
        cache.get(&other, &version).expect("get"),
        Lookup::Miss(Miss::Absent)
    );

    let s = cache.stats().expect("stats");
    assert_eq!((s.hits, s.misses, s.inserts, s.entries), (2, 3, 2, 2));
    assert_eq!((s.bytes_read, s.bytes_written), (104_096, 104_096));
    assert_eq!(s.size_bytes, entry_bytes(dir.path()));
    let json = serde_json::to_value(&s).expect("serialise");
    assert_eq!(json["hits"], 2);
    assert_eq!(json["capacity_bytes"], 16 * MIB);
}

#[test]
fn a_changed_object_is_a_stale_miss_and_is_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = open(dir.path(), 16 * MIB, Policy::default());
    let key = CacheKey::new("s3://b/ds", "x");
    let v1 = ObjectVersion::new("\"v1\"", 3);
    cache
        .insert(&key, &v1, Bytes::from_static(b"one"))
        .expect("insert");
    let v2 = ObjectVersion::new("\"v2\"", 3);
    assert_eq!(
        cache.get(&key, &v2).expect("get"),
        Lookup::Miss(Miss::Stale)
    );
    assert!(entry_files(dir.path()).is_empty(), "stale entry removed");
    cache
        .insert(&key, &v1, Bytes::from_static(b"one"))
        .expect("insert");
    let resized = ObjectVersion::size_only(4);
    assert_eq!(
        cache.get(&key, &resized).expect("get"),
        Lookup::Miss(Miss::Stale)
    );
    cache
        .insert(&key, &v2, Bytes::from_static(b"two"))
        .expect("insert");
    cache
        .insert(&key, &v2, Bytes::from_static(b"two"))
        .expect("replace");
    assert_eq!(
        cache
            .get(&key, &ObjectVersion::size_only(3))
            .expect("get")
            .hit()
            .as_deref(),
        Some(&b"two"[..])
    );
    let s = cache.stats().expect("stats");
    assert_eq!((s.stale, s.entries, s.size_bytes), (2, 1, BLOCK));
}

/// For each offset, an entry of `data` (alone in the cache) with the bit flipped there is a
/// corrupt miss, and is removed.
fn flips_are_misses(cache: &Cache, dir: &Path, data: &Bytes, offsets: &[usize]) {
    for (i, &offset) in offsets.iter().enumerate() {
        let name = format!("flip{i}");
        put(cache, &name, data);
        let [file] = entry_files(dir).try_into().expect("one entry");
        let mut bytes = fs::read(&file).expect("read entry");
        let at = offset.min(bytes.len() - 1);
        bytes[at] ^= 0x01;
        fs::write(&file, &bytes).expect("damage entry");
        assert_eq!(
            get(cache, &name, data.len()),
            Lookup::Miss(Miss::Corrupt),
            "flip at {offset}"
        );
        assert!(!file.exists(), "corrupt entry removed");
    }
}

#[test]
fn a_corrupt_entry_is_a_miss_and_is_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = open(dir.path(), 16 * MIB, Policy::default());
    let data = body(2, 50_000);
    flips_are_misses(&cache, dir.path(), &data, &[10, 120, 30_000, 50_050]);
    put(&cache, "t", &data);
    let [file] = entry_files(dir.path()).try_into().expect("one entry");
    let f = fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .expect("open");
    f.set_len(20_000).expect("truncate");
    assert_eq!(get(&cache, "t", data.len()), Lookup::Miss(Miss::Corrupt));
    let s = cache.stats().expect("stats");
    assert_eq!((s.corrupt, s.hits, s.entries), (5, 0, 0));
    // The truncated file was uncounted by its length on disk: the total
    // over-counts (the safe direction) until a lone open rebuilds it.
    assert_eq!(s.size_bytes, 8 * BLOCK);
    drop(cache);
    let cache = open(dir.path(), 16 * MIB, Policy::default());
    assert_eq!(cache.stats().expect("stats").size_bytes, 0);
}

/// Entries of a MiB and more are served from a map of their file: checked like any other (a
/// flipped byte is a miss), and a hit outlives its entry being replaced or removed (the map
/// keeps the file it was made from).
#[test]
fn large_entries_are_mapped_checked_and_outlive_their_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = open(dir.path(), 64 * MIB, Policy::default());
    let len = 3 * MIB as usize + 17;
    let data = body(7, len);
    put(&cache, "big", &data);
    let Lookup::Hit(held) = get(&cache, "big", len) else {
        panic!("a hit")
    };
    assert_eq!(held, data);
    // Replaced by other bytes of the same length, then removed: the hit still reads its own.
    let other = body(8, len);
    let key = CacheKey::new("s3://b/ds", "big");
    let version = ObjectVersion::new("\"big\"", len as u64);
    cache
        .insert(&key, &version, other.clone())
        .expect("replace");
    assert_eq!(get(&cache, "big", len), Lookup::Hit(other));
    assert!(cache.remove(&key).expect("remove"));
    assert_eq!(held, data);
    flips_are_misses(
        &cache,
        dir.path(),
        &data,
        &[100, 2 * MIB as usize, len + 50],
    );
}

/// A handle checks an entry's body once, on its first hit, and again whenever the file is not
/// as it was (another size or modification time); another handle (another process) checks
/// every entry on its own first hit, even one damaged with its modification time put back.
#[test]
fn each_handle_checks_an_entry_on_its_first_hit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = body(3, 40_000);
    let writer = open(dir.path(), 16 * MIB, Policy::default());
    put(&writer, "e", &data);
    let reader = open(dir.path(), 16 * MIB, Policy::default());
    assert_eq!(get(&reader, "e", data.len()), Lookup::Hit(data.clone()));
    let [file] = entry_files(dir.path()).try_into().expect("one entry");
    let mtime = fs::metadata(&file)
        .expect("stat")
        .modified()
        .expect("mtime");
    let mut bytes = fs::read(&file).expect("read entry");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    fs::write(&file, &bytes).expect("damage entry");
    let damaged = fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .expect("open");
    damaged.set_modified(mtime).expect("put the time back");
    drop(damaged);
    let fresh = open(dir.path(), 16 * MIB, Policy::default());
    assert_eq!(get(&fresh, "e", data.len()), Lookup::Miss(Miss::Corrupt));
}

#[test]
fn lru_keeps_the_bound_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let capacity = 2 * MIB;
    let cache = open(dir.path(), capacity, Policy::Lru);
    for i in 0..200u64 {
        let data = body(i, 10_000 + (i as usize * 997) % 90_000);
        assert_eq!(put(&cache, &format!("k{i}"), &data), Inserted::Stored);
        let on_disk = entry_bytes(dir.path());
        assert!(
            on_disk <= capacity,
            "{on_disk} bytes on disk after insert {i}"
        );
        assert_eq!(cache.stats().expect("stats").size_bytes, on_disk);
    }
    let s = cache.stats().expect("stats");
    assert!(s.evictions > 100, "{s:?}");
    assert_eq!(s.entries as usize, entry_files(dir.path()).len());
    let last = body(199, 10_000 + (199 * 997) % 90_000);
    assert_eq!(
        get(&cache, "k199", last.len()).hit(),
        Some(last),
        "newest entry kept"
    );
    assert_eq!(
        get(&cache, "k0", 10_000),
        Lookup::Miss(Miss::Absent),
        "oldest evicted"
    );
}

#[test]
fn lru_evicts_the_least_recently_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = open(dir.path(), MIB, Policy::Lru);
    let data = body(3, 200_000); // 49 blocks: five fit in 256 blocks
    for name in ["a", "b", "c", "d", "e"] {
        put(&cache, name, &data);
    }
    assert!(get(&cache, "a", data.len()).hit().is_some());
    put(&cache, "f", &data);
    assert!(
        get(&cache, "a", data.len()).hit().is_some(),
        "a was read recently"
    );
    assert_eq!(get(&cache, "b", data.len()), Lookup::Miss(Miss::Absent));
}

#[test]
fn resident_rejects_when_full_until_entries_idle() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = open(dir.path(), MIB, Policy::default());
    let data = body(4, 200_000);
    cache.begin_epoch("s3://b/ds", 0).expect("epoch");
    for i in 0..5 {
        assert_eq!(put(&cache, &format!("r{i}"), &data), Inserted::Stored);
    }
    assert_eq!(
        put(&cache, "r5", &data),
        Inserted::Rejected(Rejection::Full)
    );
    cache.begin_epoch("s3://b/ds", 1).expect("epoch");
    assert!(get(&cache, "r0", data.len()).hit().is_some());
    assert_eq!(
        put(&cache, "r5", &data),
        Inserted::Rejected(Rejection::Full),
        "all read last epoch"
    );
    cache
        .begin_epoch("s3://b/ds", 1)
        .expect("same epoch from another worker");
    cache.begin_epoch("s3://b/ds", 2).expect("epoch");
    assert_eq!(
        put(&cache, "r5", &data),
        Inserted::Stored,
        "r1..r4 idle for an epoch"
    );
    assert!(
        get(&cache, "r0", data.len()).hit().is_some(),
        "r0 was read in epoch 1"
    );
    cache
        .begin_epoch("s3://other/ds", 0)
        .expect("another dataset");
    for i in 0..5 {
        assert_eq!(put(&cache, &format!("o{i}"), &data), Inserted::Stored);
    }
    assert_eq!(
        put(&cache, "big", &body(5, 2 << 20)),
        Inserted::Rejected(Rejection::TooLarge)
    );
    let s = cache.stats().expect("stats");
    assert_eq!((s.rejected, s.generation), (3, 4));
    assert!(s.size_bytes <= MIB);
}

#[test]
fn a_half_written_temp_file_is_never_served_and_is_cleaned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = body(6, 100_000);
    {
        let cache = open(dir.path(), 16 * MIB, Policy::default());
        put(&cache, "whole", &data);
        let [file] = entry_files(dir.path()).try_into().expect("one entry");
        let name = file
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        // What a writer killed mid-write leaves: a prefix in tmp/.
        let partial = fs::read(&file).expect("read")[..50_000].to_vec();
        fs::remove_file(&file).expect("remove");
        fs::write(
            dir.path().join("tmp").join(format!("{name}.999999.0.tmp")),
            partial,
        )
        .expect("write");
        assert_eq!(get(&cache, "whole", data.len()), Lookup::Miss(Miss::Absent));
    }
    let cache = open(dir.path(), 16 * MIB, Policy::default());
    assert_eq!(
        fs::read_dir(dir.path().join("tmp")).expect("tmp").count(),
        0
    );
    let s = cache.stats().expect("stats");
    assert_eq!(
        (s.temp_removed, s.entries, s.size_bytes),
        (1, 0, 0),
        "accounting rebuilt"
    );
}

#[test]
fn damaged_accounting_is_rebuilt_from_the_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = open(dir.path(), 16 * MIB, Policy::default());
    for i in 0..5 {
        put(&cache, &format!("d{i}"), &body(i, 9_000));
    }
    fs::write(dir.path().join("state"), b"garbage").expect("damage state");
    let s = cache.stats().expect("stats");
    assert_eq!((s.entries, s.size_bytes), (5, 5 * 3 * BLOCK));
    assert!(get(&cache, "d3", 9_000).hit().is_some());
}

#[test]
fn bad_configuration_and_input_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = CacheBuilder::new("", 10)
        .with_policy(Policy::Resident { idle_epochs: 0 })
        .build()
        .expect_err("invalid");
    let Error::InvalidConfig { problems } = &err else {
        panic!("{err}")
    };
    assert_eq!(problems.len(), 3, "{err}");
    let cache = open(dir.path(), 16 * MIB, Policy::default());
    let key = CacheKey::new("s3://b/ds", "x");
    let err = cache
        .insert(
            &key,
            &ObjectVersion::size_only(4),
            Bytes::from_static(b"abc"),
        )
        .expect_err("wrong size");
    assert!(err.to_string().contains("s3://b/ds/x"), "{err}");
    let ranged = key.with_range(2..6);
    let err = cache
        .insert(
            &ranged,
            &ObjectVersion::size_only(5),
            Bytes::from_static(b"abcd"),
        )
        .expect_err("range outside");
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
}

#[test]
fn threads_share_one_handle() {
    let dir = tempfile::tempdir().expect("tempdir");
    let capacity = 2 * MIB;
    let cache = std::sync::Arc::new(open(dir.path(), capacity, Policy::Lru));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let cache = cache.clone();
            std::thread::spawn(move || {
                for round in 0..150u64 {
                    let i = (round * 7 + t * 13) % 60;
                    let data = body(i, 20_000 + (i as usize * 1_237) % 60_000);
                    let name = format!("s{i}");
                    match get(&cache, &name, data.len()).hit() {
                        Some(got) => assert!(got == data, "object {i}"),
                        None => {
                            put(&cache, &name, &data);
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    let s = cache.stats().expect("stats");
    assert_eq!((s.corrupt, s.stale), (0, 0));
    assert!(s.hits > 0 && s.evictions > 0, "{s:?}");
    assert_eq!(s.size_bytes, entry_bytes(dir.path()));
    assert!(s.size_bytes <= capacity);
}

#[test]
fn remove_forgets_an_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = open(dir.path(), 16 * MIB, Policy::default());
    let data = body(8, 5_000);
    put(&cache, "gone", &data);
    let key = CacheKey::new("s3://b/ds", "gone");
    assert!(cache.remove(&key).expect("remove"));
    assert!(!cache.remove(&key).expect("remove again"));
    assert_eq!(get(&cache, "gone", data.len()), Lookup::Miss(Miss::Absent));
    let s = cache.stats().expect("stats");
    assert_eq!((s.entries, s.size_bytes), (0, 0));
}
