//! On-disk storage of buckets and objects.
//!
//! Layout under the root directory:
//!
//! ```text
//! <bucket>/<key>                      object bytes; key segments are directories
//! .bucketload/meta/<bucket>/<key>     sidecar JSON: ETag, size, mtime, content type, user metadata
//! .bucketload/folders/<bucket>/<md5>  folder markers (keys ending in '/'), named by the key's MD5
//! .bucketload/folder-meta/<bucket>/<md5>  their sidecars
//! .bucketload/uploads/<bucket>/<id>/  multipart uploads in progress (upload.json + one file per part)
//! .bucketload/versions/<bucket>/<md5>/<seq>-<version id>[.json]
//!                                     noncurrent versions and delete markers of the key whose MD5
//!                                     names the directory (see `versions`); buckets that never had
//!                                     versioning have none
//! .bucketload/bucket-config/<bucket>.json  bucket settings, among them the versioning state
//! .bucketload/tmp/                    files being written, renamed into place when complete
//! ```
//!
//! On a versioned bucket the current version of a key stays at `<bucket>/<key>`, its sidecar
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
//! records the size and mtime of the data file it describes; when they no longer match (the
//! file was replaced behind the server's back), the ETag is computed again from the bytes.
//! Every function here is blocking; the S3 layer calls them on Tokio's blocking pool.

mod bucket_config;
mod cleanup;
mod list;
mod multipart;
mod versions;

pub use cleanup::Reclaimed;
pub(crate) use cleanup::{LockError, RootLock, lock_root, reclaim};
pub(crate) use list::{ListItem, ListQuery};
pub(crate) use multipart::CompletedPart;
pub(crate) use versions::{Deleted, NULL_VERSION, VersionItem, VersionQuery, Versioning};

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{self, Read, Write};
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
}

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

/// The directory tree holding every bucket.
#[derive(Debug)]
pub(crate) struct Storage {
    root: PathBuf,
    fsync: bool,
    unique: AtomicU64,
    /// Sidecars by data path, checked against the data file's size and mtime before use.
    cache: Mutex<HashMap<PathBuf, ObjectMeta>>,
    /// Held while a conditional write checks the object it replaces and takes its place, and
    /// while versions are archived, promoted or removed.
    commits: Mutex<()>,
    /// Versioning state by bucket, loaded from the bucket's settings on first use.
    versioning: Mutex<HashMap<String, Versioning>>,
    /// The last sequence number given to an archived version (see the `versions` module).
    seq: AtomicU64,
}

