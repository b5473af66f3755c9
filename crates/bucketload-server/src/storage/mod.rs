//! On-disk storage of buckets and objects.
//!
//! Layout under the root directory:
//!
//! ```text
//! <bucket>/<key path>                     object bytes; key segments are directories
//! .bucketload/meta/<bucket>/<key path>    sidecar JSON: ETag, size, mtime, content type, user metadata
//! .bucketload/folders/<bucket>/<md5>      folder markers (keys ending in '/'), named by the key's MD5
//! .bucketload/folder-meta/<bucket>/<md5>  their sidecars
//! .bucketload/uploads/<bucket>/<id>/      multipart uploads in progress: upload.json, and per part
//!                                         a record and its bytes, in a file of its own or in
//!                                         its slot of the upload's assembly file (`assembly`)
//! .bucketload/versions/<bucket>/<md5>/<seq>-<version id>[.json]
//!                                         noncurrent versions and delete markers of the key whose
//!                                         MD5 names the directory (see `versions`); buckets that
//!                                         never had versioning have none
//! .bucketload/bucket-config/<bucket>.json bucket settings, among them the versioning state
//! .bucketload/tmp/                        files being written, renamed into place when complete
//! .bucketload/trash/                      files replaced or deleted, removed in the background
//! ```
//!
//! Every S3 key has a place. The key path ([`keys`]) is the key itself for ordinary keys, so
//! a bucket looks like the files it holds and a directory of files can be served as it is;
//! segments that cannot be file names (empty as in `a//b`, `.`, `..`, over 255 bytes) are
//! escaped behind the reserved prefix `.bl%`. A key that is also a prefix of other keys
//! (object `a` beside `a/b`) keeps its bytes inside its directory as `a/.bl%self`: when the
//! deeper key arrives, the file moves into a new directory in one atomic swap, under the
//! commit lock, and a reader that misses the object during a move looks again once it is
//! over ([`Storage::settled`]). Sidecars mirror the data files' paths, so they move with them
//! (`place.rs`: making directories, moving, pruning).
//!
//! On a versioned bucket the current version of a key stays at its key path, its sidecar
//! naming its version ID, so reads and listings of current objects are the same as without
//! versioning. A write that replaces a version first hard-links it into the versions directory,
//! so readers of the key's path see the old file or the new one, never none; a delete links it
//! there, then removes the path.
//!
//! Bucket names cannot start with '.', so the internal directory never shows as a bucket, and
//! sidecars live outside the bucket directories, so they never show in listings. A folder
//! marker `a/b/` (the S3 console's "Create folder") cannot be a file at `<bucket>/a/b/`, so
//! its bytes live apart and the directory `<bucket>/a/b` is kept while the marker exists; the
//! listing emits the marker when it enters that directory. A sidecar
//! records the inode, size and mtime of the data file it describes, and a reader takes it only
//! for the very file it opened: a write that lands between a reader's open and its read of the
//! sidecar sends the reader to open the object again under the commit lock
//! ([`Storage::open_settled`]), so an answer never mixes two versions. When the file was
//! replaced behind the server's back, the ETag is computed again from the bytes.
//! Writes and deletes change the tree under one lock (`commits`); reads take no lock.
//! Every function here is blocking; the S3 layer calls them on Tokio's blocking pool.

mod append;
mod assembly;
mod bucket_config;
mod cleanup;
mod dirs;
mod keys;
mod list;
mod multipart;
mod place;
mod versions;

use crate::lanes::BodyMd5;
pub(crate) use assembly::PartWriter;
use cleanup::Reaper;
pub use cleanup::Reclaimed;
pub(crate) use cleanup::{LockError, RootLock, lock_root, reclaim};
pub(crate) use list::{ListItem, ListQuery};
pub(crate) use multipart::CompletedPart;
pub(crate) use versions::{Deleted, NULL_VERSION, VersionItem, VersionQuery, Versioning};

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use md5::{Digest, Md5};
use s3s::{S3Error, S3ErrorCode, s3_error};
use serde::{Deserialize, Serialize};

/// Name of the directory holding sidecars, uploads and temporary files.
const INTERNAL_DIR: &str = ".bucketload";
/// Sidecars kept in memory (about 200 bytes each); the cache is emptied when full.
const MAX_CACHED_SIDECARS: usize = 200_000;
/// Longest path the system calls take, with its terminating NUL (Linux `PATH_MAX`).
const PATH_MAX: usize = 4096;

/// What the server remembers about an object besides its bytes.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct ObjectMeta {
    /// ETag without quotes: MD5 hex, or MD5-of-MD5s + "-N" for multipart objects.
    pub(crate) etag: String,
    pub(crate) size: u64,
    /// Modification time of the data file, nanoseconds since the Unix epoch.
    pub(crate) mtime_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) content_type: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) metadata: BTreeMap<String, String>,
    /// Sizes of the parts of an object made by a multipart upload, in order (GET and HEAD
    /// with `partNumber`); empty for an object written whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) parts: Vec<u64>,
    /// The standard headers stored with the object (`cache-control`, `content-disposition`,
    /// `content-encoding`, `content-language`, `expires`), by lower-case name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) headers: BTreeMap<String, String>,
    /// The object's checksum (`x-amz-checksum-*`), when it was written with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) checksum: Option<Box<crate::checksum::Stored>>,
    /// The object's tags (`x-amz-tagging`, PutObjectTagging).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) tags: BTreeMap<String, String>,
    /// The version ID, for an object written to a bucket with versioning enabled or
    /// suspended (`null`); `None` for one written while versioning was never enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) version_id: Option<String>,
    /// The inode of the data file this record describes, so a reader takes a record only for
    /// the very file it opened (see [`Storage::describe`]); 0 in records of earlier versions.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) inode: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Where a current object is: its data file, its sidecar, and the key of its cached sidecar.
type Located = (PathBuf, PathBuf, PathBuf);

/// What one look of [`Storage::open_settled`] found.
enum Settled {
    /// The object opened with its record, or none.
    Done(Option<(File, fs::Metadata, ObjectMeta)>),
    /// An opened file without a valid record, to hash; its record is stored when true.
    Hash(File, fs::Metadata, Located, bool),
    /// The record names another file: another server sharing the root may be writing.
    Elsewhere,
}

/// Looks [`Storage::open_settled`] takes on a shared root before answering from the bytes:
/// another server's write places its file and writes its record microseconds apart.
const SHARED_SETTLE_ATTEMPTS: usize = 1000;

impl ObjectMeta {
    pub(crate) fn last_modified(&self) -> SystemTime {
        UNIX_EPOCH + std::time::Duration::from_nanos(self.mtime_ns)
    }
}

/// Content type and user metadata given when an object is written.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct ObjectAttrs {
    pub(crate) content_type: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
    /// Part sizes, for an object a multipart upload completes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) parts: Vec<u64>,
    /// Standard headers stored with the object (see [`ObjectMeta::headers`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) headers: BTreeMap<String, String>,
    /// The object's checksum (see [`ObjectMeta::checksum`]). For a multipart upload in
    /// progress: the algorithm and type it declared, with an empty value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) checksum: Option<Box<crate::checksum::Stored>>,
    /// Tags (see [`ObjectMeta::tags`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) tags: BTreeMap<String, String>,
}

/// What must hold of the object a write replaces for the write to take effect: S3's
/// conditional writes (`If-None-Match: *`, `If-Match: "<etag>"`). Checked and committed
/// under one lock, so of concurrent conditional creates of one key exactly one succeeds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Precondition {
    /// Write whatever is there.
    #[default]
    None,
    /// `If-None-Match: *`: only if no object has the key.
    Absent,
    /// `If-Match`: only if the object has this ETag (`*`: any object).
    Matches(String),
}

impl Precondition {
    fn check(&self, current: Result<ObjectMeta, S3Error>) -> Result<(), S3Error> {
        let failed = || {
            s3_error!(
                PreconditionFailed,
                "At least one of the pre-conditions you specified did not hold"
            )
        };
        match (self, current) {
            (Self::None, _) => Ok(()),
            (Self::Absent, Ok(_)) => Err(failed()),
            (Self::Absent, Err(e)) if *e.code() == S3ErrorCode::NoSuchKey => Ok(()),
            (Self::Matches(_), Err(e)) | (Self::Absent, Err(e)) => Err(e),
            (Self::Matches(tag), Ok(meta)) => {
                let tag = tag.trim_matches('"');
                if tag == "*" || tag == meta.etag {
                    Ok(())
                } else {
                    Err(failed())
                }
            }
        }
    }
}

thread_local! {
    /// True while this thread holds [`Storage`]'s commit lock.
    static HOLDS_COMMITS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The commit lock, held; marks the thread as its holder until dropped.
struct CommitGuard<'a>(#[allow(dead_code)] std::sync::MutexGuard<'a, ()>);

