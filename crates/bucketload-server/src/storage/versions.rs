//! S3 versioning. The current version of a key stays where an object of an unversioned bucket
//! lives (its data path and sidecar; the sidecar's `version_id` names it), so reads and
//! listings of current objects do not change. Older (noncurrent) versions and delete markers
//! live apart, in a directory named by the key's MD5:
//!
//! ```text
//! .bucketload/versions/<bucket>/<md5 of key>/<seq>-<version id>       bytes of a noncurrent version
//! .bucketload/versions/<bucket>/<md5 of key>/<seq>-<version id>.json  its record (key, version, metadata,
//!                                                                     delete-marker flag); a delete marker
//!                                                                     has only the record
//! ```
//!
//! `<seq>` is a 20-digit number that grows with every version archived, so names sort oldest
//! first. The invariant: when a key's latest version is an object, it is the current file, and
//! the versions directory holds only older versions and delete markers; when the key has no
//! current file, its latest version is the newest entry of that directory, a delete marker (or
//! nothing). Every change runs under the commit lock, so concurrent writes of one key each
//! archive the version they replace. A bucket whose versioning was never enabled has no
//! versions directory, and its reads and writes look only at the cached [`Versioning`] state.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use md5::{Digest, Md5};
use s3s::{S3Error, S3ErrorCode, s3_error};
use serde::{Deserialize, Serialize};

use super::{
    ListItem, ListQuery, ObjectMeta, Precondition, Storage, internal, is_missing, rename_into,
};

/// Looks for a version that was current when found but replaced before it was opened.
const READ_ATTEMPTS: usize = 3;

/// The version ID of an object written while versioning was off (never enabled, or suspended).
pub(crate) const NULL_VERSION: &str = "null";

/// A bucket's versioning state. Once enabled, a bucket can be suspended but never unversioned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Versioning {
    /// Never enabled: no version IDs anywhere.
    Unversioned,
    /// Every write makes a new version.
    Enabled,
    /// Writes replace the `null` version; older versions stay.
    Suspended,
}

impl Versioning {
    /// True once versioning was ever enabled (or suspended): answers carry version IDs.
    pub(crate) fn is_versioned(self) -> bool {
        self != Self::Unversioned
    }

    pub(crate) fn from_status(status: Option<&str>) -> Self {
        match status {
            Some("Enabled") => Self::Enabled,
            Some("Suspended") => Self::Suspended,
            _ => Self::Unversioned,
        }
    }

    pub(crate) fn status(self) -> Option<&'static str> {
        match self {
            Self::Unversioned => None,
            Self::Enabled => Some("Enabled"),
            Self::Suspended => Some("Suspended"),
        }
    }
}

/// What the versions directory keeps of a noncurrent version or delete marker.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct VersionRecord {
    key: String,
    version_id: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    delete_marker: bool,
    meta: ObjectMeta,
}

/// One version of a key.
#[derive(Clone, Debug)]
pub(crate) struct Version {
    pub(crate) version_id: String,
    pub(crate) delete_marker: bool,
    /// For a delete marker: only `mtime_ns` (its Last-Modified).
    pub(crate) meta: ObjectMeta,
    /// The archived version's path without `.json`; `None` for the current version.
    stem: Option<PathBuf>,
}

/// What a DeleteObject did on a versioned bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Deleted {
    /// The version removed, or the delete marker made.
    pub(crate) version_id: String,
    /// A delete marker was made, or the version removed was one.
    pub(crate) delete_marker: bool,
}

/// One ListObjectVersions request, resolved.
#[derive(Clone, Debug, Default)]
pub(crate) struct VersionQuery {
    pub(crate) prefix: String,
    pub(crate) delimiter: Option<String>,
    pub(crate) key_marker: Option<String>,
    pub(crate) version_marker: Option<String>,
    pub(crate) max_keys: usize,
}

#[derive(Clone, Debug)]
pub(crate) enum VersionItem {
    /// A key's version, and whether it is the latest.
    Version(String, Box<Version>, bool),
    CommonPrefix(String),
}

#[derive(Debug, Default)]
pub(crate) struct VersionPage {
    pub(crate) items: Vec<VersionItem>,
    pub(crate) truncated: bool,
}

impl ObjectMeta {
    /// The version ID of the current version (`null` for one written without versioning).
    pub(crate) fn version(&self) -> &str {
        self.version_id.as_deref().unwrap_or(NULL_VERSION)
    }
}

