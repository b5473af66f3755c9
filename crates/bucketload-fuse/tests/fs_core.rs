//! The file-system core against the embedded S3 server on loopback, without a kernel: listings
//! and their cache, lookups, reads (small, sequential, random), uploads on close, rename,
//! unlink, the manifest, the memory limit and every refusal's errno.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use bucketload_fuse::{Error, Fs, Kind, MountConfig, OpenMode, ROOT, errno};
use bucketload_server::FaultKind;
use bucketload_store::object_store::ObjectStoreExt;
use bucketload_store::object_store::path::Path;
use bucketload_store::{Store, StoreConfig};
use bucketload_test_support::{EmbeddedServer, pattern};
use bytes::Bytes;

const MIB: usize = 1 << 20;

struct Bucket {
    server: EmbeddedServer,
    config: StoreConfig,
    uri: String,
}

impl Bucket {
    async fn new() -> Bucket {
        let server = EmbeddedServer::start().await;
        let bucket = server.bucket().await;
        Bucket {
            config: server.store_config(),
            uri: format!("s3://{bucket}/data"),
            server,
        }
    }

    fn store(&self) -> Store {
        Store::open(&self.uri, &self.config).unwrap()
    }

    async fn put(&self, key: &str, body: Vec<u8>) {
        self.store()
            .object_store()
            .put(&Path::from(key), body.into())
            .await
            .unwrap();
    }

    async fn get(&self, key: &str) -> Option<Bytes> {
        match self.store().object_store().get(&Path::from(key)).await {
            Ok(r) => Some(r.bytes().await.unwrap()),
            Err(bucketload_store::object_store::Error::NotFound { .. }) => None,
            Err(e) => panic!("{e}"),
        }
    }

    async fn fs(&self, config: MountConfig) -> Fs {
        Fs::new(self.store(), config).await.unwrap()
    }

    /// A file system whose store does not retry: an injected fault fails the request.
    async fn fs_without_retries(&self, config: MountConfig) -> Fs {
        let store_config = self.config.clone().with_max_retries(0);
        let store = Store::open(&self.uri, &store_config).unwrap();
        Fs::new(store, config).await.unwrap()
    }
}

fn errno_of<T: std::fmt::Debug>(r: Result<T, Error>) -> i32 {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.errno(),
    }
}

async fn lookup_path(fs: &Fs, path: &str) -> Result<bucketload_fuse::Stat, Error> {
    let mut ino = ROOT;
    let mut stat = fs.getattr(ROOT).await?;
    for name in path.split('/') {
        stat = fs.lookup(ino, name).await?;
        ino = stat.ino;
    }
    Ok(stat)
}

async fn read_all(fs: &Fs, path: &str, chunk: u32) -> Vec<u8> {
    let stat = lookup_path(fs, path).await.unwrap();
    let fh = fs.open(stat.ino, OpenMode::default(), 1).await.unwrap();
    let mut out = Vec::new();
    loop {
        let bytes = fs.read(fh, out.len() as u64, chunk).await.unwrap();
        if bytes.is_empty() {
            break;
        }
        out.extend_from_slice(&bytes);
    }
    fs.release(fh).await.unwrap();
    out
}

async fn write_file(
    fs: &Fs,
    parent: u64,
    name: &str,
    body: &[u8],
    mode: OpenMode,
) -> Result<(), Error> {
    let (_, fh) = fs.create(parent, name, mode, 7).await?;
    for (i, chunk) in body.chunks(MIB).enumerate() {
        fs.write(fh, (i * MIB) as u64, Bytes::copy_from_slice(chunk))
            .await?;
    }
    fs.flush(fh, 7).await?;
    fs.release(fh).await
}