impl Drop for CommitGuard<'_> {
    fn drop(&mut self) {
        HOLDS_COMMITS.set(false);
    }
}

/// The directory tree holding every bucket.
#[derive(Debug)]
pub(crate) struct Storage {
    root: PathBuf,
    fsync: bool,
    unique: AtomicU64,
    /// Sidecars by the key's path (a folder marker's: its data path), checked against the
    /// data file's size and mtime before use.
    cache: Mutex<HashMap<PathBuf, ObjectMeta>>,
    /// Sorted listings of directories, kept between the pages of a listing (see `dirs`).
    listings: dirs::DirCache,
    /// Held while the tree changes: a write checks the object it replaces and takes its
    /// place, a delete removes an object and prunes its directories, versions are archived,
    /// promoted or removed.
    commits: Mutex<()>,
    /// Odd while an object's file moves into a directory ([`Storage::file_into_dir`]);
    /// incremented before and after each move.
    moves: AtomicU64,
    /// Versioning state by bucket, loaded from the bucket's settings on first use.
    versioning: Mutex<HashMap<String, Versioning>>,
    /// The last sequence number given to an archived version (see the `versions` module).
    seq: AtomicU64,
    /// Removes what is moved into the trash.
    reaper: Reaper,
    /// Hashes the bodies being written, many at once.
    lanes: std::sync::Arc<crate::lanes::Lanes>,
    /// Other servers may write into the root at the same time (see [`Storage::shared`]).
    shared: bool,
}

impl Storage {
    /// Opens (creating if needed) the data directory.
    pub(crate) fn open(root: &Path, fsync: bool) -> io::Result<Self> {
        fs::create_dir_all(root.join(INTERNAL_DIR).join("tmp"))?;
        fs::create_dir_all(root.join(INTERNAL_DIR).join("trash"))?;
        Ok(Self {
            root: root.to_path_buf(),
            fsync,
            unique: AtomicU64::new(0),
            cache: Mutex::new(HashMap::new()),
            listings: dirs::DirCache::default(),
            commits: Mutex::new(()),
            moves: AtomicU64::new(0),
            versioning: Mutex::new(HashMap::new()),
            seq: AtomicU64::new(0),
            reaper: Reaper::start(),
            lanes: std::sync::Arc::default(),
            shared: false,
        })
    }

    /// Marks the root as shared with other servers (`with_shared_root`), whose writes this
    /// server's commit lock does not hold back.
    pub(crate) fn shared(mut self, shared: bool) -> Self {
        self.shared = shared;
        self
    }

