//! One files catalog per node: the [`FilesTable`] of a dataset version written once to a file,
//! and mapped read-only by every process that opens the same version (ranks, DataLoader workers
//! started by fork or spawn), so its pages are in memory once.
//!
//! A file is named by a digest of what identifies the catalog: the store URI of the dataset,
//! the manifest object's ETag, size and modification time, and [`LAYOUT_VERSION`]. A new
//! manifest is a new name; the old file ages out. It lives in, first found:
//!
//! 1. `$BUCKETLOAD_CATALOG_DIR`;
//! 2. `catalogs/` in the loader's disk cache directory (not counted against its capacity);
//! 3. `/dev/shm/bucketload-$UID/` (memory, not disk; made mode 0700 and used only when it is the
//!    user's own and no one else can write to it), else the same under the temporary directory.
//!
//! The first process to open a version takes `NAME.lock` (flock: the others wait, then map what
//! it wrote) and builds the table straight into a temporary file of the directory (so the
//! builder holds the table once, as that file's pages, not also in a growing buffer); once
//! written whole it is mapped, checked and renamed into place. A builder killed midway leaves a
//! temporary file that no reader opens (they open only the final name); one whose build fails
//! removes it. A file is checked whole before use (its header, its length, the CRC32C of its body, its identity):
//! a damaged one is removed and rebuilt, never used. Files are never changed in place (a map
//! keeps reading the inode it was made from, even once it is replaced or removed).
//!
//! Clean-up: each opening touches the file it uses; files unused for [`STALE_AFTER`] and
//! temporary files older than [`TMP_STALE_AFTER`] (a writer that crashed) are removed by the
//! next loader that opens a catalog in the directory. Any failure to share (a full or
//! read-only directory) falls back to a catalog of this process alone, with a warning.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use super::files_table::{
    FilesTable, FilesTableBuilder, Finished, Identity, LAYOUT_VERSION, TableBytes, TempFile,
};

/// Catalog files not opened for this long are removed (a training job opens its dataset at
/// least once per run; a day keeps the files of jobs that are restarted).
pub(crate) const STALE_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Temporary files of writers older than this are left over from a crash: writing even a
/// 10⁹-entry catalog takes seconds.
pub(crate) const TMP_STALE_AFTER: Duration = Duration::from_secs(3600);

/// Environment variable naming the directory of shared catalogs.
pub const CATALOG_DIR_ENV: &str = "BUCKETLOAD_CATALOG_DIR";

/// Extension of catalog files.
const EXT: &str = "files";

/// The shared file of one catalog version.
#[derive(Debug, Clone)]
pub(crate) struct SharedCatalog {
    dir: PathBuf,
    identity: Identity,
    path: PathBuf,
}

/// What names a manifest version: its ETag, size and modification time.
#[derive(Debug, Clone)]
pub(crate) struct ManifestVersion {
    pub(crate) etag: Option<String>,
    pub(crate) size: u64,
    pub(crate) modified_ns: i64,
}