async fn names(fs: &Fs, ino: u64) -> Vec<(String, Kind)> {
    let fh = fs.opendir(ino).await.unwrap();
    let entries = fs.readdir(fh).unwrap();
    fs.releasedir(fh);
    entries.iter().map(|e| (e.name.clone(), e.kind)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_are_cached_for_the_metadata_ttl() {
    let b = Bucket::new().await;
    b.put("a.txt", b"alpha".to_vec()).await;
    b.put("d/b.txt", b"beta".to_vec()).await;
    b.put("d/e/c.txt", b"gamma".to_vec()).await;
    let fs = b
        .fs(MountConfig::default().with_metadata_ttl(Duration::from_secs(3600)))
        .await;
    let lists = || fs.store().metrics().snapshot().requests.list;
    assert_eq!(
        names(&fs, ROOT).await,
        vec![("a.txt".into(), Kind::File), ("d".into(), Kind::Dir)]
    );
    let after_first = lists();
    assert_eq!(after_first, 1, "one LIST with delimiter");
    let d = fs.lookup(ROOT, "d").await.unwrap();
    assert_eq!(d.kind, Kind::Dir);
    assert_eq!(errno_of(fs.lookup(ROOT, "missing").await), errno::ENOENT);
    names(&fs, ROOT).await;
    assert_eq!(lists(), after_first, "the listing is fresh: no request");
    assert_eq!(fs.store().metrics().snapshot().requests.head, 0);
    let a = lookup_path(&fs, "a.txt").await.unwrap();
    assert_eq!((a.kind, a.size), (Kind::File, 5));
    assert_eq!(errno_of(fs.lookup(a.ino, "x").await), errno::ENOTDIR);
    assert_eq!(names(&fs, d.ino).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_without_a_listing_ask_the_store_and_see_new_objects_after_the_ttl() {
    let b = Bucket::new().await;
    b.put("x/y/z.bin", vec![1, 2, 3]).await;
    let fs = b
        .fs(MountConfig::default().with_metadata_ttl(Duration::ZERO))
        .await;
    let z = lookup_path(&fs, "x/y/z.bin").await.unwrap();
    assert_eq!((z.kind, z.size), (Kind::File, 3));
    assert_eq!(lookup_path(&fs, "x/y").await.unwrap().kind, Kind::Dir);
    assert_eq!(errno_of(lookup_path(&fs, "x/nope").await), errno::ENOENT);
    b.put("x/new.bin", vec![9; 10]).await;
    assert_eq!(lookup_path(&fs, "x/new.bin").await.unwrap().size, 10);
    // Changed behind the mount: with a zero TTL the next getattr sees it.
    b.put("x/new.bin", vec![9; 20]).await;
    let ino = lookup_path(&fs, "x/new.bin").await.unwrap().ino;
    assert_eq!(fs.getattr(ino).await.unwrap().size, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_large_and_random_reads_return_the_object_bytes() {
    let b = Bucket::new().await;
    let small = pattern(300_000, 1);
    let large = pattern(21 * MIB + 12345, 2);
    b.put("small.bin", small.clone()).await;
    b.put("large.bin", large.clone()).await;
    let fs = b.fs(MountConfig::default()).await;
    assert_eq!(read_all(&fs, "small.bin", 128 * 1024).await, small);
    let gets_before = fs.store().metrics().snapshot().requests;
    assert_eq!(read_all(&fs, "large.bin", 128 * 1024).await, large);
    let gets = fs.store().metrics().snapshot().requests;
    let large_gets = gets.get + gets.ranged_get - gets_before.get - gets_before.ranged_get;
    // 1, 2, 4, 8, 8, ... MiB: far fewer requests than the 170 kernel-sized reads.
    assert!(large_gets <= 8, "{large_gets} GETs for 21 MiB");

    // Random reads, and reads slightly out of order (the kernel's parallel readahead).
    let stat = lookup_path(&fs, "large.bin").await.unwrap();
    let fh = fs.open(stat.ino, OpenMode::default(), 1).await.unwrap();
    for (offset, len) in [
        (20 * MIB, 4096),
        (3, 10),
        (5 * MIB, 131072),
        (5 * MIB + 262144, 131072),
        (5 * MIB + 131072, 131072),
        (large.len() - 100, 4096),
    ] {
        let got = fs.read(fh, offset as u64, len).await.unwrap();
        let end = large.len().min(offset + len as usize);
        assert_eq!(got, large[offset..end], "read at {offset}");
    }
    assert!(
        fs.read(fh, large.len() as u64 + 10, 10)
            .await
            .unwrap()
            .is_empty()
    );
    fs.release(fh).await.unwrap();
    assert_eq!(fs.memory_available(), bucketload_fuse::DEFAULT_MEMORY_LIMIT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_cache_serves_a_second_read_and_is_validated_by_etag() {
    let b = Bucket::new().await;
    b.put("c.bin", pattern(70_000, 3)).await;
    let dir = tempfile::tempdir().unwrap();
    let cache = bucketload::loader::CacheBuilder::new(dir.path(), 64 << 20)
        .with_policy(bucketload_cache::Policy::Lru)
        .build()
        .unwrap();
    let cache = std::sync::Arc::new(cache);
    let config = MountConfig::default()
        .with_metadata_ttl(Duration::ZERO)
        .with_cache(cache.clone());
    let fs = b.fs(config).await;
    // Fs::new looked for a manifest with one GET.
    let base = fs.store().metrics().snapshot().requests.get;
    let gets = |fs: &Fs| fs.store().metrics().snapshot().requests.get - base;
    assert_eq!(read_all(&fs, "c.bin", 65536).await, pattern(70_000, 3));
    assert_eq!(gets(&fs), 1);
    assert_eq!(read_all(&fs, "c.bin", 65536).await, pattern(70_000, 3));
    assert_eq!(gets(&fs), 1, "the second read came from the disk cache");
    // Same size, other bytes: a new ETag, so the cached entry is not trusted.
    b.put("c.bin", pattern(70_000, 4)).await;
    assert_eq!(read_all(&fs, "c.bin", 65536).await, pattern(70_000, 4));
    assert_eq!(gets(&fs), 2);
    assert!(cache.stats().unwrap().stale >= 1);

    // A large object is cached in part-sized blocks as it is read sequentially.
    let large = pattern(12 * MIB + 5, 5);
    b.put("large.bin", large.clone()).await;
    let ranged = |fs: &Fs| fs.store().metrics().snapshot().requests.ranged_get;
    let before = ranged(&fs);
    assert_eq!(read_all(&fs, "large.bin", 128 * 1024).await, large);
    assert_eq!(ranged(&fs) - before, 2, "two 8 MiB blocks");
    assert_eq!(read_all(&fs, "large.bin", 128 * 1024).await, large);
    assert_eq!(
        ranged(&fs) - before,
        2,
        "the second read came from the disk cache"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_file_becomes_visible_only_when_closed() {
    let b = Bucket::new().await;
    let fs = b.fs(MountConfig::default().with_part_size(5 << 20)).await;
    let body = pattern(12 * MIB + 7, 5);
    let (stat, fh) = fs
        .create(ROOT, "ckpt.pt", OpenMode::default(), 42)
        .await
        .unwrap();
    assert!(stat.writing);
    for (i, chunk) in body.chunks(MIB).enumerate() {
        fs.write(fh, (i * MIB) as u64, Bytes::copy_from_slice(chunk))
            .await
            .unwrap();
    }
    assert_eq!(fs.getattr(stat.ino).await.unwrap().size, body.len() as u64);
    assert!(b.get("ckpt.pt").await.is_none(), "no object before close");
    assert_eq!(
        errno_of(fs.open(stat.ino, OpenMode::default(), 1).await),
        errno::EBUSY
    );
    // A flush from another process (a forked child closing its copy) does not complete it.
    fs.flush(fh, 43).await.unwrap();
    assert!(b.get("ckpt.pt").await.is_none());
    fs.flush(fh, 42).await.unwrap();
    assert_eq!(b.get("ckpt.pt").await.unwrap(), body);
    assert_eq!(
        errno_of(
            fs.write(fh, body.len() as u64, Bytes::from_static(b"x"))
                .await
        ),
        errno::EBADF
    );
    fs.release(fh).await.unwrap();
    let m = fs.store().metrics().snapshot().requests;
    assert_eq!((m.multipart_create, m.multipart_complete), (1, 1));
    assert!(!fs.getattr(stat.ino).await.unwrap().writing);
    assert_eq!(read_all(&fs, "ckpt.pt", 1 << 20).await, body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_writes_fail_at_once_with_their_errno() {
    let b = Bucket::new().await;
    b.put("old.bin", vec![1; 100]).await;
    let fs = b.fs(MountConfig::default()).await;
    let old = fs.lookup(ROOT, "old.bin").await.unwrap();
    let write = OpenMode {
        write: true,
        ..OpenMode::default()
    };
    let trunc = OpenMode {
        write: true,
        truncate: true,
        append: false,
    };
    let append = OpenMode {
        write: true,
        truncate: false,
        append: true,
    };
    // Modifying in place replaces the object too; appending is not supported.
    assert_eq!(errno_of(fs.open(old.ino, write, 1).await), errno::EPERM);
    assert_eq!(errno_of(fs.open(old.ino, append, 1).await), errno::ENOTSUP);
    assert_eq!(errno_of(fs.open(old.ino, trunc, 1).await), errno::EPERM);
    assert_eq!(errno_of(fs.unlink(ROOT, "old.bin").await), errno::EPERM);
    assert_eq!(
        errno_of(fs.truncate(old.ino, 5, None).await),
        errno::ENOTSUP
    );
    // Out-of-order writes: `a_refused_write_or_resize_makes_no_object`.
    let d = fs.mkdir(ROOT, "dir").await.unwrap();
    assert_eq!(errno_of(fs.mkdir(ROOT, "dir").await), errno::EEXIST);
    assert_eq!(
        errno_of(fs.rename(ROOT, "dir", ROOT, "dir2", false).await),
        errno::EXDEV
    );
    write_file(&fs, d.ino, "f", b"in dir", OpenMode::default())
        .await
        .unwrap();
    assert_eq!(errno_of(fs.rmdir(ROOT, "dir").await), errno::ENOTEMPTY);
    assert_eq!(b.get("dir/f").await.unwrap(), "in dir");

    let ro = b.fs(MountConfig::default().with_read_only(true)).await;
    assert_eq!(
        errno_of(ro.create(ROOT, "n", OpenMode::default(), 1).await),
        errno::EROFS
    );
    assert_eq!(errno_of(ro.mkdir(ROOT, "n").await), errno::EROFS);
    let ro_old = ro.lookup(ROOT, "old.bin").await.unwrap();
    assert_eq!(errno_of(ro.open(ro_old.ino, trunc, 1).await), errno::EROFS);
    assert_eq!(errno_of(ro.unlink(ROOT, "old.bin").await), errno::EROFS);
    assert_eq!(
        errno_of(ro.rename(ROOT, "old.bin", ROOT, "new.bin", false).await),
        errno::EROFS
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwrite_and_delete_when_the_flags_allow() {
    let b = Bucket::new().await;
    b.put("w.bin", vec![1; 100]).await;
    let fs = b
        .fs(MountConfig::default()
            .with_allow_overwrite(true)
            .with_allow_delete(true))
        .await;
    let w = fs.lookup(ROOT, "w.bin").await.unwrap();
    let trunc = OpenMode {
        write: true,
        truncate: true,
        append: false,
    };
    let fh = fs.open(w.ino, trunc, 3).await.unwrap();
    fs.write(fh, 0, Bytes::from_static(b"new")).await.unwrap();
    assert_eq!(
        b.get("w.bin").await.unwrap().len(),
        100,
        "the old object until close"
    );
    fs.flush(fh, 3).await.unwrap();
    fs.release(fh).await.unwrap();
    assert_eq!(b.get("w.bin").await.unwrap(), "new");
    fs.unlink(ROOT, "w.bin").await.unwrap();
    assert!(b.get("w.bin").await.is_none());
    assert_eq!(errno_of(fs.lookup(ROOT, "w.bin").await), errno::ENOENT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_of_a_closed_file_is_copy_then_delete() {
    let b = Bucket::new().await;
    let fs = b.fs(MountConfig::default()).await;
    let body = pattern(3 * MIB, 9);
    write_file(&fs, ROOT, "model.pt.tmp", &body, OpenMode::default())
        .await
        .unwrap();
    let d = fs.mkdir(ROOT, "final").await.unwrap();
    fs.rename(ROOT, "model.pt.tmp", d.ino, "model.pt", false)
        .await
        .unwrap();
    assert!(b.get("model.pt.tmp").await.is_none());
    assert_eq!(b.get("final/model.pt").await.unwrap(), body);
    assert_eq!(
        errno_of(fs.lookup(ROOT, "model.pt.tmp").await),
        errno::ENOENT
    );
    assert_eq!(read_all(&fs, "final/model.pt", 1 << 20).await, body);
    // Onto an existing file: refused without --allow-overwrite, and with RENAME_NOREPLACE.
    write_file(&fs, ROOT, "other", b"x", OpenMode::default())
        .await
        .unwrap();
    assert_eq!(
        errno_of(fs.rename(ROOT, "other", d.ino, "model.pt", false).await),
        errno::EPERM
    );
    assert_eq!(
        errno_of(fs.rename(ROOT, "other", d.ino, "model.pt", true).await),
        errno::EEXIST
    );
    assert_eq!(
        errno_of(fs.rename(ROOT, "absent", d.ino, "x", false).await),
        errno::ENOENT
    );
    // A file still being written is not renamed.
    let (_, fh) = fs
        .create(ROOT, "open.tmp", OpenMode::default(), 1)
        .await
        .unwrap();
    assert_eq!(
        errno_of(fs.rename(ROOT, "open.tmp", ROOT, "open", false).await),
        errno::EBUSY
    );
    fs.release(fh).await.unwrap();
    let fs = b
        .fs(MountConfig::default().with_allow_overwrite(true))
        .await;
    fs.rename(ROOT, "other", ROOT, "open.tmp", false)
        .await
        .unwrap();
    assert_eq!(b.get("open.tmp").await.unwrap(), "x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_serves_listings_without_list_requests() {
    let b = Bucket::new().await;
    let files = [
        ("cat/0001.jpg", 10u64),
        ("cat/0002.jpg", 20),
        ("dog/0003.jpg", 30),
    ];
    for (key, size) in files {
        b.put(key, vec![7; size as usize]).await;
    }
    let manifest = serde_json_manifest(&files);
    b.put("_bucketload/manifest.json", manifest.into_bytes())
        .await;
    let fs = b
        .fs(MountConfig::default().with_metadata_ttl(Duration::ZERO))
        .await;
    assert!(fs.uses_manifest());
    let root = names(&fs, ROOT).await;
    assert_eq!(
        root.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["_bucketload", "cat", "dog"]
    );
    let cat = fs.lookup(ROOT, "cat").await.unwrap();
    assert_eq!(names(&fs, cat.ino).await.len(), 2);
    assert_eq!(
        errno_of(fs.lookup(cat.ino, "0009.jpg").await),
        errno::ENOENT
    );
    assert_eq!(read_all(&fs, "dog/0003.jpg", 4096).await, vec![7; 30]);
    let m = fs.store().metrics().snapshot().requests;
    assert_eq!(
        (m.list, m.head),
        (0, 0),
        "names and sizes came from the manifest"
    );
}

fn serde_json_manifest(files: &[(&str, u64)]) -> String {
    let entries: Vec<String> = files
        .iter()
        .map(|(k, s)| format!(r#"{{"key": "{k}", "size": {s}}}"#))
        .collect();
    let total: u64 = files.iter().map(|(_, s)| s).sum();
    format!(
        r#"{{"format_version": 1, "kind": "files", "parameters": {{"source": "test",
        "label_policy": "folder", "tool_version": "test", "created": "2026-11-23T00:00:00Z"}},
        "samples": {}, "bytes": {total}, "classes": [], "files": [{}]}}"#,
        files.len(),
        entries.join(",")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_is_bounded_across_handles() {
    let b = Bucket::new().await;
    let large = pattern(24 * MIB, 6);
    b.put("big.bin", large.clone()).await;
    let limit = 12u64 << 20;
    let config = MountConfig::default()
        .with_part_size(5 << 20)
        .with_memory_limit(limit)
        .with_memory_wait(Duration::ZERO);
    let fs = b.fs(config).await;
    // A writer takes two parts (10 MiB) of the 12 MiB.
    let (_, w) = fs.create(ROOT, "w1", OpenMode::default(), 1).await.unwrap();
    assert!(fs.memory_available() <= limit - (10 << 20));
    // A second writer cannot get two parts: ENOMEM at once (no wait configured).
    assert_eq!(
        errno_of(fs.create(ROOT, "w2", OpenMode::default(), 1).await),
        errno::ENOMEM
    );
    assert_eq!(
        errno_of(fs.lookup(ROOT, "w2").await),
        errno::ENOENT,
        "no trace of w2"
    );
    // Readers of a large file still work, without a prefetch window, within the limit.
    let stat = fs.lookup(ROOT, "big.bin").await.unwrap();
    let r = fs.open(stat.ino, OpenMode::default(), 1).await.unwrap();
    let mut got = Vec::new();
    while got.len() < large.len() {
        let chunk = fs.read(r, got.len() as u64, 1 << 20).await.unwrap();
        got.extend_from_slice(&chunk);
    }
    assert_eq!(got, large);
    fs.release(r).await.unwrap();
    fs.release(w).await.unwrap();
    assert_eq!(fs.memory_available(), limit);
}

/// The same operations on moto's independent S3 implementation: multipart upload completed on
/// close, listing, lookup, ranged reads, rename by copy and delete, delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_renames_and_reads_on_moto() {
    let moto = bucketload_test_support::MotoServer::start();
    let bucket = moto.bucket().await;
    let store = Store::open(&format!("s3://{bucket}/m"), &moto.store_config()).unwrap();
    let config = MountConfig::default()
        .with_part_size(5 << 20)
        .with_allow_delete(true);
    let fs = Fs::new(store.clone(), config).await.unwrap();
    let body = pattern(11 * MIB + 3, 8);
    let d = fs.mkdir(ROOT, "ckpt").await.unwrap();
    write_file(&fs, d.ino, "step.tmp", &body, OpenMode::default())
        .await
        .unwrap();
    fs.rename(d.ino, "step.tmp", d.ino, "step.pt", false)
        .await
        .unwrap();
    let os = store.object_store();
    let got = os.get(&Path::from("ckpt/step.pt")).await.unwrap();
    assert_eq!(got.bytes().await.unwrap(), body);
    assert!(os.head(&Path::from("ckpt/step.tmp")).await.is_err());
    let fresh = Fs::new(store.clone(), MountConfig::default())
        .await
        .unwrap();
    assert_eq!(names(&fresh, ROOT).await, vec![("ckpt".into(), Kind::Dir)]);
    assert_eq!(read_all(&fresh, "ckpt/step.pt", 128 * 1024).await, body);
    fs.unlink(d.ino, "step.pt").await.unwrap();
    assert!(os.head(&Path::from("ckpt/step.pt")).await.is_err());
}

const TRUNC: OpenMode = OpenMode {
    write: true,
    truncate: true,
    append: false,
};

/// The process id FUSE reports for the shell in the sequences below.
const SHELL: u32 = 4242;

async fn write_all(fs: &Fs, fh: u64, at: u64, body: &[u8], chunk: usize) -> Result<(), Error> {
    for (i, piece) in body.chunks(chunk).enumerate() {
        let offset = at + (i * chunk) as u64;
        fs.write(fh, offset, Bytes::copy_from_slice(piece)).await?;
    }
    Ok(())
}

/// The requests the kernel sends for `echo new > y.txt`: bash opens the file with `O_TRUNC`,
/// `dup2`s it onto its stdout and closes the original descriptor (a flush before any write),
/// echo writes, bash restores its stdout (a flush after the write), the release follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_redirection_uploads_exactly_the_bytes_written() {
    let b = Bucket::new().await;
    b.put("y.txt", b"old content\n".to_vec()).await;
    let fs = b
        .fs(MountConfig::default().with_allow_overwrite(true))
        .await;
    let y = fs.lookup(ROOT, "y.txt").await.unwrap();
    let fh = fs.open(y.ino, TRUNC, SHELL).await.unwrap();
    fs.flush(fh, SHELL).await.unwrap();
    assert_eq!(
        b.get("y.txt").await.unwrap(),
        "old content\n",
        "a close before any write replaces nothing"
    );
    fs.write(fh, 0, Bytes::from_static(b"new\n")).await.unwrap();
    fs.flush(fh, SHELL).await.unwrap();
    assert_eq!(b.get("y.txt").await.unwrap(), "new\n", "complete at close");
    fs.release(fh).await.unwrap();
    assert_eq!(b.get("y.txt").await.unwrap(), "new\n");
    assert_eq!(read_all(&fs, "y.txt", 4096).await, b"new\n");

    // `echo hello > x.txt`: a new file, the same sequence through create.
    let (_, fh) = fs.create(ROOT, "x.txt", TRUNC, SHELL).await.unwrap();
    fs.flush(fh, SHELL).await.unwrap();
    assert!(b.get("x.txt").await.is_none(), "no empty object");
    fs.write(fh, 0, Bytes::from_static(b"hello\n"))
        .await
        .unwrap();
    fs.flush(fh, SHELL).await.unwrap();
    assert_eq!(b.get("x.txt").await.unwrap(), "hello\n");
    fs.release(fh).await.unwrap();

    // `exec 3>log; echo a >&3; echo b >&3; exec 3>&-`: every echo's restore of stdout closes
    // a descriptor after a write; the second write continues the same file.
    let (_, fh) = fs.create(ROOT, "log", TRUNC, SHELL).await.unwrap();
    fs.flush(fh, SHELL).await.unwrap();
    fs.write(fh, 0, Bytes::from_static(b"a\n")).await.unwrap();
    fs.flush(fh, SHELL).await.unwrap();
    assert_eq!(b.get("log").await.unwrap(), "a\n");
    fs.write(fh, 2, Bytes::from_static(b"b\n")).await.unwrap();
    fs.flush(fh, SHELL).await.unwrap();
    assert_eq!(b.get("log").await.unwrap(), "a\nb\n");
    fs.flush(fh, SHELL).await.unwrap();
    fs.release(fh).await.unwrap();
    assert_eq!(b.get("log").await.unwrap(), "a\nb\n");
    assert_eq!(read_all(&fs, "log", 4096).await, b"a\nb\n");

    // `: > empty`: nothing written; the release (last close) makes the empty object.
    let (_, fh) = fs.create(ROOT, "empty", TRUNC, SHELL).await.unwrap();
    fs.flush(fh, SHELL).await.unwrap();
    assert!(b.get("empty").await.is_none());
    fs.release(fh).await.unwrap();
    assert_eq!(b.get("empty").await.unwrap(), "");
    assert_eq!(fs.open_handles(), 0);
}

/// `dd if=big of=g` opens its output, `dup2`s it onto descriptor 1 and closes the original
/// before writing (coreutils' `fd_reopen`); `conv=fsync` adds an fsync before the close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dd_sequences_upload_every_byte() {
    let b = Bucket::new().await;
    let fs = b.fs(MountConfig::default().with_part_size(5 << 20)).await;
    let body = pattern(12 * MIB + 3, 7);
    let (_, fh) = fs.create(ROOT, "g", TRUNC, SHELL).await.unwrap();
    fs.flush(fh, SHELL).await.unwrap();
    write_all(&fs, fh, 0, &body, MIB).await.unwrap();
    assert!(b.get("g").await.is_none(), "no object before close");
    fs.flush(fh, SHELL).await.unwrap();
    assert_eq!(b.get("g").await.unwrap(), body);
    fs.release(fh).await.unwrap();

    // dd's default 512-byte blocks, with conv=fsync.
    let small = pattern(5 * MIB + 1000, 8);
    let (_, fh) = fs.create(ROOT, "h", TRUNC, SHELL).await.unwrap();
    fs.flush(fh, SHELL).await.unwrap();
    write_all(&fs, fh, 0, &small, 512).await.unwrap();
    fs.fsync(fh).await.unwrap();
    assert_eq!(b.get("h").await.unwrap(), small, "durable after fsync");
    fs.flush(fh, SHELL).await.unwrap();
    fs.release(fh).await.unwrap();
    assert_eq!(b.get("h").await.unwrap(), small);
    assert_eq!(read_all(&fs, "h", 1 << 20).await, small);
}

/// The thread id of the calling thread, from /proc/thread-self (`PID/task/TID`).
fn thread_id() -> u32 {
    let link = std::fs::read_link("/proc/thread-self").unwrap();
    link.file_name().unwrap().to_str().unwrap().parse().unwrap()
}

/// FUSE reports the thread that calls `close`: a program that opens a file on one thread and
/// closes it on another still has its upload completed, and the error returned, by close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_on_another_thread_of_the_process_completes_the_upload() {
    let b = Bucket::new().await;
    let fs = b.fs(MountConfig::default()).await;
    let opener = std::process::id();
    // The closing thread lives until the flush is done (FUSE asks while close() waits).
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        tid_tx.send(thread_id()).unwrap();
        let _ = done_rx.recv();
    });
    let closer = tid_rx.recv().unwrap();
    assert_ne!(opener, closer);
    let (_, fh) = fs.create(ROOT, "t.bin", TRUNC, opener).await.unwrap();
    fs.write(fh, 0, Bytes::from_static(b"threads"))
        .await
        .unwrap();
    fs.flush(fh, closer).await.unwrap();
    assert_eq!(b.get("t.bin").await.unwrap(), "threads");
    fs.release(fh).await.unwrap();
    done_tx.send(()).unwrap();
    thread.join().unwrap();
}

/// A store failure mid-upload: the write (or the close) fails with EIO, no object is made, and
/// the name is left as the store has it: a new file disappears, a replaced file shows the old
/// object again, readable, and either can be written again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_upload_leaves_the_name_as_the_store_has_it() {
    let b = Bucket::new().await;
    let old = pattern(3 * MIB, 1);
    b.put("x.bin", old.clone()).await;
    // One part in flight (the memory limit leaves room for two parts only), so a failed part
    // is seen by the next write.
    let config = MountConfig::default()
        .with_allow_overwrite(true)
        .with_part_size(5 << 20)
        .with_memory_limit(10 << 20)
        .with_memory_wait(Duration::ZERO);
    let fs = b.fs_without_retries(config).await;
    let faults = b.server.faults();
    let body = pattern(16 * MIB, 2);

    // A part fails while the program writes; it closes without another word (release only).
    let x = fs.lookup(ROOT, "x.bin").await.unwrap();
    faults.fail_next("UploadPart", 1, FaultKind::Status(500));
    let fh = fs.open(x.ino, TRUNC, SHELL).await.unwrap();
    let failed = write_all(&fs, fh, 0, &body, MIB).await;
    assert_eq!(errno_of(failed), errno::EIO);
    assert_old_is_back(&b, &fs, x.ino, &old).await;
    assert_eq!(errno_of(fs.flush(fh, SHELL).await), errno::EIO);
    assert_eq!(errno_of(fs.release(fh).await), errno::EIO);
    assert_old_is_back(&b, &fs, x.ino, &old).await;

    // The completion fails: close returns EIO.
    faults.fail_next("CompleteMultipartUpload", 1, FaultKind::Status(500));
    let fh = fs.open(x.ino, TRUNC, SHELL).await.unwrap();
    write_all(&fs, fh, 0, &body, MIB).await.unwrap();
    assert_eq!(errno_of(fs.flush(fh, SHELL).await), errno::EIO);
    assert_old_is_back(&b, &fs, x.ino, &old).await;
    assert_eq!(errno_of(fs.release(fh).await), errno::EIO);

    // A small file is one PUT at close; it fails on release (no flush by the opener).
    faults.fail_next("PutObject", 1, FaultKind::Status(500));
    let fh = fs.open(x.ino, TRUNC, SHELL).await.unwrap();
    fs.write(fh, 0, Bytes::from_static(b"short")).await.unwrap();
    assert_eq!(errno_of(fs.release(fh).await), errno::EIO);
    assert_old_is_back(&b, &fs, x.ino, &old).await;

    // The name can be written again.
    let fh = fs.open(x.ino, TRUNC, SHELL).await.unwrap();
    write_all(&fs, fh, 0, &body, MIB).await.unwrap();
    fs.flush(fh, SHELL).await.unwrap();
    fs.release(fh).await.unwrap();
    assert_eq!(b.get("x.bin").await.unwrap(), body);

    // A new file whose upload fails disappears, and can be created again.
    faults.fail_next("UploadPart", 1, FaultKind::Status(500));
    let (_, fh) = fs.create(ROOT, "n.bin", TRUNC, SHELL).await.unwrap();
    assert_eq!(
        errno_of(write_all(&fs, fh, 0, &body, MIB).await),
        errno::EIO
    );
    assert_eq!(errno_of(fs.lookup(ROOT, "n.bin").await), errno::ENOENT);
    assert!(!names(&fs, ROOT).await.iter().any(|(n, _)| n == "n.bin"));
    assert_eq!(errno_of(fs.release(fh).await), errno::EIO);
    assert!(b.get("n.bin").await.is_none());
    write_file(&fs, ROOT, "n.bin", b"second try", TRUNC)
        .await
        .unwrap();
    assert_eq!(b.get("n.bin").await.unwrap(), "second try");
    assert_eq!(fs.memory_available(), 10 << 20);
}

async fn assert_old_is_back(b: &Bucket, fs: &Fs, ino: u64, old: &[u8]) {
    assert_eq!(
        b.get("x.bin").await.unwrap(),
        old,
        "the old object is intact"
    );
    let stat = fs.getattr(ino).await.unwrap();
    assert!(!stat.writing, "the failed file is no longer being written");
    assert_eq!(stat.size, old.len() as u64);
    assert_eq!(
        fs.lookup(ROOT, "x.bin").await.unwrap().size,
        old.len() as u64
    );
    assert_eq!(read_all(fs, "x.bin", 1 << 20).await, old);
}

/// A write or resize the mount refuses leaves the file unfinishable: closing it makes no
/// object (no truncated one), and close says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_or_resize_makes_no_object() {
    let b = Bucket::new().await;
    b.put("keep.bin", b"keep".to_vec()).await;
    let part = 5 * MIB;
    let fs = b
        .fs(MountConfig::default()
            .with_allow_overwrite(true)
            .with_part_size(part as u64))
        .await;
    // Past one part, the file is an upload and must be written in order.
    let (_, fh) = fs.create(ROOT, "seq.bin", TRUNC, SHELL).await.unwrap();
    write_all(&fs, fh, 0, &pattern(part + 3, 1), MIB)
        .await
        .unwrap();
    assert_eq!(
        errno_of(fs.write(fh, 10, Bytes::from_static(b"z")).await),
        errno::EINVAL
    );
    assert_eq!(errno_of(fs.flush(fh, SHELL).await), errno::EIO);
    assert_eq!(errno_of(fs.release(fh).await), errno::EIO);
    assert!(b.get("seq.bin").await.is_none(), "no truncated object");
    assert_eq!(errno_of(fs.lookup(ROOT, "seq.bin").await), errno::ENOENT);

    // An ftruncate of the open file past one part, which it cannot hold.
    let keep = fs.lookup(ROOT, "keep.bin").await.unwrap();
    let fh = fs.open(keep.ino, TRUNC, SHELL).await.unwrap();
    assert_eq!(
        errno_of(fs.truncate(keep.ino, part as u64 + 1, Some(fh)).await),
        errno::ENOTSUP
    );
    fs.flush(fh, SHELL).await.unwrap_err();
    fs.release(fh).await.unwrap_err();
    assert_eq!(b.get("keep.bin").await.unwrap(), "keep", "not emptied");
    assert_eq!(read_all(&fs, "keep.bin", 4096).await, b"keep");
}

/// Unmounting with files still open for writing aborts their uploads: no object appears, the old
/// one stays, and no incomplete multipart upload is left in the bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmount_aborts_the_uploads_of_files_still_open() {
    let b = Bucket::new().await;
    b.put("old.pt", pattern(1000, 1)).await;
    let fs = b
        .fs(MountConfig::default()
            .with_part_size(5 << 20)
            .with_allow_overwrite(true))
        .await;
    let body = pattern(12 * MIB, 6);
    let (_, new) = fs
        .create(ROOT, "new.pt", OpenMode::default(), 42)
        .await
        .unwrap();
    let old = lookup_path(&fs, "old.pt").await.unwrap();
    let replace = OpenMode {
        write: true,
        truncate: true,
        append: false,
    };
    let over = fs.open(old.ino, replace, 42).await.unwrap();
    for fh in [new, over] {
        write_all(&fs, fh, 0, &body, MIB).await.unwrap();
    }
    assert_eq!(b.store().list_uploads("").await.unwrap().len(), 2);
    fs.shutdown().await;
    assert!(b.store().list_uploads("").await.unwrap().is_empty());
    assert!(b.get("new.pt").await.is_none());
    assert_eq!(b.get("old.pt").await.unwrap(), pattern(1000, 1));
    assert_eq!(fs.open_handles(), 0);
}

/// Folder markers are directories, and a key or folder with an empty segment (`a//b`, which
/// S3 and moto store but object_store cannot address) is not shown, instead of failing the
/// listing of its directory. The keys are written by boto3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn folder_markers_are_directories_and_empty_segments_are_hidden() {
    let moto = bucketload_test_support::MotoServer::start();
    let bucket = moto.bucket().await;
    let keys = [
        "data/",
        "data/a/",
        "data/a/x.jpg",
        "data/odd//y.jpg",
        "data/empty/",
    ];
    let script = "import boto3, sys\n\
                  s3 = boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1', \
                  aws_access_key_id='testing', aws_secret_access_key='testing')\n\
                  for k in sys.argv[3:]: s3.put_object(Bucket=sys.argv[2], Key=k, Body=b'')\n";
    let args = [moto.endpoint(), bucket.as_str()]
        .into_iter()
        .chain(keys.iter().copied());
    bucketload_test_support::run_python(script, args);
    let store = Store::open(&format!("s3://{bucket}/data"), &moto.store_config()).unwrap();
    let fs = Fs::new(store, MountConfig::default()).await.unwrap();
    let mut root = names(&fs, ROOT).await;
    root.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        root,
        [
            ("a".to_string(), Kind::Dir),
            ("empty".to_string(), Kind::Dir),
            ("odd".to_string(), Kind::Dir)
        ]
    );
    let a = fs.lookup(ROOT, "a").await.unwrap();
    assert_eq!(names(&fs, a.ino).await, [("x.jpg".to_string(), Kind::File)]);
    let odd = fs.lookup(ROOT, "odd").await.unwrap();
    assert_eq!(names(&fs, odd.ino).await, []);
    let empty = fs.lookup(ROOT, "empty").await.unwrap();
    assert_eq!(names(&fs, empty.ino).await, []);
}

/// A file opened for writing without `O_TRUNC` (vim's save, `dd conv=notrunc`, `truncate -s`)
/// starts from the object: it is written at any offset, resized and read back in memory, and
/// uploaded whole when closed; closed unwritten, it is not uploaded at all. Objects over one
/// part are refused with `ENOTSUP` and stay as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_opened_without_o_trunc_is_modified_in_place() {
    let b = Bucket::new().await;
    b.put("f.txt", b"one\ntwo\nfoo\n".to_vec()).await;
    b.put("big.bin", pattern(5 * MIB + 1, 3)).await;
    let fs = b
        .fs(MountConfig::default()
            .with_allow_overwrite(true)
            .with_part_size(5 << 20))
        .await;
    let rdwr = OpenMode {
        write: true,
        ..OpenMode::default()
    };
    let f = fs.lookup(ROOT, "f.txt").await.unwrap();
    let fh = fs.open(f.ino, rdwr, SHELL).await.unwrap();
    assert_eq!(fs.read(fh, 4, 3).await.unwrap(), "two");
    fs.write(fh, 4, Bytes::from_static(b"TWO")).await.unwrap();
    fs.write(fh, 0, Bytes::from_static(b"0ne")).await.unwrap();
    assert_eq!(fs.truncate(f.ino, 8, Some(fh)).await.unwrap().size, 8);
    assert_eq!(
        b.get("f.txt").await.unwrap(),
        "one\ntwo\nfoo\n",
        "not before close"
    );
    fs.fsync(fh).await.unwrap();
    assert_eq!(b.get("f.txt").await.unwrap(), "0ne\nTWO\n");
    // Resized after the fsync uploaded it: the close uploads it again.
    assert_eq!(fs.truncate(f.ino, 4, Some(fh)).await.unwrap().size, 4);
    fs.write(fh, 4, Bytes::from_static(b"2\n")).await.unwrap();
    fs.flush(fh, SHELL).await.unwrap();
    fs.release(fh).await.unwrap();
    assert_eq!(b.get("f.txt").await.unwrap(), "0ne\n2\n");
    assert_eq!(read_all(&fs, "f.txt", 4096).await, b"0ne\n2\n");

    // Opened and closed without a write (`touch`): nothing is uploaded.
    let puts = || fs.store().metrics().snapshot().requests.put;
    let before = puts();
    let fh = fs.open(f.ino, rdwr, SHELL).await.unwrap();
    fs.flush(fh, SHELL).await.unwrap();
    fs.release(fh).await.unwrap();
    assert_eq!(puts(), before);

    // Over one part: opened (`touch`), but not written or appended to; emptied first
    // (`truncate -s 0`), it is written anew.
    let big = fs.lookup(ROOT, "big.bin").await.unwrap();
    let append = OpenMode {
        append: true,
        ..rdwr
    };
    assert_eq!(
        errno_of(fs.open(big.ino, append, SHELL).await),
        errno::ENOTSUP
    );
    let fh = fs.open(big.ino, rdwr, SHELL).await.unwrap();
    let write = fs.write(fh, 0, Bytes::from_static(b"x")).await;
    assert_eq!(errno_of(write), errno::ENOTSUP);
    fs.flush(fh, SHELL).await.unwrap();
    fs.release(fh).await.unwrap();
    assert_eq!(b.get("big.bin").await.unwrap(), pattern(5 * MIB + 1, 3));
    assert_eq!(puts(), before, "nothing uploaded");
    let fh = fs.open(big.ino, rdwr, SHELL).await.unwrap();
    assert_eq!(fs.truncate(big.ino, 0, Some(fh)).await.unwrap().size, 0);
    fs.write(fh, 0, Bytes::from_static(b"small")).await.unwrap();
    fs.flush(fh, SHELL).await.unwrap();
    fs.release(fh).await.unwrap();
    assert_eq!(b.get("big.bin").await.unwrap(), "small");
}

/// A file deleted while it is open for writing (`touch f && rm f`, a temporary file, vim's
/// swap probe) is gone at once and makes no object: later writes and closes succeed and
/// upload nothing. A replacement deleted while open deletes the old object too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_deleted_while_open_for_writing_makes_no_object() {
    let b = Bucket::new().await;
    b.put("old.bin", b"old".to_vec()).await;
    let fs = b
        .fs(MountConfig::default()
            .with_allow_delete(true)
            .with_allow_overwrite(true))
        .await;
    let (_, fh) = fs.create(ROOT, "new.tmp", TRUNC, SHELL).await.unwrap();
    fs.flush(fh, SHELL).await.unwrap();
    fs.unlink(ROOT, "new.tmp").await.unwrap();
    assert_eq!(errno_of(fs.lookup(ROOT, "new.tmp").await), errno::ENOENT);
    fs.write(fh, 0, Bytes::from_static(b"gone")).await.unwrap();
    fs.flush(fh, SHELL).await.unwrap();
    fs.release(fh).await.unwrap();
    assert!(b.get("new.tmp").await.is_none());

    let old = fs.lookup(ROOT, "old.bin").await.unwrap();
    let fh = fs.open(old.ino, TRUNC, SHELL).await.unwrap();
    fs.write(fh, 0, Bytes::from_static(b"new")).await.unwrap();
    fs.unlink(ROOT, "old.bin").await.unwrap();
    fs.release(fh).await.unwrap();
    assert!(b.get("old.bin").await.is_none());
    assert!(b.store().list_uploads("").await.unwrap().is_empty());
    assert_eq!(names(&fs, ROOT).await, []);
    assert_eq!(fs.open_handles(), 0);

    // Without --allow-delete: a new file deletes nothing in the store, so it goes; a
    // replacement would delete the object, so it is refused and its upload goes on.
    b.put("kept.bin", b"kept".to_vec()).await;
    let fs = b
        .fs(MountConfig::default().with_allow_overwrite(true))
        .await;
    let (_, fh) = fs.create(ROOT, "probe.swx", TRUNC, SHELL).await.unwrap();
    fs.unlink(ROOT, "probe.swx").await.unwrap();
    fs.release(fh).await.unwrap();
    assert!(b.get("probe.swx").await.is_none());
    let kept = fs.lookup(ROOT, "kept.bin").await.unwrap();
    let fh = fs.open(kept.ino, TRUNC, SHELL).await.unwrap();
    fs.write(fh, 0, Bytes::from_static(b"new")).await.unwrap();
    assert_eq!(errno_of(fs.unlink(ROOT, "kept.bin").await), errno::EPERM);
    fs.release(fh).await.unwrap();
    assert_eq!(b.get("kept.bin").await.unwrap(), "new");
}

/// `rmdir` deletes the directory's folder marker, so it does not come back; a directory
/// emptied through the mount stays until `rmdir` (as on a disk), though no key is under it.
/// The keys are written and checked by boto3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmdir_deletes_the_folder_marker_and_emptied_directories_stay_until_removed() {
    let moto = bucketload_test_support::MotoServer::start();
    let bucket = moto.bucket().await;
    let boto3 = "import boto3, sys\n\
                 s3 = boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1', \
                 aws_access_key_id='testing', aws_secret_access_key='testing')\n";
    let put = format!(
        "{boto3}for k in sys.argv[3:]: s3.put_object(Bucket=sys.argv[2], Key=k, Body=b'')\n"
    );
    let keys = ["data/m/", "data/d/sub/x"];
    let args = [moto.endpoint(), bucket.as_str()];
    bucketload_test_support::run_python(&put, args.into_iter().chain(keys));
    let store = Store::open(&format!("s3://{bucket}/data"), &moto.store_config()).unwrap();
    let config = MountConfig::default().with_metadata_ttl(Duration::ZERO);
    let no_delete = Fs::new(store.clone(), config.clone()).await.unwrap();
    assert_eq!(errno_of(no_delete.rmdir(ROOT, "m").await), errno::EPERM);
    let fs = Fs::new(store, config.with_allow_delete(true))
        .await
        .unwrap();
    fs.rmdir(ROOT, "m").await.unwrap();
    let d = fs.lookup(ROOT, "d").await.unwrap();
    let sub = fs.lookup(d.ino, "sub").await.unwrap();
    fs.unlink(sub.ino, "x").await.unwrap();
    assert_eq!(names(&fs, ROOT).await, [("d".to_string(), Kind::Dir)]);
    assert_eq!(names(&fs, d.ino).await, [("sub".to_string(), Kind::Dir)]);
    fs.rmdir(d.ino, "sub").await.unwrap();
    fs.rmdir(ROOT, "d").await.unwrap();
    assert_eq!(names(&fs, ROOT).await, []);
    let list =
        format!("{boto3}print(s3.list_objects_v2(Bucket=sys.argv[2]).get('KeyCount'), end='')\n");
    assert_eq!(bucketload_test_support::run_python(&list, args), "0");
}