/// A 404 NoSuchKey or 405 MethodNotAllowed about a delete marker, with the headers S3 sends.
fn marker_error(mut e: S3Error, marker: &Version) -> S3Error {
    let mut headers = http::HeaderMap::new();
    headers.insert(
        "x-amz-delete-marker",
        http::HeaderValue::from_static("true"),
    );
    if let Ok(v) = http::HeaderValue::from_str(&marker.version_id) {
        headers.insert("x-amz-version-id", v);
    }
    let modified = s3s::dto::Timestamp::from(marker.meta.last_modified());
    let mut date = Vec::new();
    if modified
        .format(s3s::dto::TimestampFormat::HttpDate, &mut date)
        .is_ok()
        && let Ok(v) = http::HeaderValue::from_bytes(&date)
    {
        headers.insert(http::header::LAST_MODIFIED, v);
    }
    e.set_headers(headers);
    e
}

fn no_such_version(key: &str, version: &str) -> S3Error {
    s3_error!(
        NoSuchVersion,
        "The specified version does not exist: {version} of {key}"
    )
}

fn method_not_allowed(marker: &Version) -> S3Error {
    marker_error(
        s3_error!(
            MethodNotAllowed,
            "The specified method is not allowed against this resource: the version is a delete marker"
        ),
        marker,
    )
}

impl Storage {
    /// The bucket's versioning state, from memory after the first look.
    pub(crate) fn versioning(&self, bucket: &str) -> Result<Versioning, S3Error> {
        if let Some(v) = self.versioning_lock().get(bucket) {
            return Ok(*v);
        }
        let v = Versioning::from_status(self.bucket_config(bucket)?.versioning.as_deref());
        self.versioning_lock().insert(bucket.to_owned(), v);
        Ok(v)
    }