/// The build lock of one catalog version, released when dropped.
#[derive(Debug)]
pub(crate) struct BuildLock(#[allow(dead_code)] File);

impl SharedCatalog {
    /// The shared file of the catalog of `store_uri` read from the manifest `version`, in the
    /// directory for a loader with the cache directory `cache_dir`; `None` when no directory
    /// can be used (warned).
    pub(crate) fn new(
        store_uri: &str,
        version: &ManifestVersion,
        cache_dir: Option<&Path>,
    ) -> Option<SharedCatalog> {
        let dir = directory(cache_dir)?;
        let identity = identity(store_uri, version);
        let name = format!("{}.{EXT}", hex::encode(&identity[..16]));
        clean(&dir);
        Some(SharedCatalog {
            path: dir.join(name),
            dir,
            identity,
        })
    }

    /// The digest a table of this version carries in its header.
    pub(crate) fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The file's path.
    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The catalog file, mapped and checked; `None` when there is none or it is damaged (then
    /// it is removed, with a warning, to be rebuilt).
    pub(crate) fn find(&self) -> Option<FilesTable> {
        let file = match File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "loader: cannot open the shared catalog; building one for this process");
                return None;
            }
        };
        let checked = map(&file)
            .map_err(|e| e.to_string())
            .and_then(|m| FilesTable::from_bytes(TableBytes::Mapped(m), &self.identity));
        match checked {
            Ok(table) => {
                touch(&self.path);
                Some(table)
            }
            Err(why) => {
                tracing::warn!(path = %self.path.display(), %why, "loader: shared catalog damaged, so it is removed and rebuilt");
                let _ = fs::remove_file(&self.path);
                None
            }
        }
    }

    /// Waits for the lock that lets one process of the node build this catalog.
    pub(crate) async fn lock(&self) -> Option<BuildLock> {
        let path = self.path.with_extension("lock");
        let locked = tokio::task::spawn_blocking(move || {
            let file = File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)?;
            file.lock()?;
            Ok::<_, io::Error>(file)
        })
        .await;
        match locked {
            Ok(Ok(file)) => Some(BuildLock(file)),
            Ok(Err(e)) => {
                tracing::warn!(path = %self.path.display(), error = %e, "loader: cannot lock the shared catalog; building it without waiting for other processes");
                None
            }
            Err(_) => None,
        }
    }

    /// A builder that writes this catalog into a temporary file of the directory as it goes
    /// (hand it to [`publish_built`](Self::publish_built)); one in memory when no file can be
    /// made (warned).
    pub(crate) fn builder(&self) -> FilesTableBuilder {
        let tmp = self.temp_path();
        match create_private(&tmp) {
            Ok(file) => FilesTableBuilder::to_file(TempFile::new(file, tmp)),
            Err(e) => {
                tracing::warn!(path = %tmp.display(), error = %e, "loader: cannot write the shared catalog; this process builds its own in memory");
                FilesTableBuilder::default()
            }
        }
    }

    /// The table `builder` (from [`builder`](Self::builder)) made: its file mapped, checked
    /// whole and renamed into place; kept by this process alone when that fails (warned).
    /// `Err` when the table was lost (its file failed and could not be read back).
    pub(crate) fn publish_built(&self, builder: FilesTableBuilder) -> io::Result<FilesTable> {
        let temp = match builder.finish(&self.identity)? {
            Finished::Memory(table) => return Ok(self.publish(table)),
            Finished::Written(temp) => temp,
        };
        let table = map(&temp.file).and_then(|m| {
            FilesTable::from_bytes(TableBytes::Mapped(m), &self.identity).map_err(|why| {
                io::Error::other(format!(
                    "{} as written does not check: {why}",
                    temp.path.display()
                ))
            })
        })?;
        match fs::rename(&temp.path, &self.path) {
            Ok(()) => temp.keep(),
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "loader: cannot rename the shared catalog into place; this process keeps its own");
            }
        }
        Ok(table)
    }

    /// A temporary file's name, unique to this process and call.
    fn temp_path(&self) -> PathBuf {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        self.dir.join(format!(
            ".{}.{}.{}.tmp",
            self.path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or(EXT),
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ))
    }

    /// Writes `table` to the shared file and returns the file's map; `table` itself when it
    /// cannot be shared (warned).
    pub(crate) fn publish(&self, table: FilesTable) -> FilesTable {
        let written = self.write(table.as_bytes()).and_then(|()| {
            let file = File::open(&self.path)?;
            let mapped = map(&file)?;
            FilesTable::from_bytes(TableBytes::Mapped(mapped), &self.identity)
                .map_err(io::Error::other)
        });
        match written {
            Ok(shared) => shared,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "loader: cannot write the shared catalog; this process keeps its own");
                table
            }
        }
    }

    /// `bytes` to a temporary file, renamed into place.
    fn write(&self, bytes: &[u8]) -> io::Result<()> {
        let tmp = self.temp_path();
        let written = (|| {
            let mut file = create_private(&tmp)?;
            file.write_all(bytes)?;
            file.flush()?;
            fs::rename(&tmp, &self.path)
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written
    }
}

fn create_private(path: &Path) -> io::Result<File> {
    let mut options = File::options();
    // Readable too: a builder's file is mapped once written.
    options.read(true).write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// Maps the whole of `file`, read-only.
#[allow(unsafe_code)]
fn map(file: &File) -> io::Result<memmap2::Mmap> {
    // SAFETY: catalog files are never modified in place (written whole to a temporary file and
    // renamed, removed by unlink), so the mapped bytes do not change under the map. A file
    // truncated in place by something else could fault a reader; docs/LOADER.md says not to.
    unsafe { memmap2::Mmap::map(file) }
}

/// Marks `path` as used now (for [`clean`]).
fn touch(path: &Path) {
    if let Ok(file) = File::options().write(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// The digest that names a catalog.
fn identity(store_uri: &str, version: &ManifestVersion) -> Identity {
    let mut h = Sha256::new();
    h.update(b"bucketload files catalog\0");
    h.update(LAYOUT_VERSION.to_le_bytes());
    for part in [store_uri, version.etag.as_deref().unwrap_or("")] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.update(version.size.to_le_bytes());
    h.update(version.modified_ns.to_le_bytes());
    h.finalize().into()
}

/// The directory of shared catalogs (made if missing); `None` when none can be used.
fn directory(cache_dir: Option<&Path>) -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(CATALOG_DIR_ENV).filter(|d| !d.is_empty()) {
        return made(PathBuf::from(dir), false);
    }
    if let Some(cache) = cache_dir {
        return made(cache.join("catalogs"), false);
    }
    let name = format!("bucketload-{}", user_id());
    let shm = Path::new("/dev/shm");
    let base = match shm.is_dir() {
        true => shm.to_path_buf(),
        false => std::env::temp_dir(),
    };
    made(base.join(name), true)
}

/// `dir`, made if missing; with `private`, only when it is this user's own and no one else can
/// write to it (a shared temporary directory could hold another user's planted files).
fn made(dir: PathBuf, private: bool) -> Option<PathBuf> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    if private {
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    }
    if let Err(e) = builder.create(&dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "loader: cannot make the directory of shared catalogs; each process builds its own");
        return None;
    }
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::MetadataExt;
        let meta = fs::symlink_metadata(&dir).ok()?;
        if !meta.is_dir() || meta.uid() != user_id() || meta.mode() & 0o022 != 0 {
            tracing::warn!(dir = %dir.display(), "loader: the directory of shared catalogs is not this user's own or others can write to it; each process builds its own");
            return None;
        }
    }
    Some(dir)
}