    /// Takes the commit lock. A guard per thread: a function that settles what it reads under
    /// the lock ([`Storage::open_settled`]) may be called by one that already holds it.
    fn lock_commits(&self) -> CommitGuard<'_> {
        let guard = self.commits.lock().unwrap_or_else(PoisonError::into_inner);
        HOLDS_COMMITS.set(true);
        CommitGuard(guard)
    }

    /// [`Storage::lock_commits`] unless this thread holds the lock already.
    fn lock_commits_once(&self) -> Option<CommitGuard<'_>> {
        (!HOLDS_COMMITS.get()).then(|| self.lock_commits())
    }

    fn internal(&self, area: &str, bucket: &str) -> PathBuf {
        self.root.join(INTERNAL_DIR).join(area).join(bucket)
    }

    /// A fresh path in the temporary directory (same file system as the data, so rename works).
    fn temp_path(&self) -> PathBuf {
        let n = self.unique.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = format!("{}-{nanos:x}-{n}", std::process::id());
        self.root.join(INTERNAL_DIR).join("tmp").join(name)
    }

    /// Moves `path` (a file or a directory) into the trash, to be removed in the background;
    /// removes it at once when it cannot be moved. A missing path is not an error.
    fn discard(&self, path: &Path) -> io::Result<()> {
        let trash = self
            .root
            .join(INTERNAL_DIR)
            .join("trash")
            .join(self.temp_path().file_name().unwrap_or_default());
        match fs::rename(path, &trash) {
            Ok(()) => {
                self.reaper.remove(trash);
                Ok(())
            }
            Err(e) if is_missing(&e) => Ok(()),
            Err(_) if path.is_dir() => fs::remove_dir_all(path),
            Err(_) => fs::remove_file(path),
        }
    }

    /// Puts the new file `from` in the place of the file at `to` in one step, and the old
    /// one in the trash; false when `to` is no file, or the file system cannot swap.
    ///
    /// A plain rename over an existing file makes ext4 allocate the new file's blocks first
    /// (`auto_da_alloc`: about half a second per GiB here) and free the old one's; a swap
    /// (`RENAME_EXCHANGE`) does neither, and the old file is then removed in the background.
    /// Readers of `to` find the old file or the new one at every moment either way.
    fn swap_in(&self, from: &Path, to: &Path) -> bool {
        if !fs::symlink_metadata(to).is_ok_and(|m| m.is_file()) {
            return false;
        }
        #[cfg(target_os = "linux")]
        {
            use rustix::fs::{CWD, RenameFlags, renameat_with};
            if renameat_with(CWD, from, CWD, to, RenameFlags::EXCHANGE).is_ok() {
                // `from` now names the old file.
                if let Err(e) = self.discard(from) {
                    tracing::warn!(path = %from.display(), error = %e, "could not remove a replaced file; it goes at the next start");
                }
                return true;
            }
        }
        false
    }

    pub(crate) fn unique_id(&self) -> String {
        let n = self.unique.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mut hasher = Md5::new();
        hasher.update(format!("{}-{nanos}-{n}", std::process::id()));
        hex::encode(hasher.finalize())
    }

    // ---- buckets -------------------------------------------------------------------------

    /// The directory of an existing bucket.
    pub(crate) fn bucket_dir(&self, bucket: &str) -> Result<PathBuf, S3Error> {
        check_bucket(bucket)?;
        let dir = self.root.join(bucket);
        match fs::metadata(&dir) {
            Ok(m) if m.is_dir() => Ok(dir),
            Ok(_) => Err(no_such_bucket(bucket)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(no_such_bucket(bucket)),
            Err(e) => Err(internal(e)),
        }
    }

    pub(crate) fn create_bucket(&self, bucket: &str) -> Result<(), S3Error> {
        check_bucket(bucket)?;
        match fs::create_dir(self.root.join(bucket)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(s3_error!(
                BucketAlreadyOwnedByYou,
                "bucket {bucket} already exists and is yours"
            )),
            Err(e) => Err(internal(e)),
        }
    }

    pub(crate) fn delete_bucket(&self, bucket: &str) -> Result<(), S3Error> {
        let dir = self.bucket_dir(bucket)?;
        let has_entries = |d: &Path| {
            fs::read_dir(d)
                .map(|mut it| it.next().is_some())
                .unwrap_or(false)
        };
        if has_entries(&dir) {
            return Err(s3_error!(
                BucketNotEmpty,
                "bucket {bucket} is not empty; delete its objects first"
            ));
        }
        // Completed uploads leave a record (for repeated completions); only unfinished ones
        // keep a bucket from being deleted.
        if !self.list_uploads(bucket, "")?.is_empty() {
            return Err(s3_error!(
                BucketNotEmpty,
                "bucket {bucket} has multipart uploads in progress; abort them first"
            ));
        }
        if self.has_archived_versions(bucket) {
            return Err(s3_error!(
                BucketNotEmpty,
                "bucket {bucket} has object versions or delete markers; delete them first"
            ));
        }
        fs::remove_dir(&dir).map_err(internal)?;
        let _ = fs::remove_dir_all(self.internal("meta", bucket));
        let _ = fs::remove_dir_all(self.internal("versions", bucket));
        let _ = fs::remove_dir_all(self.internal("uploads", bucket));
        let _ = fs::remove_file(self.bucket_tags_path(bucket));
        self.forget_bucket_config(bucket);
        Ok(())
    }

    /// Buckets in name order with their creation time.
    pub(crate) fn list_buckets(&self) -> Result<Vec<(String, SystemTime)>, S3Error> {
        let mut buckets = Vec::new();
        for entry in fs::read_dir(&self.root).map_err(internal)? {
            let entry = entry.map_err(internal)?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() && check_bucket(&name).is_ok() {
                let created = meta
                    .created()
                    .or_else(|_| meta.modified())
                    .unwrap_or(UNIX_EPOCH);
                buckets.push((name, created));
            }
        }
        buckets.sort();
        Ok(buckets)
    }

    // ---- objects ---------------------------------------------------------------------------

    /// The path of `key` (not a folder marker) below its bucket directory, after checking the
    /// paths it needs fit the system's limit.
    fn key_rel(&self, bucket: &str, key: &str) -> Result<PathBuf, S3Error> {
        check_key(key)?;
        let rel = keys::key_path(key);
        self.check_fits(bucket, key, &rel)?;
        Ok(rel)
    }

    /// Refuses a key whose path `rel` (below the bucket) would pass the system's limit.
    fn check_fits(&self, bucket: &str, key: &str, rel: &Path) -> Result<(), S3Error> {
        // The longest path the key needs: its sidecar inside a directory.
        let longest = self.internal("meta", bucket).join(rel).join(keys::SELF);
        if longest.as_os_str().len() >= PATH_MAX {
            return Err(s3_error!(
                KeyTooLongError,
                "key {key:?} needs a path longer than the file system allows (too many '/')"
            ));
        }
        Ok(())
    }

    /// Where the object stored at `rel` has its bytes now (`rel`, or `rel/.bl%self` when
    /// `rel` is a directory), relative to the bucket directory, and their metadata.
    fn find(&self, bucket: &str, rel: &Path) -> io::Result<Option<(PathBuf, fs::Metadata)>> {
        let bucket_dir = self.root.join(bucket);
        let stat = match fs::metadata(bucket_dir.join(rel)) {
            Ok(stat) => stat,
            Err(e) if is_missing(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        if stat.is_file() {
            return Ok(Some((rel.to_path_buf(), stat)));
        }
        let inner = rel.join(keys::SELF);
        match fs::metadata(bucket_dir.join(&inner)) {
            Ok(stat) if stat.is_file() => Ok(Some((inner, stat))),
            Ok(_) => Ok(None),
            Err(e) if is_missing(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Runs `lookup`; when it finds nothing while an object may have been moving into a
    /// directory ([`Storage::file_into_dir`]), runs it again once the move is over, so a
    /// reader never misses an object that exists.
    fn settled<T>(&self, lookup: impl Fn() -> io::Result<Option<T>>) -> io::Result<Option<T>> {
        let moves = self.moves.load(Ordering::SeqCst);
        let found = lookup()?;
        if found.is_some()
            || (moves.is_multiple_of(2) && self.moves.load(Ordering::SeqCst) == moves)
        {
            return Ok(found);
        }
        let _commits = self.lock_commits();
        lookup()
    }

    /// Data and sidecar paths of the folder marker `key` (ending in '/'; checked).
    fn marker_paths(&self, bucket: &str, key: &str) -> (PathBuf, PathBuf) {
        let name = hex::encode(Md5::digest(key.as_bytes()));
        (
            self.internal("folders", bucket).join(&name),
            self.internal("folder-meta", bucket).join(&name),
        )
    }

    /// True if the folder marker `key` (ending in '/') exists.
    pub(crate) fn has_marker(&self, bucket: &str, key: &str) -> bool {
        fs::metadata(self.marker_paths(bucket, key).0).is_ok_and(|m| m.is_file())
    }

    /// Metadata of an existing object; a key naming only a directory does not exist.
    pub(crate) fn head(&self, bucket: &str, key: &str) -> Result<ObjectMeta, S3Error> {
        if key.ends_with('/') {
            check_key(key)?;
            self.bucket_dir(bucket)?;
            let (data, meta) = self.marker_paths(bucket, key);
            let stat = match fs::metadata(&data) {
                Ok(m) if m.is_file() => m,
                Ok(_) => return Err(no_such_key(bucket, key)),
                Err(e) if is_missing(&e) => return Err(no_such_key(bucket, key)),
                Err(e) => return Err(internal(e)),
            };
            let found = self.marker_meta(bucket, key, &data, &meta, &stat);
            return found
                .map_err(internal)?
                .ok_or_else(|| no_such_key(bucket, key));
        }
        let rel = self.key_rel(bucket, key)?;
        let Some((_, stat)) = self.settled(|| self.find(bucket, &rel)).map_err(internal)? else {
            self.bucket_dir(bucket)?;
            return Err(no_such_key(bucket, key));
        };
        self.object_meta(bucket, &rel, &stat)
            .map_err(internal)?
            .ok_or_else(|| no_such_key(bucket, key))
    }

    /// Metadata and an open file for reading an object (one open and one fstat).
    pub(crate) fn open_object(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<(ObjectMeta, File), S3Error> {
        let (file, stat) = self.open_file(bucket, key)?;
        self.describe(bucket, key, file, &stat)
    }

    /// Opens an object's data file; a key naming only a directory does not exist.
    pub(crate) fn open_file(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<(File, fs::Metadata), S3Error> {
        check_bucket(bucket)?;
        let rel = match key.ends_with('/') {
            true => {
                check_key(key)?;
                None
            }
            false => Some(self.key_rel(bucket, key)?),
        };
        let open = |path: &Path| -> io::Result<Option<(File, fs::Metadata)>> {
            match File::open(path) {
                Ok(file) => {
                    let stat = file.metadata()?;
                    Ok(Some((file, stat)))
                }
                Err(e) if is_missing(&e) => Ok(None),
                Err(e) => Err(e),
            }
        };
        let found = self
            .settled(|| match &rel {
                None => open(&self.marker_paths(bucket, key).0),
                Some(rel) => match open(&self.root.join(bucket).join(rel))? {
                    Some((_, stat)) if stat.is_dir() => {
                        open(&self.root.join(bucket).join(rel).join(keys::SELF))
                    }
                    found => Ok(found),
                },
            })
            .map_err(internal)?;
        match found {
            Some((file, stat)) if stat.is_file() => Ok((file, stat)),
            Some(_) => Err(no_such_key(bucket, key)),
            None => Err(self
                .bucket_dir(bucket)
                .err()
                .unwrap_or_else(|| no_such_key(bucket, key))),
        }
    }

    /// The metadata of the object whose data file is `file` (opened, with `stat`), and the
    /// file it describes. A record is taken only for the very file it names (its inode): when
    /// a write replaced the object between the open and the read of its record, the object
    /// is opened again under the commit lock, so the bytes, ETag, size and checksum of an
    /// answer always come from one version.
    pub(crate) fn describe(
        &self,
        bucket: &str,
        key: &str,
        file: File,
        stat: &fs::Metadata,
    ) -> Result<(ObjectMeta, File), S3Error> {
        let recorded = match key.ends_with('/') {
            true => {
                let (data, meta_path) = self.marker_paths(bucket, key);
                self.recorded(&data, &meta_path, stat)
            }
            false => {
                let rel = self.key_rel(bucket, key)?;
                self.recorded_object(bucket, &rel, stat)
            }
        };
        if let Some(meta) = recorded.map_err(internal)? {
            return Ok((meta, file));
        }
        let opened = match key.ends_with('/') {
            true => self.open_settled(|| Ok(self.locate_marker(bucket, key))),
            false => {
                let rel = self.key_rel(bucket, key)?;
                self.open_settled(|| self.locate_object(bucket, &rel))
            }
        };
        match opened.map_err(internal)? {
            Some((file, _, meta)) => Ok((meta, file)),
            None => Err(no_such_key(bucket, key)),
        }
    }

    /// The metadata of the object stored at `rel` (not a folder marker), whose data file has
    /// `stat`: from memory or its sidecar when they describe that file, else settled under the
    /// commit lock ([`Storage::open_settled`]). `None`: the object is gone.
    fn object_meta(
        &self,
        bucket: &str,
        rel: &Path,
        stat: &fs::Metadata,
    ) -> io::Result<Option<ObjectMeta>> {
        if let Some(meta) = self.recorded_object(bucket, rel, stat)? {
            return Ok(Some(meta));
        }
        let opened = self.open_settled(|| self.locate_object(bucket, rel))?;
        Ok(opened.map(|(_, _, meta)| meta))
    }

    /// [`Storage::object_meta`] of the folder marker `key`, whose data file has `stat`.
    fn marker_meta(
        &self,
        bucket: &str,
        key: &str,
        data: &Path,
        meta_path: &Path,
        stat: &fs::Metadata,
    ) -> io::Result<Option<ObjectMeta>> {
        if let Some(meta) = self.recorded(data, meta_path, stat)? {
            return Ok(Some(meta));
        }
        let opened = self.open_settled(|| Ok(self.locate_marker(bucket, key)))?;
        Ok(opened.map(|(_, _, meta)| meta))
    }

    /// The record of the object stored at `rel` if it describes the data file with `stat`.
    fn recorded_object(
        &self,
        bucket: &str,
        rel: &Path,
        stat: &fs::Metadata,
    ) -> io::Result<Option<ObjectMeta>> {
        let cache_key = self.root.join(bucket).join(rel);
        if let Some(meta) = self.cached(&cache_key, stat) {
            return Ok(Some(meta));
        }
        let Some((data, _)) = self.find(bucket, rel)? else {
            return Ok(None);
        };
        let stored = read_sidecar(&self.internal("meta", bucket).join(data), stat);
        if let Some(meta) = &stored {
            self.remember(&cache_key, meta);
        }
        Ok(stored)
    }

    /// The record of the file at `data` (its sidecar at `meta_path`, cached under `data`), if
    /// it describes the file with `stat`; for files whose place never changes (folder markers).
    fn recorded(
        &self,
        data: &Path,
        meta_path: &Path,
        stat: &fs::Metadata,
    ) -> io::Result<Option<ObjectMeta>> {
        if let Some(meta) = self.cached(data, stat) {
            return Ok(Some(meta));
        }
        let stored = read_sidecar(meta_path, stat);
        if let Some(meta) = &stored {
            self.remember(data, meta);
        }
        Ok(stored)
    }

    /// Where the object stored at `rel` is now, if anywhere.
    fn locate_object(&self, bucket: &str, rel: &Path) -> io::Result<Option<Located>> {
        Ok(self.find(bucket, rel)?.map(|(data, _)| {
            (
                self.root.join(bucket).join(&data),
                self.internal("meta", bucket).join(&data),
                self.root.join(bucket).join(rel),
            )
        }))
    }

    /// Where the folder marker `key` is, if it exists.
    fn locate_marker(&self, bucket: &str, key: &str) -> Option<Located> {
        let (data, meta_path) = self.marker_paths(bucket, key);
        data.is_file()
            .then(|| (data.clone(), meta_path, data.clone()))
    }

    /// Opens the current object `locate` finds (`None`: there is none), with the record of
    /// that very file. Under the commit lock, where no write of this server stands between
    /// placing a file and writing its record, so the two agree unless the file was changed
    /// by hand: a record of the same size and mtime but another inode (written before records
    /// named their file, or a root copied with its times) is taken and updated; a file without
    /// a valid record is hashed, outside the lock, and its record stored.
    ///
    /// A server sharing its root ([`Storage::shared`]) may be between the two steps of
    /// another server's write: while the record names another file, it looks again (a bounded
    /// number of times), and then answers from the bytes without storing anything.
    fn open_settled(
        &self,
        locate: impl Fn() -> io::Result<Option<Located>>,
    ) -> io::Result<Option<(File, fs::Metadata, ObjectMeta)>> {
        let attempts = if self.shared {
            SHARED_SETTLE_ATTEMPTS
        } else {
            1
        };
        let mut attempt = 1;
        loop {
            match self.settle_once(&locate, attempt >= attempts)? {
                Settled::Done(opened) => return Ok(opened),
                Settled::Hash(file, stat, located, store) => {
                    return self.hash_opened(file, stat, &located, store).map(Some);
                }
                Settled::Elsewhere => {
                    attempt += 1;
                    std::thread::yield_now();
                }
            }
        }
    }

    /// One look of [`Storage::open_settled`] under the commit lock.
    fn settle_once(
        &self,
        locate: &impl Fn() -> io::Result<Option<Located>>,
        last: bool,
    ) -> io::Result<Settled> {
        let _commits = self.lock_commits_once();
        let Some(located) = locate()? else {
            return Ok(Settled::Done(None));
        };
        let file = match File::open(&located.0) {
            Ok(file) => file,
            Err(e) if is_missing(&e) => return Ok(Settled::Done(None)),
            Err(e) => return Err(e),
        };
        let stat = file.metadata()?;
        if !stat.is_file() {
            return Ok(Settled::Done(None));
        }
        let record = fs::read(&located.1)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<ObjectMeta>(&bytes).ok());
        // A record naming another file: on a shared root, maybe another server's write.
        let elsewhere = record
            .as_ref()
            .is_some_and(|m| m.inode != 0 && m.inode != stat.ino());
        match record {
            Some(meta) if is_fresh(&meta, &stat) => {
                self.remember(&located.2, &meta);
                Ok(Settled::Done(Some((file, stat, meta))))
            }
            _ if self.shared && elsewhere && !last => Ok(Settled::Elsewhere),
            _ if self.shared && elsewhere => Ok(Settled::Hash(file, stat, located, false)),
            Some(meta) if same_bytes(&meta, &stat) => {
                let meta = self.adopt_record(meta, &located, &stat);
                Ok(Settled::Done(Some((file, stat, meta))))
            }
            _ => Ok(Settled::Hash(file, stat, located, true)),
        }
    }

    /// The metadata of an opened file without a valid record, from its bytes; stored (when
    /// `store`) unless the file was replaced or described meanwhile.
    fn hash_opened(
        &self,
        file: File,
        stat: fs::Metadata,
        (data, meta_path, cache_key): &Located,
        store: bool,
    ) -> io::Result<(File, fs::Metadata, ObjectMeta)> {
        tracing::debug!(path = %data.display(), "object has no valid sidecar; hashing it");
        let meta = ObjectMeta {
            etag: md5_of(&file)?,
            size: stat.len(),
            mtime_ns: mtime_ns(&stat),
            inode: stat.ino(),
            ..ObjectMeta::default()
        };
        let _commits = self.lock_commits_once();
        let current = fs::metadata(data).is_ok_and(|s| s.ino() == stat.ino());
        if store && current && read_sidecar(meta_path, &stat).is_none() {
            if let Err(e) = self.write_sidecar(meta_path, &meta) {
                tracing::warn!(path = %meta_path.display(), error = %e, "cannot store object sidecar");
            }
            self.remember(cache_key, &meta);
        }
        Ok((file, stat, meta))
    }

    /// A record that describes a located file's bytes (size and mtime), made to name the
    /// file's inode. Under the commit lock.
    fn adopt_record(
        &self,
        mut meta: ObjectMeta,
        (_, meta_path, cache_key): &Located,
        stat: &fs::Metadata,
    ) -> ObjectMeta {
        meta.inode = stat.ino();
        if let Err(e) = self.write_sidecar(meta_path, &meta) {
            tracing::warn!(path = %meta_path.display(), error = %e, "cannot store object sidecar");
        }
        self.remember(cache_key, &meta);
        meta
    }

    /// The cached metadata under `key`, if it still describes a file with `stat`.
    fn cached(&self, key: &Path, stat: &fs::Metadata) -> Option<ObjectMeta> {
        self.cache_lock()
            .get(key)
            .filter(|m| is_fresh(m, stat))
            .cloned()
    }

    fn cache_lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, ObjectMeta>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn remember(&self, key: &Path, meta: &ObjectMeta) {
        let mut cache = self.cache_lock();
        if cache.len() >= MAX_CACHED_SIDECARS {
            cache.clear();
        }
        cache.insert(key.to_path_buf(), meta.clone());
    }

    fn write_sidecar(&self, meta_path: &Path, meta: &ObjectMeta) -> io::Result<()> {
        let temp = self.temp_path();
        fs::write(&temp, serde_json::to_vec(meta)?)?;
        rename_into(&temp, meta_path).inspect_err(|_| {
            let _ = fs::remove_file(&temp);
        })
    }

    /// Replaces an object's tags (PutObjectTagging, DeleteObjectTagging): its sidecar only;
    /// the bytes, ETag and Last-Modified stay. Called under the commit lock (see
    /// [`Storage::set_version_tags`]), so a PUT landing at the same time is never given the
    /// old object's metadata.
    fn set_current_tags(
        &self,
        bucket: &str,
        key: &str,
        tags: BTreeMap<String, String>,
    ) -> Result<ObjectMeta, S3Error> {
        let mut meta = self.head(bucket, key)?;
        meta.tags = tags;
        let Some((_, meta_path, cache_key)) = self.current_paths(bucket, key)? else {
            return Err(no_such_key(bucket, key));
        };
        if let Some(dir) = meta_path.parent() {
            fs::create_dir_all(dir).map_err(internal)?;
        }
        self.write_sidecar(&meta_path, &meta).map_err(internal)?;
        self.remember(&cache_key, &meta);
        Ok(meta)
    }

    fn bucket_tags_path(&self, bucket: &str) -> PathBuf {
        self.root
            .join(INTERNAL_DIR)
            .join("bucket-tags")
            .join(format!("{bucket}.json"))
    }

    /// A bucket's tags (PutBucketTagging); `None` when it has none.
    pub(crate) fn bucket_tags(
        &self,
        bucket: &str,
    ) -> Result<Option<BTreeMap<String, String>>, S3Error> {
        self.bucket_dir(bucket)?;
        match fs::read(self.bucket_tags_path(bucket)) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| internal(e.into())),
            Err(e) if is_missing(&e) => Ok(None),
            Err(e) => Err(internal(e)),
        }
    }

    /// Sets (`Some`) or removes (`None`) a bucket's tags.
    pub(crate) fn set_bucket_tags(
        &self,
        bucket: &str,
        tags: Option<&BTreeMap<String, String>>,
    ) -> Result<(), S3Error> {
        self.bucket_dir(bucket)?;
        let path = self.bucket_tags_path(bucket);
        match tags {
            None => match fs::remove_file(&path) {
                Err(e) if !is_missing(&e) => Err(internal(e)),
                _ => Ok(()),
            },
            Some(tags) => {
                if let Some(dir) = path.parent() {
                    fs::create_dir_all(dir).map_err(internal)?;
                }
                let temp = self.temp_path();
                fs::write(
                    &temp,
                    serde_json::to_vec(tags).map_err(|e| internal(e.into()))?,
                )
                .map_err(internal)?;
                rename_into(&temp, &path).map_err(|e| {
                    let _ = fs::remove_file(&temp);
                    internal(e)
                })
            }
        }
    }

    /// Starts writing a new object version into a temporary file.
    pub(crate) fn begin_write(&self) -> Result<TempObject, S3Error> {
        let path = self.temp_path();
        let file = File::create(&path).map_err(internal)?;
        Ok(TempObject {
            path: Some(path),
            file,
            md5: BodyMd5::Lanes(self.lanes.stream()),
            size: 0,
        })
    }

    /// Makes a finished temporary file the object `key`, with the given ETag.
    #[cfg(test)]
    pub(crate) fn commit(
        &self,
        bucket: &str,
        key: &str,
        temp: TempObject,
        etag: String,
        attrs: ObjectAttrs,
    ) -> Result<ObjectMeta, S3Error> {
        self.commit_if(bucket, key, temp, etag, attrs, &Precondition::None)
    }

    /// [`Storage::commit`] if `precondition` holds of the object it would replace; otherwise
    /// the temporary file is dropped and nothing changes.
    pub(crate) fn commit_if(
        &self,
        bucket: &str,
        key: &str,
        temp: TempObject,
        etag: String,
        attrs: ObjectAttrs,
        precondition: &Precondition,
    ) -> Result<ObjectMeta, S3Error> {
        let rel = match key.ends_with('/') {
            true => check_key(key)
                .and_then(|()| self.check_fits(bucket, key, &keys::dir_path(key)))
                .map(|()| None),
            false => self.key_rel(bucket, key).map(Some),
        }?;
        self.bucket_dir(bucket)?;
        // Directory buckets show opaque ETags, never the content MD5 (as S3 Express does).
        let etag = match crate::directory::is_directory_bucket(bucket) {
            true => crate::directory::etag(&etag),
            false => etag,
        };
        let mut temp = temp;
        if self.fsync {
            temp.file.sync_all().map_err(internal)?;
        }
        let stat = temp.file.metadata().map_err(internal)?;
        let meta = ObjectMeta {
            etag,
            size: stat.len(),
            mtime_ns: mtime_ns(&stat),
            content_type: attrs.content_type,
            metadata: attrs.metadata,
            parts: attrs.parts,
            headers: attrs.headers,
            checksum: attrs.checksum,
            tags: attrs.tags,
            version_id: None,
            inode: stat.ino(),
        };
        let mut meta = meta;
        // Every change of the tree takes the lock, so a conditional write sees no write land
        // between its check and its rename, and directories are made and pruned one at a time.
        let _commits = self.lock_commits();
        self.check_current(bucket, key, precondition)?;
        let versioning = self.versioning(bucket)?;
        let mut archived = None;
        if versioning.is_versioned() {
            let (id, copy) = self.make_way(bucket, key, versioning)?;
            meta.version_id = Some(id);
            archived = copy;
        }
        let Some(path) = temp.path.take() else {
            return Err(s3_error!(InternalError, "object written twice"));
        };
        let placed = match &rel {
            None => self.place_marker(bucket, key),
            Some(_) => self.place_object(bucket, key),
        };
        let placed = placed.and_then(|(data, meta_path)| {
            if !self.swap_in(&path, &data) {
                rename_into(&path, &data)?;
            }
            Ok((data, meta_path))
        });
        let (data, meta_path) = match placed {
            Ok(placed) => placed,
            Err(e) => {
                let _ = fs::remove_file(&path);
                // The version this write archived stays current.
                self.undo_make_way(bucket, key, archived);
                return Err(write_error(e, bucket, key));
            }
        };
        self.write_sidecar(&meta_path, &meta).map_err(internal)?;
        let cache_key = rel.map_or(data, |rel| self.root.join(bucket).join(rel));
        self.remember(&cache_key, &meta);
        Ok(meta)
    }

    /// Checks `precondition` against the current object `key`, outside the commit lock (an
    /// append checks the caller's condition first, then commits on its own).
    pub(crate) fn check_precondition(
        &self,
        bucket: &str,
        key: &str,
        precondition: &Precondition,
    ) -> Result<(), S3Error> {
        self.check_current(bucket, key, precondition)
    }

    /// Checks `precondition` against the current object `key`. Under the commit lock.
    fn check_current(
        &self,
        bucket: &str,
        key: &str,
        precondition: &Precondition,
    ) -> Result<(), S3Error> {
        match precondition {
            Precondition::None => Ok(()),
            _ => precondition.check(self.head(bucket, key)),
        }
    }

    /// Deletes an object; deleting a missing object succeeds, as in S3.
    #[cfg(test)]
    pub(crate) fn delete(&self, bucket: &str, key: &str) -> Result<(), S3Error> {
        self.delete_if(bucket, key, &Precondition::None)
    }

    /// [`Storage::delete`] if `precondition` holds of the object, checked under the commit
    /// lock with the delete.
    fn delete_if(
        &self,
        bucket: &str,
        key: &str,
        precondition: &Precondition,
    ) -> Result<(), S3Error> {
        if key.ends_with('/') {
            check_key(key)?;
        } else {
            self.key_rel(bucket, key)?;
        }
        self.bucket_dir(bucket)?;
        let _commits = self.lock_commits();
        self.check_current(bucket, key, precondition)?;
        self.remove_current(bucket, key)
    }

    /// Removes the current object's files (data, sidecar, emptied directories). Under the
    /// commit lock.
    fn remove_current(&self, bucket: &str, key: &str) -> Result<(), S3Error> {
        if let Some(folder) = key.strip_suffix('/') {
            let (data, meta) = self.marker_paths(bucket, key);
            let _ = fs::remove_file(&data);
            let _ = fs::remove_file(&meta);
            self.cache_lock().remove(&data);
            let segments: Vec<&str> = folder.split('/').collect();
            self.prune_data_dirs(bucket, &segments, segments.len());
            return Ok(());
        }
        let rel = self.key_rel(bucket, key)?;
        let Some((data, _)) = self.find(bucket, &rel).map_err(internal)? else {
            return Ok(());
        };
        self.discard(&self.root.join(bucket).join(&data))
            .map_err(internal)?;
        let meta_root = self.internal("meta", bucket);
        let _ = fs::remove_file(meta_root.join(&data));
        self.cache_lock().remove(&self.root.join(bucket).join(&rel));
        let segments: Vec<&str> = key.split('/').collect();
        // The directories holding the data file: the key's parents, and the key's own
        // directory when the bytes were its `.bl%self`.
        let levels = data.components().count() - 1;
        self.prune_data_dirs(bucket, &segments, levels);
        prune_empty_dirs(&meta_root.join(&data), &meta_root);
        Ok(())
    }

    /// Forgets the current object whose data file is gone (moved into the versions
    /// directory): removes its sidecar and the directories it leaves empty. Under the commit
    /// lock.
    fn forget_current(&self, bucket: &str, key: &str) -> Result<(), S3Error> {
        let segments: Vec<&str> = key.trim_end_matches('/').split('/').collect();
        if key.ends_with('/') {
            let (data, meta) = self.marker_paths(bucket, key);
            let _ = fs::remove_file(&meta);
            self.cache_lock().remove(&data);
            self.prune_data_dirs(bucket, &segments, segments.len());
            return Ok(());
        }
        let rel = self.key_rel(bucket, key)?;
        let meta_root = self.internal("meta", bucket);
        let _ = fs::remove_file(meta_root.join(&rel));
        let _ = fs::remove_file(meta_root.join(&rel).join(keys::SELF));
        self.cache_lock().remove(&self.root.join(bucket).join(&rel));
        // The directories that held the data file: the key's parents, and the key's own
        // directory when the bytes were its `.bl%self`.
        let own_dir = self.root.join(bucket).join(&rel).is_dir();
        let levels = segments.len() - usize::from(!own_dir);
        self.prune_data_dirs(bucket, &segments, levels);
        prune_empty_dirs(&meta_root.join(&rel).join(keys::SELF), &meta_root);
        Ok(())
    }

    /// Where the current object `key` is: its data file, its sidecar, and the key of its
    /// cached sidecar; `None` when it has none.
    fn current_paths(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Option<(PathBuf, PathBuf, PathBuf)>, S3Error> {
        if key.ends_with('/') {
            check_key(key)?;
            let (data, meta) = self.marker_paths(bucket, key);
            return Ok(data.is_file().then(|| (data.clone(), meta, data)));
        }
        let rel = self.key_rel(bucket, key)?;
        let found = self.find(bucket, &rel).map_err(internal)?;
        Ok(found.map(|(data_rel, _)| {
            (
                self.root.join(bucket).join(&data_rel),
                self.internal("meta", bucket).join(&data_rel),
                self.root.join(bucket).join(&rel),
            )
        }))
    }

    /// Copies an object's bytes (of version `version`, the current one for `None`) into a
    /// new temporary file.
    pub(crate) fn copy_to_temp(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
    ) -> Result<(ObjectMeta, TempObject), S3Error> {
        let (meta, mut source) = self.open_version(bucket, key, version)?;
        let mut temp = self.begin_write()?;
        io::copy(&mut source, &mut temp.file).map_err(internal)?;
        temp.size = meta.size;
        Ok((meta, temp))
    }
}

/// The stored sidecar at `meta_path`, if it still describes a file with `stat`.
fn read_sidecar(meta_path: &Path, stat: &fs::Metadata) -> Option<ObjectMeta> {
    let bytes = fs::read(meta_path).ok()?;
    serde_json::from_slice::<ObjectMeta>(&bytes)
        .ok()
        .filter(|m| is_fresh(m, stat))
}

/// True if `meta` was recorded for this very data file, unchanged since: its inode, size and
/// modification time. Size and time alone cannot tell two versions apart: two writes of
/// one size within one tick of the file system's clock have the same.
fn is_fresh(meta: &ObjectMeta, stat: &fs::Metadata) -> bool {
    meta.inode == stat.ino() && same_bytes(meta, stat)
}

/// True if `meta` was recorded for a data file of this size and modification time.
fn same_bytes(meta: &ObjectMeta, stat: &fs::Metadata) -> bool {
    meta.size == stat.len() && meta.mtime_ns == mtime_ns(stat)
}

/// An object being written: bytes go to a temporary file while their MD5 is computed.
/// Dropping it before commit removes the file.
#[derive(Debug)]
pub(crate) struct TempObject {
    path: Option<PathBuf>,
    file: File,
    md5: BodyMd5,
    size: u64,
}

impl TempObject {
    pub(crate) fn write(&mut self, bytes: &[u8]) -> Result<(), S3Error> {
        self.md5.update_slice(bytes);
        self.size += bytes.len() as u64;
        self.file.write_all(bytes).map_err(internal)
    }

    /// [`TempObject::write`] of a received chunk, which is hashed without a copy.
    pub(crate) fn write_chunk(&mut self, chunk: bytes::Bytes) -> Result<(), S3Error> {
        self.size += chunk.len() as u64;
        self.file.write_all(&chunk).map_err(internal)?;
        self.md5.update(chunk);
        Ok(())
    }

    /// Appends the content of another file (multipart completion); the MD5 is not updated.
    pub(crate) fn append_file(&mut self, path: &Path) -> Result<u64, S3Error> {
        let mut source = File::open(path).map_err(internal)?;
        let n = io::copy(&mut source, &mut self.file).map_err(internal)?;
        self.size += n;
        Ok(n)
    }

    /// `algorithm`'s checksum of the bytes written so far, read back from the file.
    pub(crate) fn checksum(
        &mut self,
        algorithm: crate::checksum::Algorithm,
    ) -> Result<String, S3Error> {
        let mut hasher =
            crate::checksum::hasher_for(&algorithm.checksum(String::new())).unwrap_or_default();
        // Read through a handle of its own: the file may be open for writing only.
        let path = self
            .path
            .as_deref()
            .ok_or_else(|| s3_error!(InternalError, "object already committed"))?;
        let mut file = File::open(path).map_err(internal)?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = file.read(&mut buf).map_err(internal)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        let sums = hasher.finalize();
        Ok(algorithm.value(&sums).cloned().unwrap_or_default())
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// MD5 of everything passed to [`TempObject::write`].
    pub(crate) fn md5(&self) -> [u8; 16] {
        self.md5.digest()
    }
}

impl Drop for TempObject {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = fs::remove_file(path);
        }
    }
}

/// Renames `from` to `to`, creating `to`'s parent directories; retries when a concurrent
/// delete prunes a parent directory in between.
fn rename_into(from: &Path, to: &Path) -> io::Result<()> {
    let mut attempts = 0;
    loop {
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent)?;
        }
        match fs::rename(from, to) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && attempts < 3 => attempts += 1,
            other => return other,
        }
    }
}

/// Removes the now-empty directories between `path` and `stop` (exclusive).
fn prune_empty_dirs(path: &Path, stop: &Path) {
    let mut dir = path.parent();
    while let Some(d) = dir {
        if d == stop || !d.starts_with(stop) || fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}

fn mtime_ns(stat: &fs::Metadata) -> u64 {
    stat.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The MD5 (hex) of an open file's bytes, read at their offsets (the file's position stays).
fn md5_of(file: &File) -> io::Result<String> {
    use std::os::unix::fs::FileExt;
    let mut hasher = Md5::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut offset = 0;
    loop {
        let n = file.read_at(&mut buf, offset)?;
        if n == 0 {
            return Ok(hex::encode(hasher.finalize()));
        }
        hasher.update(&buf[..n]);
        offset += n as u64;
    }
}

fn is_missing(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory | io::ErrorKind::IsADirectory
    )
}

/// Bucket names cannot start with '.' (the internal directory) or '_' (the `/_bucketload`
/// endpoints), nor hold a path separator.
fn check_bucket(bucket: &str) -> Result<(), S3Error> {
    let bad = bucket.is_empty()
        || bucket.starts_with(['.', '_'])
        || bucket.contains(['/', '\\', '\0'])
        || bucket == ".."
        || bucket.len() > 63;
    if bad {
        return Err(s3_error!(
            InvalidBucketName,
            "invalid bucket name {bucket:?}"
        ));
    }
    Ok(())
}

/// Any key S3 takes is stored: 1 to 1024 bytes of UTF-8 (see [`keys`] for how each maps
/// onto a path).
pub(crate) fn check_key(key: &str) -> Result<(), S3Error> {
    if key.is_empty() || key.len() > 1024 {
        return Err(s3_error!(KeyTooLongError, "keys must hold 1 to 1024 bytes"));
    }
    Ok(())
}

pub(crate) fn internal(e: io::Error) -> S3Error {
    tracing::warn!(error = %e, "storage error");
    S3Error::with_message(S3ErrorCode::InternalError, format!("storage error: {e}"))
}

pub(crate) fn no_such_bucket(bucket: &str) -> S3Error {
    s3_error!(NoSuchBucket, "bucket {bucket} does not exist")
}

pub(crate) fn no_such_key(bucket: &str, key: &str) -> S3Error {
    s3_error!(NoSuchKey, "no object {key} in bucket {bucket}")
}

/// Errors placing an object: every key has a place, so a conflict means something in the
/// bucket directory was changed by hand (a file where the key needs a directory it cannot
/// make).
fn write_error(e: io::Error, bucket: &str, key: &str) -> S3Error {
    match e.kind() {
        io::ErrorKind::NotADirectory
        | io::ErrorKind::IsADirectory
        | io::ErrorKind::AlreadyExists
        | io::ErrorKind::DirectoryNotEmpty => {
            s3_error!(
                InvalidRequest,
                "key {key} in bucket {bucket} cannot be placed: the bucket directory holds something in its way ({e})"
            )
        }
        _ => internal(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_1_to_1024_bytes_is_valid() {
        for good in [
            "a", "/", "/abs", "a//b", "a/../b", "..", ".", "dir//", "nul\0", "a/",
        ] {
            assert!(check_key(good).is_ok(), "{good:?}");
        }
        assert!(check_key("").is_err());
        assert!(check_key(&"k".repeat(1025)).is_err());
    }

    fn put(storage: &Storage, key: &str, body: &[u8]) -> ObjectMeta {
        let mut temp = storage.begin_write().unwrap();
        temp.write(body).unwrap();
        let etag = hex::encode(temp.md5());
        let attrs = ObjectAttrs {
            content_type: Some(format!("type/{}", body.len())),
            ..ObjectAttrs::default()
        };
        storage.commit("b", key, temp, etag, attrs).unwrap()
    }

    fn get(storage: &Storage, key: &str) -> Vec<u8> {
        let (meta, mut file) = storage.open_object("b", key).unwrap();
        let mut body = Vec::new();
        file.read_to_end(&mut body).unwrap();
        assert_eq!(meta.size, body.len() as u64, "{key}");
        body
    }

    /// Every file under `dir`, relative to it.
    fn files_under(dir: &Path) -> Vec<String> {
        let mut files = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    files.push(path.strip_prefix(dir).unwrap().display().to_string());
                }
            }
        }
        files.sort();
        files
    }

    /// Keys S3 stores that are not plain relative paths.
    fn awkward_keys() -> Vec<String> {
        let mut keys: Vec<String> = [
            "a",
            "a!",
            "a/b",
            "a//c",
            "a/./d",
            "a/../e",
            "a/.",
            "a/..",
            "/x",
            "//y",
            "./x",
            "../x",
            "..",
            ".",
            "../../outside",
            ".bl%self",
            "a/.bl%self",
            "a/.bl%name",
            ".bl%e",
            ".bl%h0123",
            ".bucketload/meta/b/a",
            "p%20q+r s",
            "ünï/ключ",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        keys.push(format!("long/{}/{}", "L".repeat(600), "m".repeat(400)));
        keys.push(format!("long/{}", "L".repeat(600)));
        keys.push(format!("{}/x", "z".repeat(256)));
        keys
    }

    #[test]
    fn awkward_keys_round_trip_and_stay_in_their_bucket() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket("b").unwrap();
        storage.create_bucket("other").unwrap();
        fs::write(dir.path().join("other/x"), b"other").unwrap();
        let keys = awkward_keys();
        for (i, key) in keys.iter().enumerate() {
            put(&storage, key, format!("{i}:{key}").as_bytes());
        }
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(get(&storage, key), format!("{i}:{key}").as_bytes(), "{key}");
            let meta = storage.head("b", key).unwrap();
            let len = format!("{i}:{key}").len();
            assert_eq!(meta.content_type, Some(format!("type/{len}")), "{key}");
        }
        // Nothing was written outside the bucket and the internal directory.
        assert_eq!(files_under(&dir.path().join("other")), ["x"]);
        for file in files_under(dir.path()) {
            let inside = ["b/", ".bucketload/"].iter().any(|d| file.starts_with(d));
            assert!(inside || file == "other/x", "{file}");
        }
        assert_eq!(fs::read(dir.path().join("b/a/.bl%self")).unwrap(), b"0:a");
        assert!(dir.path().join("b/a/.bl%e/c").is_file());
        assert!(dir.path().join("b/.bl%dd/.bl%dd/outside").is_file());
        assert!(dir.path().join("b/.bucketload/meta/b/a").is_file());
        // A client's `.bl%` names are keys of their own, never the internal files.
        assert_eq!(get(&storage, "a/.bl%self"), b"16:a/.bl%self");
        assert_eq!(get(&storage, "a"), b"0:a");
        // A directory that only holds other keys is not an object.
        for missing in ["long", "a/.bl%e", "z", "a/b/c", ".bl%q"] {
            let err = storage.head("b", missing).unwrap_err();
            assert_eq!(err.code(), &S3ErrorCode::NoSuchKey, "{missing}");
        }
        for key in &keys {
            storage.delete("b", key).unwrap();
            assert!(storage.head("b", key).is_err(), "{key}");
        }
        assert_eq!(files_under(&dir.path().join("b")), Vec::<String>::new());
        assert_eq!(fs::read_dir(dir.path().join("b")).unwrap().count(), 0);
        assert_eq!(
            files_under(&dir.path().join(".bucketload/meta")),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_key_that_is_also_a_prefix_keeps_its_bytes_and_metadata() {
        for deeper_first in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let storage = Storage::open(dir.path(), false).unwrap();
            storage.create_bucket("b").unwrap();
            let order: [(&str, &[u8]); 3] = match deeper_first {
                false => [("a", b"short"), ("a/b", b"deeper"), ("a/b/c", b"deepest")],
                true => [("a/b/c", b"deepest"), ("a/b", b"deeper"), ("a", b"short")],
            };
            let etags: Vec<String> = order
                .iter()
                .map(|(k, v)| put(&storage, k, v).etag)
                .collect();
            for ((key, body), etag) in order.iter().zip(&etags) {
                assert_eq!(get(&storage, key), *body, "{key}");
                let meta = storage.head("b", key).unwrap();
                assert_eq!(&meta.etag, etag);
                assert_eq!(meta.content_type, Some(format!("type/{}", body.len())));
            }
            assert!(dir.path().join("b/a/.bl%self").is_file());
            assert!(dir.path().join("b/a/b/.bl%self").is_file());
            // Overwriting keeps the place; deleting the deeper keys keeps the shorter one.
            put(&storage, "a", b"again");
            storage.delete("b", "a/b/c").unwrap();
            storage.delete("b", "a/b").unwrap();
            assert_eq!(get(&storage, "a"), b"again");
            storage.delete("b", "a").unwrap();
            assert_eq!(fs::read_dir(dir.path().join("b")).unwrap().count(), 0);
            assert!(storage.head("b", "a").is_err());
        }
    }

    #[test]
    fn readers_never_miss_an_object_moving_into_a_directory() {
        use std::sync::atomic::AtomicBool;
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket("b").unwrap();
        let moved = AtomicBool::new(false);
        for round in 0..50 {
            let key = format!("k{round}");
            put(&storage, &key, b"bytes");
            std::thread::scope(|scope| {
                let reader = scope.spawn(|| {
                    // Reads until one read starts after the move.
                    loop {
                        let last = moved.load(Ordering::SeqCst);
                        assert_eq!(get(&storage, &key), b"bytes");
                        assert_eq!(storage.head("b", &key).unwrap().size, 5);
                        let query = ListQuery {
                            prefix: key.clone(),
                            max_keys: 1,
                            ..ListQuery::default()
                        };
                        let page = storage.list("b", &query).unwrap();
                        assert!(
                            matches!(&page.items[..], [ListItem::Object(k, _)] if *k == key),
                            "{:?}",
                            page.items
                        );
                        if last {
                            return;
                        }
                    }
                });
                put(&storage, &format!("{key}/deeper"), b"x");
                moved.store(true, Ordering::SeqCst);
                reader.join().unwrap();
                moved.store(false, Ordering::SeqCst);
            });
            assert!(dir.path().join("b").join(&key).join(keys::SELF).is_file());
        }
    }

    #[test]
    fn readers_never_miss_an_object_being_replaced() {
        use std::sync::atomic::AtomicBool;
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket("b").unwrap();
        let (a, b) = (vec![b'a'; 1000], vec![b'b'; 3000]);
        put(&storage, "k", &a);
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let reader = scope.spawn(|| {
                let mut reads = 0;
                while !done.load(Ordering::SeqCst) {
                    // `get` checks the body against the metadata's size.
                    let body = get(&storage, "k");
                    assert!(body == a || body == b, "a mix of {} bytes", body.len());
                    reads += 1;
                }
                reads
            });
            for round in 0..200 {
                put(&storage, "k", if round % 2 == 0 { &b } else { &a });
            }
            done.store(true, Ordering::SeqCst);
            assert!(reader.join().unwrap() > 0);
        });
        storage.reaper.flush();
        assert_eq!(
            fs::read_dir(dir.path().join(".bucketload/trash"))
                .unwrap()
                .count(),
            0
        );
    }

    #[test]
    fn readers_get_the_record_of_the_file_they_read() {
        use std::sync::atomic::AtomicBool;
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket("b").unwrap();
        // Versions of one size: written within one tick of the clock, size and mtime agree.
        let versions: Vec<Vec<u8>> = (0..4u8).map(|v| vec![v; 100_000]).collect();
        let write = |v: &[u8]| {
            let mut temp = storage.begin_write().unwrap();
            temp.write(v).unwrap();
            let etag = hex::encode(temp.md5());
            let attrs = ObjectAttrs {
                content_type: Some(format!("type/{}", v[0])),
                ..ObjectAttrs::default()
            };
            storage.commit("b", "k", temp, etag, attrs).unwrap();
        };
        write(&versions[0]);
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        let mut reads = 0;
                        while !done.load(Ordering::SeqCst) {
                            let (meta, mut file) = storage.open_object("b", "k").unwrap();
                            let mut body = Vec::new();
                            file.read_to_end(&mut body).unwrap();
                            assert_eq!(meta.etag, hex::encode(Md5::digest(&body)));
                            let tagged = format!("type/{}", body[0]);
                            assert_eq!(meta.content_type.as_deref(), Some(tagged.as_str()));
                            let head = storage.head("b", "k").unwrap();
                            let first =
                                usize::from(head.content_type.unwrap().as_bytes()[5] - b'0');
                            assert_eq!(head.etag, hex::encode(Md5::digest(&versions[first])));
                            reads += 1;
                        }
                        reads
                    })
                })
                .collect();
            for round in 0..400 {
                write(&versions[round % versions.len()]);
            }
            done.store(true, Ordering::SeqCst);
            for reader in readers {
                assert!(reader.join().unwrap() > 0);
            }
        });
    }

    #[test]
    fn a_reader_gets_the_record_of_the_file_it_opened() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket("b").unwrap();
        put(&storage, "k", &[b'a'; 4096]);
        let (file, stat) = storage.open_file("b", "k").unwrap();
        // A write of the same size lands between the open and the read of the record, in the
        // same tick of the file system's clock.
        let mut temp = storage.begin_write().unwrap();
        temp.write(&[b'b'; 4096]).unwrap();
        temp.file.set_modified(stat.modified().unwrap()).unwrap();
        let etag = hex::encode(temp.md5());
        let written = storage
            .commit("b", "k", temp, etag, ObjectAttrs::default())
            .unwrap();
        assert_eq!(written.mtime_ns, mtime_ns(&stat));
        let (meta, mut file) = storage.describe("b", "k", file, &stat).unwrap();
        let mut body = Vec::new();
        file.read_to_end(&mut body).unwrap();
        assert_eq!(meta.etag, hex::encode(Md5::digest(&body)));
        assert_eq!(meta, written);
    }

    #[test]
    fn conditional_writes_and_deletes_over_a_file_without_a_record() {
        // Its record is made under the commit lock the conditional write already holds.
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket("b").unwrap();
        fs::write(dir.path().join("b/raw"), b"hello").unwrap();
        let tag = "5d41402abc4b2a76b9719d911017c592".to_owned();
        let temp = storage.begin_write().unwrap();
        let matches = Precondition::Matches(tag);
        let attrs = ObjectAttrs::default();
        storage
            .commit_if("b", "raw", temp, "e".into(), attrs, &matches)
            .unwrap();
        fs::write(dir.path().join("b/raw2"), b"hello").unwrap();
        let err = storage
            .delete_object_if("b", "raw2", None, &Precondition::Matches("x".into()))
            .unwrap_err();
        assert_eq!(err.code(), &S3ErrorCode::PreconditionFailed);
        storage
            .delete_object_if("b", "raw2", None, &matches)
            .unwrap();
        assert!(storage.head("b", "raw2").is_err());
    }

    #[test]
    fn a_shared_root_never_takes_a_record_of_another_file() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap().shared(true);
        storage.create_bucket("b").unwrap();
        let meta = put(&storage, "k", b"bytes");
        // Another server's write placed its file (same size and time), not yet its record.
        let other = dir.path().join("b/k.other");
        fs::write(&other, b"other").unwrap();
        let time = UNIX_EPOCH + std::time::Duration::from_nanos(meta.mtime_ns);
        File::options()
            .write(true)
            .open(&other)
            .unwrap()
            .set_modified(time)
            .unwrap();
        fs::rename(&other, dir.path().join("b/k")).unwrap();
        let head = storage.head("b", "k").unwrap();
        assert_eq!(head.etag, hex::encode(Md5::digest(b"other")));
        assert_eq!(head.content_type, None);
        let sidecar = dir.path().join(".bucketload/meta/b/k");
        let stored: ObjectMeta = serde_json::from_slice(&fs::read(&sidecar).unwrap()).unwrap();
        assert_eq!(
            stored, meta,
            "the other server's record is left for it to write"
        );
    }

    #[test]
    fn a_record_without_an_inode_is_taken_for_the_file_it_describes() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket("b").unwrap();
        let meta = put(&storage, "k", b"bytes");
        // As an earlier version wrote it, or a copy of the root with its times.
        let sidecar = dir.path().join(".bucketload/meta/b/k");
        let old = ObjectMeta {
            inode: 0,
            ..meta.clone()
        };
        fs::write(&sidecar, serde_json::to_vec(&old).unwrap()).unwrap();
        let reopened = Storage::open(dir.path(), false).unwrap();
        assert_eq!(reopened.head("b", "k").unwrap(), meta);
        let stored: ObjectMeta = serde_json::from_slice(&fs::read(&sidecar).unwrap()).unwrap();
        assert_eq!(stored, meta, "the record names its file again");
    }

    #[test]
    fn stale_sidecar_paths_do_not_block_a_write() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket("b").unwrap();
        let meta = dir.path().join(".bucketload/meta/b");
        // A sidecar directory where a file's sidecar goes, and a sidecar file where a
        // directory's own object keeps its sidecar.
        fs::create_dir_all(meta.join("f/old")).unwrap();
        fs::write(meta.join("f/old/x"), b"{}").unwrap();
        fs::create_dir_all(dir.path().join("b/d/e")).unwrap();
        fs::write(meta.join("d"), b"{}").unwrap();
        put(&storage, "f", b"file");
        put(&storage, "d", b"dir's own");
        assert_eq!(
            storage.head("b", "f").unwrap().content_type.as_deref(),
            Some("type/4")
        );
        assert_eq!(
            storage.head("b", "d").unwrap().content_type.as_deref(),
            Some("type/9")
        );
    }

    #[test]
    fn a_folder_marker_over_an_object_moves_it() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket("b").unwrap();
        put(&storage, "a", b"object");
        put(&storage, "a/", b"");
        put(&storage, "a//", b"");
        assert_eq!(get(&storage, "a"), b"object");
        assert_eq!(storage.head("b", "a/").unwrap().size, 0);
        assert_eq!(storage.head("b", "a//").unwrap().size, 0);
        storage.delete("b", "a//").unwrap();
        storage.delete("b", "a/").unwrap();
        assert_eq!(get(&storage, "a"), b"object");
    }

    #[test]
    fn keys_needing_too_long_a_path_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket("b").unwrap();
        let key = format!("{}x", "/".repeat(1000));
        let temp = storage.begin_write().unwrap();
        let err = storage
            .commit("b", &key, temp, "e".into(), ObjectAttrs::default())
            .unwrap_err();
        assert_eq!(err.code(), &S3ErrorCode::KeyTooLongError);
        assert!(storage.head("b", &key).is_err());
        storage.delete("b", &key).unwrap_err();
    }

    #[test]
    fn bucket_names() {
        assert!(check_bucket(".bucketload").is_err());
        assert!(check_bucket("_bucketload").is_err());
        assert!(check_bucket("a/b").is_err());
        assert!(check_bucket("my-bucket").is_ok());
    }

    #[test]
    fn write_head_delete_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket("b").unwrap();
        let mut temp = storage.begin_write().unwrap();
        temp.write(b"hello").unwrap();
        let etag = hex::encode(temp.md5());
        storage
            .commit("b", "x/y/z", temp, etag.clone(), ObjectAttrs::default())
            .unwrap();
        assert_eq!(
            storage.head("b", "x/y/z").unwrap().etag,
            "5d41402abc4b2a76b9719d911017c592"
        );
        assert_eq!(
            storage.head("b", "x/y").unwrap_err().code(),
            &S3ErrorCode::NoSuchKey
        );
        assert_eq!(
            storage.head("b", "x/y/z/w").unwrap_err().code(),
            &S3ErrorCode::NoSuchKey
        );
        storage.delete("b", "x/y/z").unwrap();
        assert!(
            !dir.path().join("b/x").exists(),
            "empty directories are pruned"
        );
        assert_eq!(
            fs::read_dir(dir.path().join(".bucketload/tmp"))
                .unwrap()
                .count(),
            0
        );
        storage.delete_bucket("b").unwrap();
    }

    #[test]
    fn replaced_and_deleted_large_objects_are_freed_in_the_background() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket("b").unwrap();
        let trash = dir.path().join(".bucketload/trash");
        let big = vec![7u8; 3 << 20];
        put(&storage, "k", &big);
        let old = File::open(dir.path().join("b/k")).unwrap();
        put(&storage, "k", b"new");
        assert_eq!(get(&storage, "k"), b"new");
        put(&storage, "gone", &big);
        storage.delete("b", "gone").unwrap();
        assert!(storage.head("b", "gone").is_err());
        let id = storage
            .create_upload("b", "parts", ObjectAttrs::default())
            .unwrap();
        let mut temp = storage.begin_write().unwrap();
        temp.write(&big).unwrap();
        storage
            .commit_part("b", "parts", &id, 1, PartWriter::Own(temp), None)
            .unwrap();
        storage.abort_upload("b", "parts", &id).unwrap();
        storage.reaper.flush();
        assert_eq!(fs::read_dir(&trash).unwrap().count(), 0);
        // The replaced version has no name left: its blocks go once the last reader closes it.
        assert_eq!(old.metadata().unwrap().nlink(), 0);
        assert!(!files_under(dir.path()).iter().any(|f| f.contains("gone")));
    }

    #[test]
    fn files_placed_directly_get_an_etag() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket("b").unwrap();
        fs::write(dir.path().join("b/raw"), b"hello").unwrap();
        assert_eq!(
            storage.head("b", "raw").unwrap().etag,
            "5d41402abc4b2a76b9719d911017c592"
        );
        fs::write(dir.path().join("b/raw"), b"hello world").unwrap();
        assert_eq!(
            storage.head("b", "raw").unwrap().etag,
            "5eb63bbbe01eeed093cb22bb8f5acdc3"
        );
    }
}