    pub(super) fn versioning_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Versioning>> {
        self.versioning
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Enables or suspends versioning (PutBucketVersioning).
    pub(crate) fn set_versioning(&self, bucket: &str, state: Versioning) -> Result<(), S3Error> {
        let status = state.status().ok_or_else(|| {
            s3_error!(MalformedXML, "versioning can only be enabled or suspended")
        })?;
        self.update_bucket_config(bucket, |c| c.versioning = Some(status.to_owned()))?;
        Ok(())
    }

    fn versions_dir(&self, bucket: &str, key: &str) -> PathBuf {
        self.internal("versions", bucket)
            .join(hex::encode(Md5::digest(key.as_bytes())))
    }

    /// A number larger than any handed out before (by this process, or, through the clock,
    /// before it).
    fn next_seq(&self) -> u64 {
        let now = now_ns();
        let previous = self
            .seq
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                Some(now.max(last + 1))
            })
            .unwrap_or(now);
        now.max(previous + 1)
    }

    /// The key's archived versions and delete markers, newest first.
    fn archived(&self, bucket: &str, key: &str) -> io::Result<Vec<Version>> {
        let dir = self.versions_dir(bucket, key);
        let mut names: Vec<String> = match fs::read_dir(&dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter_map(|n| n.strip_suffix(".json").map(str::to_owned))
                .collect(),
            Err(e) if is_missing(&e) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        names.sort_unstable_by(|a, b| b.cmp(a));
        let mut versions = Vec::with_capacity(names.len());
        for name in names {
            let stem = dir.join(&name);
            let Some(record) = read_record(&stem) else {
                continue;
            };
            if record.key == key {
                versions.push(Version {
                    version_id: record.version_id,
                    delete_marker: record.delete_marker,
                    meta: record.meta,
                    stem: Some(stem),
                });
            }
        }
        Ok(versions)
    }

    /// The current version, if the key has one.
    fn current_version(&self, bucket: &str, key: &str) -> Result<Option<Version>, S3Error> {
        match self.head(bucket, key) {
            Ok(meta) => Ok(Some(Version {
                version_id: meta.version().to_owned(),
                delete_marker: false,
                meta,
                stem: None,
            })),
            Err(e) if *e.code() == S3ErrorCode::NoSuchKey => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every version of a key, newest (the latest) first.
    pub(crate) fn versions(&self, bucket: &str, key: &str) -> Result<Vec<Version>, S3Error> {
        let mut versions: Vec<Version> = self.current_version(bucket, key)?.into_iter().collect();
        versions.extend(self.archived(bucket, key).map_err(internal)?);
        Ok(versions)
    }

    /// The delete marker that is the key's latest version, if it is one (GET and HEAD of a
    /// deleted key answer its version ID).
    pub(crate) fn latest_marker(&self, bucket: &str, key: &str) -> Option<Version> {
        let latest = self.versions(bucket, key).ok()?.into_iter().next()?;
        latest.delete_marker.then_some(latest)
    }

    /// `e`, an error reading `key`; when it is 404 NoSuchKey and the key's latest version is
    /// a delete marker, with the marker's headers (`x-amz-delete-marker`, `x-amz-version-id`).
    pub(crate) fn explain_missing(&self, e: S3Error, bucket: &str, key: &str) -> S3Error {
        let versioned = self.versioning(bucket).is_ok_and(Versioning::is_versioned);
        if *e.code() != S3ErrorCode::NoSuchKey || !versioned {
            return e;
        }
        match self.latest_marker(bucket, key) {
            Some(marker) => marker_error(e, &marker),
            None => e,
        }
    }

    /// The version `version` of a key (404 NoSuchVersion when there is none); `null` names
    /// the object of an unversioned bucket.
    pub(crate) fn find_version(
        &self,
        bucket: &str,
        key: &str,
        version: &str,
    ) -> Result<Version, S3Error> {
        self.versions(bucket, key)?
            .into_iter()
            .find(|v| v.version_id == version)
            .ok_or_else(|| no_such_version(key, version))
    }

    /// The metadata of version `version` (the current one for `None`); a delete marker: 405.
    pub(crate) fn head_version(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
    ) -> Result<ObjectMeta, S3Error> {
        let Some(version) = version else {
            return self.head(bucket, key);
        };
        let found = self.find_version(bucket, key, version)?;
        if found.delete_marker {
            return Err(method_not_allowed(&found));
        }
        Ok(found.meta)
    }

    /// Metadata and an open file of version `version` (the current one for `None`).
    pub(crate) fn open_version(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
    ) -> Result<(ObjectMeta, fs::File), S3Error> {
        let Some(version) = version else {
            return self.open_object(bucket, key);
        };
        // The current version found may be replaced before it is opened (it is then archived,
        // and found there on the next look).
        for _ in 0..READ_ATTEMPTS {
            let found = self.find_version(bucket, key, version)?;
            if found.delete_marker {
                return Err(method_not_allowed(&found));
            }
            match &found.stem {
                None => {
                    let (meta, file) = self.open_object(bucket, key)?;
                    if meta.version() == version {
                        return Ok((meta, file));
                    }
                }
                Some(stem) => {
                    let file = fs::File::open(stem).map_err(|e| match is_missing(&e) {
                        true => no_such_version(key, version),
                        false => internal(e),
                    })?;
                    return Ok((found.meta, file));
                }
            }
        }
        Err(s3_error!(
            SlowDown,
            "version {version} of {key} was replaced {READ_ATTEMPTS} times while being opened; retry"
        ))
    }

    /// Replaces the tags of version `version` (the current one for `None`), under the commit
    /// lock.
    pub(crate) fn set_version_tags(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        tags: BTreeMap<String, String>,
    ) -> Result<ObjectMeta, S3Error> {
        let _commits = self.lock_commits();
        let found = match version {
            None => None,
            Some(v) => Some(self.find_version(bucket, key, v)?),
        };
        match found {
            Some(v) if v.delete_marker => Err(method_not_allowed(&v)),
            Some(Version {
                stem: Some(stem),
                version_id,
                mut meta,
                ..
            }) => {
                meta.tags = tags;
                let record = VersionRecord {
                    key: key.to_owned(),
                    version_id,
                    delete_marker: false,
                    meta,
                };
                self.write_record(&stem, &record).map_err(internal)?;
                Ok(record.meta)
            }
            _ => self.set_current_tags(bucket, key, tags),
        }
    }

    fn write_record(&self, stem: &Path, record: &VersionRecord) -> io::Result<()> {
        let temp = self.temp_path();
        fs::write(&temp, serde_json::to_vec(record)?)?;
        rename_into(&temp, &json_path(stem)).inspect_err(|_| {
            let _ = fs::remove_file(&temp);
        })
    }

    /// Copies the current version (described by `meta`) into the versions directory: a hard
    /// link, so the current path keeps its file until the caller replaces it (a read never
    /// finds the key missing while a write replaces it) or removes it. Under the commit lock.
    fn archive_current(
        &self,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
    ) -> Result<PathBuf, S3Error> {
        let Some((data, _, cache_key)) = self.current_paths(bucket, key)? else {
            return Err(super::no_such_key(bucket, key));
        };
        let version_id = meta.version().to_owned();
        let stem = self
            .versions_dir(bucket, key)
            .join(format!("{:020}-{version_id}", self.next_seq()));
        if let Some(dir) = stem.parent() {
            fs::create_dir_all(dir).map_err(internal)?;
        }
        if let Err(e) = fs::hard_link(&data, &stem) {
            // A file system without hard links: the current path is empty until replaced.
            tracing::debug!(error = %e, "cannot link an object version; moving it");
            rename_into(&data, &stem).map_err(internal)?;
        }
        self.cache_lock().remove(&cache_key);
        let record = VersionRecord {
            key: key.to_owned(),
            version_id,
            delete_marker: false,
            meta: meta.clone(),
        };
        self.write_record(&stem, &record).map_err(internal)?;
        Ok(stem)
    }

    /// Undoes [`Storage::make_way`] after the write failed: the archived copy goes, or, when
    /// the current file was moved rather than linked, comes back. Under the commit lock.
    pub(super) fn undo_make_way(&self, bucket: &str, key: &str, archived: Option<PathBuf>) {
        let Some(stem) = archived else {
            return;
        };
        match self.current_version(bucket, key) {
            Ok(Some(_)) => remove_archived(&stem),
            _ => {
                let _ = self.promote_newest(bucket, key);
            }
        }
        self.prune_versions_dir(bucket, key);
    }

    /// Removes the archived `null` version or delete marker of a key (a write or delete while
    /// versioning is suspended replaces it). Under the commit lock.
    fn remove_archived_null(&self, bucket: &str, key: &str) -> Result<(), S3Error> {
        for v in self.archived(bucket, key).map_err(internal)? {
            if v.version_id == NULL_VERSION
                && let Some(stem) = &v.stem
            {
                remove_archived(stem);
            }
        }
        Ok(())
    }

    /// Makes way for a new version of `key` on a versioned bucket: archives the current
    /// version, or (suspended) lets the write replace the `null` one. Returns the new
    /// version's ID and the archived copy. Under the commit lock.
    pub(super) fn make_way(
        &self,
        bucket: &str,
        key: &str,
        state: Versioning,
    ) -> Result<(String, Option<PathBuf>), S3Error> {
        let current = self.current_version(bucket, key)?;
        let (keep, id) = match state {
            Versioning::Unversioned => return Ok((NULL_VERSION.to_owned(), None)),
            Versioning::Enabled => (current, self.unique_id()),
            Versioning::Suspended => {
                self.remove_archived_null(bucket, key)?;
                self.prune_versions_dir(bucket, key);
                let keep = current.filter(|v| v.version_id != NULL_VERSION);
                (keep, NULL_VERSION.to_owned())
            }
        };
        let archived = match keep {
            Some(v) => Some(self.archive_current(bucket, key, &v.meta)?),
            None => None,
        };
        Ok((id, archived))
    }

    /// DeleteObject on any bucket: without `version`, the current object (unversioned) or a
    /// new delete marker (versioned); with it, that version, for good. `None` when the bucket
    /// is unversioned (nothing to answer about versions).
    #[cfg(test)]
    pub(crate) fn delete_object(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
    ) -> Result<Option<Deleted>, S3Error> {
        self.delete_object_if(bucket, key, version, &Precondition::None)
    }

    /// [`Storage::delete_object`] if `precondition` (DeleteObject's `If-Match`) holds of the
    /// current version, checked under the commit lock with the delete; otherwise 412
    /// PreconditionFailed (404 NoSuchKey when there is no current object) and nothing changes.
    pub(crate) fn delete_object_if(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        precondition: &Precondition,
    ) -> Result<Option<Deleted>, S3Error> {
        let state = self.versioning(bucket)?;
        match (state, version) {
            (Versioning::Unversioned, None | Some(NULL_VERSION)) => {
                self.delete_if(bucket, key, precondition).map(|()| None)
            }
            (Versioning::Unversioned, Some(_)) => {
                super::check_key(key)?;
                let _commits = self.lock_commits();
                self.check_current(bucket, key, precondition)?;
                Ok(None)
            }
            (_, Some(v)) => self.delete_version(bucket, key, v, precondition).map(Some),
            (_, None) => self
                .add_delete_marker(bucket, key, state, precondition)
                .map(Some),
        }
    }

    fn add_delete_marker(
        &self,
        bucket: &str,
        key: &str,
        state: Versioning,
        precondition: &Precondition,
    ) -> Result<Deleted, S3Error> {
        super::check_key(key)?;
        let _commits = self.lock_commits();
        self.check_current(bucket, key, precondition)?;
        let current = self.current_version(bucket, key)?;
        let version_id = match (state, current) {
            (Versioning::Suspended, Some(v)) if v.version_id == NULL_VERSION => {
                self.remove_current(bucket, key)?;
                NULL_VERSION.to_owned()
            }
            (_, current) => {
                if let Some(v) = current {
                    self.archive_current(bucket, key, &v.meta)?;
                    self.remove_current(bucket, key)?;
                    self.forget_current(bucket, key)?;
                }
                match state {
                    Versioning::Suspended => NULL_VERSION.to_owned(),
                    _ => self.unique_id(),
                }
            }
        };
        if state == Versioning::Suspended {
            self.remove_archived_null(bucket, key)?;
        }
        let stem = self
            .versions_dir(bucket, key)
            .join(format!("{:020}-{version_id}", self.next_seq()));
        let record = VersionRecord {
            key: key.to_owned(),
            version_id: version_id.clone(),
            delete_marker: true,
            meta: ObjectMeta {
                mtime_ns: now_ns(),
                ..ObjectMeta::default()
            },
        };
        self.write_record(&stem, &record).map_err(internal)?;
        Ok(Deleted {
            version_id,
            delete_marker: true,
        })
    }

    /// Removes one version for good; when it was the current one, the next newest object
    /// version becomes current (unless a delete marker is newer). A missing version succeeds.
    fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        version: &str,
        precondition: &Precondition,
    ) -> Result<Deleted, S3Error> {
        super::check_key(key)?;
        let _commits = self.lock_commits();
        self.check_current(bucket, key, precondition)?;
        let found = match self.find_version(bucket, key, version) {
            Ok(found) => found,
            Err(e) if *e.code() == S3ErrorCode::NoSuchVersion => {
                return Ok(Deleted {
                    version_id: version.to_owned(),
                    delete_marker: false,
                });
            }
            Err(e) => return Err(e),
        };
        match &found.stem {
            None => self.remove_current(bucket, key)?,
            Some(stem) => remove_archived(stem),
        }
        self.promote_newest(bucket, key)?;
        self.prune_versions_dir(bucket, key);
        Ok(Deleted {
            version_id: found.version_id,
            delete_marker: found.delete_marker,
        })
    }

    /// When the key has no current file and its newest archived version is an object (not a
    /// delete marker), makes that version current again. Under the commit lock.
    pub(super) fn promote_newest(&self, bucket: &str, key: &str) -> Result<(), S3Error> {
        if self.current_version(bucket, key)?.is_some() {
            return Ok(());
        }
        let Some(newest) = self
            .archived(bucket, key)
            .map_err(internal)?
            .into_iter()
            .next()
        else {
            return Ok(());
        };
        let (false, Some(stem)) = (newest.delete_marker, &newest.stem) else {
            return Ok(());
        };
        let placed = match key.ends_with('/') {
            true => self.place_marker(bucket, key),
            false => self.place_object(bucket, key),
        };
        let (data, meta_path) = placed.map_err(|e| super::write_error(e, bucket, key))?;
        rename_into(stem, &data).map_err(|e| super::write_error(e, bucket, key))?;
        let mut meta = newest.meta;
        meta.version_id = Some(newest.version_id);
        self.write_sidecar(&meta_path, &meta).map_err(internal)?;
        let cache_key = match key.ends_with('/') {
            true => data,
            false => self.root.join(bucket).join(super::keys::key_path(key)),
        };
        self.remember(&cache_key, &meta);
        let _ = fs::remove_file(json_path(stem));
        Ok(())
    }

    /// Removes the key's versions directory once it is empty.
    fn prune_versions_dir(&self, bucket: &str, key: &str) {
        let _ = fs::remove_dir(self.versions_dir(bucket, key));
    }

    /// True when some key of the bucket has noncurrent versions or delete markers.
    pub(super) fn has_archived_versions(&self, bucket: &str) -> bool {
        fs::read_dir(self.internal("versions", bucket)).is_ok_and(|mut it| it.next().is_some())
    }

    /// Keys with archived versions, by MD5 directory (one record read per key).
    fn archived_keys(&self, bucket: &str) -> io::Result<Vec<String>> {
        let root = self.internal("versions", bucket);
        let entries = match fs::read_dir(&root) {
            Ok(entries) => entries,
            Err(e) if is_missing(&e) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut keys = Vec::new();
        for entry in entries {
            let dir = entry?.path();
            let Ok(files) = fs::read_dir(&dir) else {
                continue;
            };
            let record = files
                .filter_map(|f| f.ok()?.file_name().into_string().ok())
                .filter_map(|n| n.strip_suffix(".json").map(str::to_owned))
                .find_map(|stem| read_record(&dir.join(stem)));
            if let Some(record) = record {
                keys.push(record.key);
            }
        }
        Ok(keys)
    }

    /// One page of ListObjectVersions: keys in order, each key's versions newest first,
    /// common prefixes counted as one entry each. Costs one listing of current objects plus one
    /// record read per key with archived versions.
    pub(crate) fn list_versions(
        &self,
        bucket: &str,
        q: &VersionQuery,
    ) -> Result<VersionPage, S3Error> {
        let state = self.versioning(bucket)?;
        let mut page = VersionPage::default();
        if q.max_keys == 0 {
            return Ok(page);
        }
        let want = q.max_keys + 1;
        let after = q.key_marker.clone().filter(|m| !m.is_empty());
        // A marker that is a common prefix (a page ended on it) continues after its keys.
        let skip_prefix = match (&after, &q.delimiter) {
            (Some(m), Some(d)) if m.starts_with(&q.prefix) && m.ends_with(d.as_str()) => {
                Some(m.clone())
            }
            _ => None,
        };
        let mut items = Vec::new();
        if let (Some(key), Some(marker), None) = (&after, &q.version_marker, &skip_prefix)
            && key.starts_with(&q.prefix)
            && let Ok(versions) = self.versions(bucket, key)
            && let Some(i) = versions.iter().position(|v| &v.version_id == marker)
        {
            for (j, v) in versions.into_iter().enumerate().skip(i + 1) {
                items.push(VersionItem::Version(key.clone(), Box::new(v), j == 0));
            }
        }
        let current = self.list(
            bucket,
            &ListQuery {
                prefix: q.prefix.clone(),
                delimiter: q.delimiter.clone(),
                after: after.clone(),
                skip_prefix: skip_prefix.clone(),
                max_keys: want,
            },
        )?;
        // Keys with archived versions, rolled up into common prefixes as the listing does.
        let mut archived = BTreeMap::new();
        if state.is_versioned() {
            for key in self.archived_keys(bucket).map_err(internal)? {
                let listed = key.starts_with(&q.prefix)
                    && after.as_ref().is_none_or(|a| key > *a)
                    && skip_prefix
                        .as_ref()
                        .is_none_or(|s| !key.starts_with(s.as_str()));
                if !listed {
                    continue;
                }
                let rolled = q.delimiter.as_deref().and_then(|d| {
                    let rest = &key[q.prefix.len()..];
                    rest.find(d)
                        .map(|i| key[..q.prefix.len() + i + d.len()].to_owned())
                });
                match rolled {
                    Some(prefix) => archived.insert(prefix, true),
                    None => archived.insert(key, false),
                };
            }
        }
        let mut current = current.items.into_iter().peekable();
        let mut archived = archived.into_iter().peekable();
        while items.len() < want {
            let name_of = |item: &ListItem| match item {
                ListItem::Object(k, _) | ListItem::CommonPrefix(k) => k.clone(),
            };
            let next_current = current.peek().map(name_of);
            let next_archived = archived.peek().map(|(n, _)| n.clone());
            let take_current = match (&next_current, &next_archived) {
                (None, None) => break,
                (Some(c), Some(a)) => c <= a,
                (c, _) => c.is_some(),
            };
            if take_current {
                if next_current == next_archived {
                    archived.next();
                }
                match current.next() {
                    Some(ListItem::CommonPrefix(p)) => items.push(VersionItem::CommonPrefix(p)),
                    Some(ListItem::Object(key, meta)) => {
                        let mut versions = vec![Version {
                            version_id: meta.version().to_owned(),
                            delete_marker: false,
                            meta,
                            stem: None,
                        }];
                        if state.is_versioned() {
                            versions.extend(self.archived(bucket, &key).map_err(internal)?);
                        }
                        push_versions(&mut items, &key, versions);
                    }
                    None => break,
                }
            } else {
                match archived.next() {
                    Some((p, true)) => items.push(VersionItem::CommonPrefix(p)),
                    Some((key, false)) => {
                        let versions = self.versions(bucket, &key)?;
                        push_versions(&mut items, &key, versions);
                    }
                    None => break,
                }
            }
        }
        page.truncated = items.len() > q.max_keys;
        items.truncate(q.max_keys);
        page.items = items;
        Ok(page)
    }
}

fn push_versions(items: &mut Vec<VersionItem>, key: &str, versions: Vec<Version>) {
    for (i, v) in versions.into_iter().enumerate() {
        items.push(VersionItem::Version(key.to_owned(), Box::new(v), i == 0));
    }
}

fn json_path(stem: &Path) -> PathBuf {
    let mut name = stem.as_os_str().to_owned();
    name.push(".json");
    PathBuf::from(name)
}

fn read_record(stem: &Path) -> Option<VersionRecord> {
    serde_json::from_slice(&fs::read(json_path(stem)).ok()?).ok()
}

/// Removes an archived version's record, then its bytes (a delete marker has none).
fn remove_archived(stem: &Path) {
    let _ = fs::remove_file(json_path(stem));
    let _ = fs::remove_file(stem);
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::storage::ObjectAttrs;

    fn put(storage: &Storage, key: &str, bytes: &[u8]) -> ObjectMeta {
        let mut temp = storage.begin_write().unwrap();
        temp.write(bytes).unwrap();
        let etag = hex::encode(temp.md5());
        storage
            .commit("b", key, temp, etag, ObjectAttrs::default())
            .unwrap()
    }

    fn ids(storage: &Storage, key: &str) -> Vec<(String, bool)> {
        storage
            .versions("b", key)
            .unwrap()
            .into_iter()
            .map(|v| (v.version_id, v.delete_marker))
            .collect()
    }

    fn open() -> (tempfile::TempDir, Storage) {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket("b").unwrap();
        (dir, storage)
    }

    #[test]
    fn versions_are_archived_promoted_and_removed() {
        let (dir, storage) = open();
        let current = dir.path().join("b/k");
        assert_eq!(put(&storage, "k", b"old").version_id, None);
        storage.set_versioning("b", Versioning::Enabled).unwrap();
        let v1 = put(&storage, "k", b"one").version_id.unwrap();
        let v2 = put(&storage, "k", b"two").version_id.unwrap();
        let null = NULL_VERSION.to_owned();
        assert_eq!(
            ids(&storage, "k"),
            [
                (v2.clone(), false),
                (v1.clone(), false),
                (null.clone(), false)
            ]
        );
        // The current version stays where an unversioned object lives.
        assert_eq!(fs::read(&current).unwrap(), b"two");

        let marker = storage.delete_object("b", "k", None).unwrap().unwrap();
        assert!(marker.delete_marker);
        assert!(!current.exists());
        assert_eq!(
            storage.head("b", "k").unwrap_err().code(),
            &S3ErrorCode::NoSuchKey
        );
        let latest = storage.latest_marker("b", "k").unwrap();
        assert_eq!(latest.version_id, marker.version_id);

        // Removing the marker makes the newest object version current again.
        let undone = storage
            .delete_object("b", "k", Some(&marker.version_id))
            .unwrap()
            .unwrap();
        assert!(undone.delete_marker);
        assert_eq!(fs::read(&current).unwrap(), b"two");
        assert_eq!(storage.head("b", "k").unwrap().version_id, Some(v2.clone()));
        storage.delete_object("b", "k", Some(&v2)).unwrap();
        assert_eq!(fs::read(&current).unwrap(), b"one");
        let (meta, _) = storage.open_version("b", "k", Some("null")).unwrap();
        assert_eq!(meta.size, 3);

        assert_eq!(
            storage.delete_bucket("b").unwrap_err().code(),
            &S3ErrorCode::BucketNotEmpty
        );
        storage.delete_object("b", "k", Some(&v1)).unwrap();
        storage.delete_object("b", "k", Some("null")).unwrap();
        assert!(ids(&storage, "k").is_empty());
        storage.delete_bucket("b").unwrap();
        assert!(!dir.path().join(".bucketload/versions/b").exists());
    }

    #[test]
    fn suspended_writes_and_deletes_replace_the_null_version() {
        let (_dir, storage) = open();
        storage.set_versioning("b", Versioning::Enabled).unwrap();
        let v1 = put(&storage, "k", b"one").version_id.unwrap();
        storage.set_versioning("b", Versioning::Suspended).unwrap();
        let null = NULL_VERSION.to_owned();
        for body in [&b"n1"[..], b"n2", b"n3"] {
            assert_eq!(put(&storage, "k", body).version_id, Some(null.clone()));
        }
        assert_eq!(
            ids(&storage, "k"),
            [(null.clone(), false), (v1.clone(), false)]
        );
        storage.delete_object("b", "k", None).unwrap();
        storage.delete_object("b", "k", None).unwrap();
        assert_eq!(ids(&storage, "k"), [(null, true), (v1, false)]);
    }

    #[test]
    fn concurrent_writes_of_one_key_keep_every_version() {
        let (_dir, storage) = open();
        storage.set_versioning("b", Versioning::Enabled).unwrap();
        let storage = Arc::new(storage);
        let writers: Vec<_> = (0..4)
            .map(|t| {
                let storage = Arc::clone(&storage);
                std::thread::spawn(move || {
                    (0..10)
                        .map(|i| {
                            put(&storage, "k", format!("{t}-{i}").as_bytes())
                                .version_id
                                .unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut written: Vec<String> = writers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        let mut listed: Vec<String> = ids(&storage, "k").into_iter().map(|v| v.0).collect();
        assert_eq!(listed.len(), 40);
        written.sort();
        listed.sort();
        assert_eq!(listed, written);
    }

    #[test]
    fn reads_never_miss_a_key_while_writes_archive_it() {
        let (_dir, storage) = open();
        storage.set_versioning("b", Versioning::Enabled).unwrap();
        put(&storage, "k", b"first");
        let storage = Arc::new(storage);
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (storage, done) = (Arc::clone(&storage), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut reads = 0;
                while !done.load(Ordering::Relaxed) || reads == 0 {
                    storage.open_object("b", "k").unwrap();
                    reads += 1;
                }
            })
        };
        for i in 0..200 {
            put(&storage, "k", format!("version {i}").as_bytes());
        }
        done.store(true, Ordering::Relaxed);
        reader.join().unwrap();
        assert_eq!(storage.versions("b", "k").unwrap().len(), 201);
    }

    #[test]
    fn listing_pages_through_versions_and_markers() {
        let (_dir, storage) = open();
        storage.set_versioning("b", Versioning::Enabled).unwrap();
        for key in ["a", "b/x", "c"] {
            put(&storage, key, b"1");
            put(&storage, key, b"2");
        }
        storage.delete_object("b", "c", None).unwrap();
        storage.delete_object("b", "c", None).unwrap();
        // "c" has no current object: its entries come from the versions directory only.
        let mut query = VersionQuery {
            max_keys: 2,
            ..VersionQuery::default()
        };
        let mut seen = Vec::new();
        loop {
            let page = storage.list_versions("b", &query).unwrap();
            for item in &page.items {
                let VersionItem::Version(key, v, latest) = item else {
                    panic!("no delimiter, no common prefixes");
                };
                seen.push((key.clone(), v.delete_marker, *latest));
            }
            let Some(VersionItem::Version(key, v, _)) =
                page.items.last().filter(|_| page.truncated)
            else {
                break;
            };
            query.key_marker = Some(key.clone());
            query.version_marker = Some(v.version_id.clone());
        }
        let expect = |k: &str, m, l| (k.to_owned(), m, l);
        assert_eq!(
            seen,
            [
                expect("a", false, true),
                expect("a", false, false),
                expect("b/x", false, true),
                expect("b/x", false, false),
                expect("c", true, true),
                expect("c", true, false),
                expect("c", false, false),
                expect("c", false, false),
            ]
        );
        let rolled = storage
            .list_versions(
                "b",
                &VersionQuery {
                    delimiter: Some("/".into()),
                    max_keys: 1000,
                    ..VersionQuery::default()
                },
            )
            .unwrap();
        assert!(matches!(&rolled.items[2], VersionItem::CommonPrefix(p) if p == "b/"));
        assert_eq!(rolled.items.len(), 7);
    }
}