/// This process's user id (that of `/proc/self`; 0 where there is none).
fn user_id() -> u32 {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let Ok(meta) = fs::metadata("/proc/self") {
            return meta.uid();
        }
    }
    0
}

/// Removes catalog and lock files unused for [`STALE_AFTER`] and temporary files older than
/// [`TMP_STALE_AFTER`]. A process that still maps a removed file keeps reading it.
fn clean(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let limit = if name.ends_with(".tmp") {
            TMP_STALE_AFTER
        } else if name.ends_with(&format!(".{EXT}")) || name.ends_with(".lock") {
            STALE_AFTER
        } else {
            continue;
        };
        let age = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|m| now.duration_since(m).ok());
        if age.is_some_and(|age| age > limit) {
            tracing::debug!(path = %path.display(), "loader: removing an unused shared catalog file");
            let _ = fs::remove_file(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::files_table::FilesTableBuilder;

    fn version(etag: &str) -> ManifestVersion {
        ManifestVersion {
            etag: Some(etag.to_owned()),
            size: 10,
            modified_ns: 1,
        }
    }

    fn table(identity: &Identity) -> FilesTable {
        let mut b = FilesTableBuilder::default();
        b.push("a/1.jpg", 3, Some("e"), None);
        b.push("b/2.jpg", 4, None, Some(7));
        b.finish_in_memory(identity)
    }

    #[test]
    fn identities_differ_by_dataset_and_manifest_version() {
        let ids = [
            identity("s3://b/x", &version("e1")),
            identity("s3://b/y", &version("e1")),
            identity("s3://b/x", &version("e2")),
            identity(
                "s3://b/x",
                &ManifestVersion {
                    size: 11,
                    ..version("e1")
                },
            ),
        ];
        let unique: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
    }

    #[tokio::test]
    async fn a_published_catalog_is_found_mapped_and_a_damaged_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let shared = SharedCatalog::new("s3://b/x", &version("e1"), Some(dir.path())).unwrap();
        assert!(shared.find().is_none());
        let _lock = shared.lock().await.unwrap();
        let published = shared.publish(table(shared.identity()));
        assert!(published.is_mapped());
        let found = shared.find().unwrap();
        assert!(found.is_mapped());
        assert_eq!(
            found.iter().collect::<Vec<_>>(),
            published.iter().collect::<Vec<_>>()
        );
        // One flipped byte: removed, not used.
        let mut bytes = fs::read(shared.path()).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(shared.path(), &bytes).unwrap();
        assert!(shared.find().is_none());
        assert!(!shared.path().exists());
        // A catalog of another version under this name is not used either.
        let other = table(&identity("s3://b/x", &version("e2")));
        fs::write(shared.path(), other.as_bytes()).unwrap();
        assert!(shared.find().is_none());
        // Truncated.
        let whole = table(shared.identity());
        fs::write(
            shared.path(),
            &whole.as_bytes()[..whole.as_bytes().len() - 3],
        )
        .unwrap();
        assert!(shared.find().is_none());
    }

    /// Entries enough to pass the spill threshold several times (about 3 MB of table).
    fn push_many(b: &mut FilesTableBuilder, n: u64) {
        for i in 0..n {
            let key = format!("train/class_{:03}/sample_{i:07}.jpg", i / 1000);
            let etag = format!("{:032x}", u128::from(i) * 0x9e37_79b9_7f4a_7c15);
            b.push(&key, 100_000 + i % 40_000, Some(&etag), Some(i as u32));
        }
    }

    /// Temporary files in the directory of shared catalogs of the cache directory `cache`.
    fn temp_files(cache: &Path) -> Vec<String> {
        fs::read_dir(cache.join("catalogs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[tokio::test]
    async fn a_catalog_built_into_its_file_is_the_table_built_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let shared = SharedCatalog::new("s3://b/x", &version("e1"), Some(dir.path())).unwrap();
        let mut in_file = shared.builder();
        let mut in_memory = FilesTableBuilder::default();
        push_many(&mut in_file, 200_000);
        push_many(&mut in_memory, 200_000);
        assert!(!temp_files(dir.path()).is_empty(), "written as it is built");
        let published = shared.publish_built(in_file).unwrap();
        let expected = in_memory.finish_in_memory(shared.identity());
        assert!(published.is_mapped());
        assert_eq!(published.as_bytes(), expected.as_bytes());
        assert_eq!(fs::read(shared.path()).unwrap(), expected.as_bytes());
        assert!(temp_files(dir.path()).is_empty());
        assert_eq!(shared.find().unwrap().get(123_456), expected.get(123_456));
    }

    #[test]
    fn a_build_cut_short_leaves_nothing_that_is_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let shared = SharedCatalog::new("s3://b/x", &version("e1"), Some(dir.path())).unwrap();
        // A build that fails (the manifest's GET breaks): its file is removed.
        let mut failed = shared.builder();
        push_many(&mut failed, 100_000);
        drop(failed);
        assert!(temp_files(dir.path()).is_empty());
        // A builder killed midway (nothing of it runs again): its file stays, unread.
        let mut killed = shared.builder();
        push_many(&mut killed, 100_000);
        std::mem::forget(killed);
        let left = temp_files(dir.path());
        assert_eq!(left.len(), 1);
        assert!(
            shared.find().is_none(),
            "a temporary file is never the catalog"
        );
        // The next process builds it anew, whole.
        let mut again = shared.builder();
        push_many(&mut again, 1_000);
        let table = shared.publish_built(again).unwrap();
        assert_eq!(table.len(), 1_000);
        assert_eq!(shared.find().unwrap().len(), 1_000);
        // The killed builder's file ages out.
        let old = SystemTime::now() - TMP_STALE_AFTER - Duration::from_secs(60);
        let f = File::options()
            .write(true)
            .open(dir.path().join("catalogs").join(&left[0]))
            .unwrap();
        f.set_modified(old).unwrap();
        clean(&dir.path().join("catalogs"));
        assert!(temp_files(dir.path()).is_empty());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_builder_whose_file_fills_up_goes_on_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let shared = SharedCatalog::new("s3://b/x", &version("e1"), Some(dir.path())).unwrap();
        // Every write to /dev/full fails with ENOSPC, as a full /dev/shm would.
        let full = File::options()
            .read(true)
            .write(true)
            .open("/dev/full")
            .unwrap();
        let mut b = FilesTableBuilder::to_file(TempFile::new(full, dir.path().join("gone.tmp")));
        let mut in_memory = FilesTableBuilder::default();
        push_many(&mut b, 100_000);
        push_many(&mut in_memory, 100_000);
        let table = shared.publish_built(b).unwrap();
        let expected = in_memory.finish_in_memory(shared.identity());
        assert_eq!(table.as_bytes(), expected.as_bytes());
    }

    #[test]
    fn stale_files_are_cleaned_and_fresh_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let old = SystemTime::now() - STALE_AFTER - Duration::from_secs(60);
        let names = [
            "old.files",
            "old.lock",
            ".x.files.1.tmp",
            "fresh.files",
            "other",
        ];
        for name in names {
            fs::write(dir.path().join(name), b"x").unwrap();
        }
        for name in ["old.files", "old.lock", ".x.files.1.tmp", "other"] {
            let f = File::options()
                .write(true)
                .open(dir.path().join(name))
                .unwrap();
            f.set_modified(old).unwrap();
        }
        clean(dir.path());
        let left: Vec<bool> = names.iter().map(|n| dir.path().join(n).exists()).collect();
        assert_eq!(left, [false, false, false, true, true]);
    }
}