impl Storage {
    /// Opens (creating if needed) the data directory.
    pub(crate) fn open(root: &Path, fsync: bool) -> io::Result<Self> {
        fs::create_dir_all(root.join(INTERNAL_DIR).join("tmp"))?;
        Ok(Self {
            root: root.to_path_buf(),
            fsync,
            unique: AtomicU64::new(0),
            cache: Mutex::new(HashMap::new()),
            commits: Mutex::new(()),
            versioning: Mutex::new(HashMap::new()),
            seq: AtomicU64::new(0),
        })
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

    /// Data and sidecar paths of a key, after checking the key maps safely onto files.
    fn object_paths(&self, bucket: &str, key: &str) -> Result<(PathBuf, PathBuf), S3Error> {
        check_key(key)?;
        if key.ends_with('/') {
            self.bucket_dir(bucket)?;
            return Ok(self.marker_paths(bucket, key));
        }
        let data = self.bucket_dir(bucket)?.join(key);
        let meta = self.internal("meta", bucket).join(key);
        Ok((data, meta))
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

    /// Metadata of an existing object; a key naming a directory does not exist.
    pub(crate) fn head(&self, bucket: &str, key: &str) -> Result<ObjectMeta, S3Error> {
        let (data, meta) = self.object_paths(bucket, key)?;
        let stat = match fs::metadata(&data) {
            Ok(m) if m.is_file() => m,
            Ok(_) => return Err(no_such_key(bucket, key)),
            Err(e) if is_missing(&e) => return Err(no_such_key(bucket, key)),
            Err(e) => return Err(internal(e)),
        };
        self.sidecar(&data, &meta, &stat).map_err(internal)
    }

    /// Metadata and an open file for reading an object (one open and one fstat).
    pub(crate) fn open_object(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<(ObjectMeta, File), S3Error> {
        let (file, stat) = self.open_file(bucket, key)?;
        let meta = self.describe(bucket, key, &stat)?;
        Ok((meta, file))
    }

    /// Opens an object's data file; a key naming a directory does not exist.
    pub(crate) fn open_file(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<(File, fs::Metadata), S3Error> {
        check_bucket(bucket)?;
        check_key(key)?;
        let file = match File::open(self.data_path(bucket, key)) {
            Ok(file) => file,
            Err(e) if is_missing(&e) => {
                return Err(self
                    .bucket_dir(bucket)
                    .err()
                    .unwrap_or_else(|| no_such_key(bucket, key)));
            }
            Err(e) => return Err(internal(e)),
        };
        let stat = file.metadata().map_err(internal)?;
        if !stat.is_file() {
            return Err(no_such_key(bucket, key));
        }
        Ok((file, stat))
    }

    /// The metadata of an object whose data file has `stat`.
    pub(crate) fn describe(
        &self,
        bucket: &str,
        key: &str,
        stat: &fs::Metadata,
    ) -> Result<ObjectMeta, S3Error> {
        let meta_path = match key.ends_with('/') {
            true => self.marker_paths(bucket, key).1,
            false => self.internal("meta", bucket).join(key),
        };
        self.sidecar(&self.data_path(bucket, key), &meta_path, stat)
            .map_err(internal)
    }

    /// The data file of a checked key.
    fn data_path(&self, bucket: &str, key: &str) -> PathBuf {
        match key.ends_with('/') {
            true => self.marker_paths(bucket, key).0,
            false => self.root.join(bucket).join(key),
        }
    }

    /// Reads the sidecar of `data` (from memory when cached), recomputing it when it is
    /// missing or stale.
    fn sidecar(
        &self,
        data: &Path,
        meta_path: &Path,
        stat: &fs::Metadata,
    ) -> io::Result<ObjectMeta> {
        let mtime_ns = mtime_ns(stat);
        let fresh = |m: &ObjectMeta| m.size == stat.len() && m.mtime_ns == mtime_ns;
        if let Some(meta) = self.cache_lock().get(data).filter(|m| fresh(m)) {
            return Ok(meta.clone());
        }
        let stored = fs::read(meta_path)
            .ok()
            .and_then(|b| serde_json::from_slice::<ObjectMeta>(&b).ok());
        let meta = match stored.filter(|m| fresh(m)) {
            Some(meta) => meta,
            None => {
                tracing::debug!(path = %data.display(), "object has no valid sidecar; hashing it");
                let etag = md5_file(data)?;
                let meta = ObjectMeta {
                    etag,
                    size: stat.len(),
                    mtime_ns,
                    ..ObjectMeta::default()
                };
                if let Err(e) = self.write_sidecar(meta_path, &meta) {
                    tracing::warn!(path = %meta_path.display(), error = %e, "cannot store object sidecar");
                }
                meta
            }
        };
        self.remember(data, &meta);
        Ok(meta)
    }

    fn cache_lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, ObjectMeta>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn remember(&self, data: &Path, meta: &ObjectMeta) {
        let mut cache = self.cache_lock();
        if cache.len() >= MAX_CACHED_SIDECARS {
            cache.clear();
        }
        cache.insert(data.to_path_buf(), meta.clone());
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
        let (data, meta_path) = self.object_paths(bucket, key)?;
        if let Some(dir) = meta_path.parent() {
            fs::create_dir_all(dir).map_err(internal)?;
        }
        self.write_sidecar(&meta_path, &meta).map_err(internal)?;
        self.remember(&data, &meta);
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
            md5: Md5::new(),
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
        let (data, meta_path) = self.object_paths(bucket, key)?;
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
        };
        let mut meta = meta;
        // Every write takes the lock, so a conditional write sees no write land between its
        // check and its rename.
        let _commits = self.commits.lock().unwrap_or_else(PoisonError::into_inner);
        precondition.check(self.head(bucket, key))?;
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
        if let Some(folder) = key.strip_suffix('/') {
            // The listing finds a marker by entering its folder's directory.
            let dir = self.root.join(bucket).join(folder);
            if let Err(e) = fs::create_dir_all(&dir) {
                let _ = fs::remove_file(&path);
                return Err(write_error(e, bucket, key));
            }
        }
        if let Err(e) = rename_into(&path, &data) {
            let _ = fs::remove_file(&path);
            // The version this write archived stays current.
            self.undo_make_way(bucket, key, archived);
            return Err(write_error(e, bucket, key));
        }
        self.write_sidecar(&meta_path, &meta).map_err(internal)?;
        self.remember(&data, &meta);
        Ok(meta)
    }

    /// Deletes an object; deleting a missing object succeeds, as in S3.
    pub(crate) fn delete(&self, bucket: &str, key: &str) -> Result<(), S3Error> {
        self.remove_current(bucket, key)
    }

    /// Removes the current object's files (data, sidecar, emptied directories).
    fn remove_current(&self, bucket: &str, key: &str) -> Result<(), S3Error> {
        if let Some(folder) = key.strip_suffix('/') {
            let (data, meta) = self.object_paths(bucket, key)?;
            let _ = fs::remove_file(&data);
            let _ = fs::remove_file(&meta);
            self.cache_lock().remove(&data);
            self.prune_data_dirs(bucket, &self.root.join(bucket).join(folder).join("_"));
            return Ok(());
        }
        let (data, meta) = self.object_paths(bucket, key)?;
        match fs::symlink_metadata(&data) {
            Ok(m) if m.is_dir() => return Ok(()),
            Ok(_) => {}
            Err(e) if is_missing(&e) => return Ok(()),
            Err(e) => return Err(internal(e)),
        }
        match fs::remove_file(&data) {
            Ok(()) => {}
            Err(e) if is_missing(&e) => {}
            Err(e) => return Err(internal(e)),
        }
        let _ = fs::remove_file(&meta);
        self.cache_lock().remove(&data);
        self.prune_data_dirs(bucket, &data);
        prune_empty_dirs(&meta, &self.internal("meta", bucket));
        Ok(())
    }

    /// Forgets the current object whose data file is gone (removed, or moved into the versions
    /// directory): removes its sidecar and the directories it leaves empty.
    fn forget_current(&self, bucket: &str, key: &str) -> Result<(), S3Error> {
        let (data, meta) = self.object_paths(bucket, key)?;
        let _ = fs::remove_file(&meta);
        self.cache_lock().remove(&data);
        match key.strip_suffix('/') {
            Some(folder) => {
                self.prune_data_dirs(bucket, &self.root.join(bucket).join(folder).join("_"))
            }
            None => {
                self.prune_data_dirs(bucket, &data);
                prune_empty_dirs(&meta, &self.internal("meta", bucket));
            }
        }
        Ok(())
    }

    /// Removes the now-empty directories above `path` in the bucket, up to the first one that
    /// holds a folder marker.
    fn prune_data_dirs(&self, bucket: &str, path: &Path) {
        let stop = self.root.join(bucket);
        let mut dir = path.parent();
        while let Some(d) = dir {
            let Ok(rel) = d.strip_prefix(&stop) else {
                break;
            };
            let marker = format!("{}/", rel.to_string_lossy());
            if d == stop || self.has_marker(bucket, &marker) || fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
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

/// An object being written: bytes go to a temporary file while their MD5 is computed.
/// Dropping it before commit removes the file.
#[derive(Debug)]
pub(crate) struct TempObject {
    path: Option<PathBuf>,
    file: File,
    md5: Md5,
    size: u64,
}

impl TempObject {
    pub(crate) fn write(&mut self, bytes: &[u8]) -> Result<(), S3Error> {
        self.md5.update(bytes);
        self.size += bytes.len() as u64;
        self.file.write_all(bytes).map_err(internal)
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
        use std::io::Seek;
        let mut hasher =
            crate::checksum::hasher_for(&algorithm.checksum(String::new())).unwrap_or_default();
        let mut file = &self.file;
        file.seek(io::SeekFrom::Start(0)).map_err(internal)?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = file.read(&mut buf).map_err(internal)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        file.seek(io::SeekFrom::End(0)).map_err(internal)?;
        let sums = hasher.finalize();
        Ok(algorithm.value(&sums).cloned().unwrap_or_default())
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// MD5 of everything passed to [`TempObject::write`].
    pub(crate) fn md5(&self) -> [u8; 16] {
        self.md5.clone().finalize().into()
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

pub(crate) fn md5_file(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Md5::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(hex::encode(hasher.finalize()));
        }
        hasher.update(&buf[..n]);
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

/// Keys become relative paths: no empty, '.' or '..' segments, no NUL, segments of at most
/// 255 bytes (the file-name limit), and no trailing '/' (folder markers are not supported).
pub(crate) fn check_key(key: &str) -> Result<(), S3Error> {
    if key.is_empty() || key.len() > 1024 {
        return Err(s3_error!(KeyTooLongError, "keys must hold 1 to 1024 bytes"));
    }
    // A folder marker `a/b/` is stored apart from objects (see `Storage::marker_paths`).
    let key = key.strip_suffix('/').unwrap_or(key);
    if key.contains('\0') {
        return Err(s3_error!(InvalidArgument, "keys must not contain NUL"));
    }
    for segment in key.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return Err(s3_error!(
                InvalidArgument,
                "key {key:?} has an empty, '.' or '..' segment, which this server cannot store"
            ));
        }
        if segment.len() > 255 {
            return Err(s3_error!(
                KeyTooLongError,
                "key segments must be at most 255 bytes (file-name limit)"
            ));
        }
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

/// Errors placing an object: a key whose path crosses an existing object (or whose name is
/// a directory of other keys) cannot be stored as a file.
fn write_error(e: io::Error, bucket: &str, key: &str) -> S3Error {
    match e.kind() {
        io::ErrorKind::NotADirectory
        | io::ErrorKind::IsADirectory
        | io::ErrorKind::AlreadyExists
        | io::ErrorKind::DirectoryNotEmpty => {
            s3_error!(
                InvalidRequest,
                "key {key} in bucket {bucket} conflicts with another key: this server stores keys as files, so 'a' and 'a/b' cannot both exist"
            )
        }
        _ => internal(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_cannot_be_paths_are_rejected() {
        for bad in [
            "", "/", "/abs", "a//b", "a/../b", "..", ".", "a/./b", "dir//", "nul\0",
        ] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
        for good in [
            "a",
            "a/b/c.tar",
            "with space",
            "ünïcode/ключ",
            "..a",
            "a..",
            ".hidden",
            "dir/",
            "a/b/",
        ] {
            assert!(check_key(good).is_ok(), "{good:?}");
        }
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
