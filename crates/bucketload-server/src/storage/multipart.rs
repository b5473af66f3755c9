//! Multipart uploads: one directory per upload holding `upload.json` and, per part,
//! `NNNNN` (bytes) and `NNNNN.json` (ETag and size). Completion concatenates the listed parts
//! into a temporary file (`copy_file_range` where the kernel has it) and commits it like a
//! single PUT, with the S3 multipart ETag: MD5 of the concatenated binary part MD5s + "-N".

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use md5::{Digest, Md5};
use s3s::{S3Error, s3_error};
use serde::{Deserialize, Serialize};

use super::{ObjectAttrs, ObjectMeta, Precondition, Storage, TempObject, internal, is_missing};
use crate::checksum::{self, Algorithm};

/// S3's limit on part numbers.
const MAX_PART_NUMBER: i32 = 10_000;
/// In the directory of a completed upload (its parts gone): the key and the object's ETag.
pub(super) const COMPLETED: &str = "completed.json";

/// How long a completed upload's record answers repeated completions.
pub(super) const REMEMBER_COMPLETED: std::time::Duration =
    std::time::Duration::from_secs(24 * 3600);

#[derive(Debug, Serialize, Deserialize)]
struct Completed {
    key: String,
    etag: String,
}

/// Removes the record of an upload completed more than [`REMEMBER_COMPLETED`] ago.
fn forget_old_completion(dir: &Path) {
    let done = dir.join(COMPLETED);
    let old = fs::metadata(&done)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > REMEMBER_COMPLETED);
    if old {
        let _ = fs::remove_dir_all(dir);
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct UploadRecord {
    key: String,
    initiated_ns: u64,
    attrs: ObjectAttrs,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PartInfo {
    pub(crate) number: i32,
    pub(crate) etag: String,
    pub(crate) size: u64,
    pub(crate) mtime_ns: u64,
    /// The part's checksum (base64) in the upload's algorithm, when it declared one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) checksum: Option<String>,
}

#[derive(Clone, Debug)]
pub(crate) struct UploadInfo {
    pub(crate) key: String,
    pub(crate) id: String,
    pub(crate) initiated: SystemTime,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn no_such_upload(id: &str) -> S3Error {
    s3_error!(
        NoSuchUpload,
        "multipart upload {id} does not exist; it may have been completed or aborted"
    )
}

/// A part as CompleteMultipartUpload lists it.
#[derive(Clone, Debug, Default)]
pub(crate) struct CompletedPart {
    pub(crate) number: i32,
    pub(crate) etag: String,
    /// The checksums the request gives for the part.
    pub(crate) checksum: s3s::dto::Checksum,
}

/// The checksum of the object an upload completes: of the upload's algorithm and type, from
/// the parts' stored checksums. The request must name each part's checksum, and any
/// whole-object checksum it gives must match (400 BadDigest), as S3 requires; an upload
/// made without an algorithm makes an object without a checksum.
fn object_checksum(
    upload: Option<&checksum::Stored>,
    parts: &[CompletedPart],
    used: &[&PartInfo],
    declared: &s3s::dto::Checksum,
) -> Result<Option<checksum::Stored>, S3Error> {
    let Some((upload, algorithm)) = upload.and_then(|u| Some((u, u.algorithm()?))) else {
        if Algorithm::ALL.iter().any(|a| a.value(declared).is_some()) {
            return Err(s3_error!(
                InvalidRequest,
                "The upload was created without a checksum algorithm, so the completion cannot be checked against a checksum; create the upload with x-amz-checksum-algorithm"
            ));
        }
        return Ok(None);
    };
    let mut values = Vec::with_capacity(used.len());
    for info in used {
        let value = info.checksum.as_deref().ok_or_else(|| {
            s3_error!(
                InvalidPart,
                "part {} was uploaded without its {} checksum; upload it again",
                info.number,
                algorithm.name()
            )
        })?;
        values.push((value, info.size));
    }
    let value = checksum::of_parts(algorithm, &upload.kind, &values)?;
    if let Some(want) = algorithm.value(declared)
        && *want != value
    {
        return Err(s3_error!(
            BadDigest,
            "the object's {} checksum is {value}, but the completion says {want}",
            algorithm.name()
        ));
    }
    for (part, (stored, _)) in parts.iter().zip(&values) {
        match algorithm.value(&part.checksum) {
            None => {
                return Err(s3_error!(
                    InvalidRequest,
                    "The upload was created using a {} checksum. The complete request must include the checksum for each part. It was missing for part {} in the request.",
                    algorithm.name().to_lowercase(),
                    part.number
                ));
            }
            Some(given) if given != stored => {
                return Err(s3_error!(
                    InvalidPart,
                    "part {}'s {} checksum is {stored}, not {given}",
                    part.number,
                    algorithm.name()
                ));
            }
            Some(_) => {}
        }
    }
    Ok(Some(checksum::Stored {
        algorithm: algorithm.name().to_owned(),
        value,
        kind: upload.kind.clone(),
        parts: values.iter().map(|(v, _)| (*v).to_owned()).collect(),
    }))
}

impl Storage {
    pub(crate) fn create_upload(
        &self,
        bucket: &str,
        key: &str,
        attrs: ObjectAttrs,
    ) -> Result<String, S3Error> {
        super::check_key(key)?;
        self.bucket_dir(bucket)?;
        let id = self.unique_id();
        let dir = self.internal("uploads", bucket).join(&id);
        fs::create_dir_all(&dir).map_err(internal)?;
        let record = UploadRecord {
            key: key.to_owned(),
            initiated_ns: now_ns(),
            attrs,
        };
        fs::write(
            dir.join("upload.json"),
            serde_json::to_vec(&record).map_err(|e| internal(e.into()))?,
        )
        .map_err(internal)?;
        Ok(id)
    }

    /// The directory of upload `id`, checking it exists and belongs to `key`.
    fn upload_dir(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
    ) -> Result<(PathBuf, UploadRecord), S3Error> {
        self.bucket_dir(bucket)?;
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(no_such_upload(id));
        }
        let dir = self.internal("uploads", bucket).join(id);
        let bytes = fs::read(dir.join("upload.json")).map_err(|e| {
            if is_missing(&e) {
                no_such_upload(id)
            } else {
                internal(e)
            }
        })?;
        let record: UploadRecord =
            serde_json::from_slice(&bytes).map_err(|e| internal(e.into()))?;
        if record.key != key {
            return Err(no_such_upload(id));
        }
        Ok((dir, record))
    }

    /// Checks an upload exists before its part's bytes are received; returns the checksum
    /// algorithm it declared.
    pub(crate) fn check_upload(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        part: i32,
    ) -> Result<Option<Algorithm>, S3Error> {
        if !(1..=MAX_PART_NUMBER).contains(&part) {
            return Err(s3_error!(
                InvalidArgument,
                "part numbers must lie between 1 and 10000"
            ));
        }
        let (_, record) = self.upload_dir(bucket, key, id)?;
        Ok(record.attrs.checksum.and_then(|c| c.algorithm()))
    }

    /// Stores a received part, replacing any earlier part with the same number.
    pub(crate) fn commit_part(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        part: i32,
        mut temp: TempObject,
        checksum: Option<String>,
    ) -> Result<PartInfo, S3Error> {
        let (dir, _) = self.upload_dir(bucket, key, id)?;
        let info = PartInfo {
            number: part,
            etag: hex::encode(temp.md5()),
            size: temp.size(),
            mtime_ns: now_ns(),
            checksum,
        };
        let Some(path) = temp.path.take() else {
            return Err(s3_error!(InternalError, "part written twice"));
        };
        let part_path = dir.join(format!("{part:05}"));
        if let Err(e) = fs::rename(&path, &part_path) {
            let _ = fs::remove_file(&path);
            return Err(if is_missing(&e) {
                no_such_upload(id)
            } else {
                internal(e)
            });
        }
        let json = serde_json::to_vec(&info).map_err(|e| internal(e.into()))?;
        fs::write(dir.join(format!("{part:05}.json")), json).map_err(internal)?;
        Ok(info)
    }

    /// UploadPartCopy: stores bytes `range` (the whole object when `None`) of an existing
    /// object as part `part`, hashing them for the part's ETag. `check` sees the source's
    /// metadata first (copy-source conditions).
    pub(crate) fn copy_part(
        &self,
        (bucket, key, id, part): (&str, &str, &str, i32),
        (src_bucket, src_key, src_version): (&str, &str, Option<&str>),
        range: Option<std::ops::RangeInclusive<u64>>,
        check: impl FnOnce(&ObjectMeta) -> Result<(), S3Error>,
    ) -> Result<(PartInfo, ObjectMeta), S3Error> {
        let algorithm = self.check_upload(bucket, key, id, part)?;
        let (source, file) = self.open_version(src_bucket, src_key, src_version)?;
        check(&source)?;
        let span = match range {
            None => 0..source.size,
            Some(r) if *r.end() < source.size => *r.start()..*r.end() + 1,
            Some(r) => {
                return Err(s3_error!(
                    InvalidRange,
                    "copy range bytes={}-{} is not valid for a source object of {} bytes",
                    r.start(),
                    r.end(),
                    source.size
                ));
            }
        };
        let mut temp = self.begin_write()?;
        temp.write_range(&file, span)?;
        let checksum = algorithm.map(|a| temp.checksum(a)).transpose()?;
        let info = self.commit_part(bucket, key, id, part, temp, checksum)?;
        Ok((info, source))
    }

    pub(crate) fn list_parts(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
    ) -> Result<(Vec<PartInfo>, Option<checksum::Stored>), S3Error> {
        let (dir, record) = self.upload_dir(bucket, key, id)?;
        Ok((
            read_parts(&dir).map_err(internal)?,
            record.attrs.checksum.map(|c| *c),
        ))
    }

    /// Assembles the listed parts (ascending numbers, matching ETags) into the object.
    pub(crate) fn complete_upload(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        (parts, declared): (&[CompletedPart], &s3s::dto::Checksum),
        min_part_size: u64,
        precondition: &Precondition,
    ) -> Result<ObjectMeta, S3Error> {
        let (dir, record) = match self.upload_dir(bucket, key, id) {
            Ok(found) => found,
            Err(e) => return self.completed_before(bucket, key, id).ok_or(e),
        };
        if parts.is_empty() {
            return Err(s3_error!(
                MalformedXML,
                "CompleteMultipartUpload must list at least one part"
            ));
        }
        if parts.windows(2).any(|w| w[0].number >= w[1].number) {
            return Err(s3_error!(
                InvalidPartOrder,
                "parts must be listed in ascending order of part number"
            ));
        }
        let stored = read_parts(&dir).map_err(internal)?;
        let mut temp = self.begin_write()?;
        let mut md5s = Md5::new();
        let mut sizes = Vec::with_capacity(parts.len());
        let mut used = Vec::with_capacity(parts.len());
        for (i, CompletedPart { number, etag, .. }) in parts.iter().enumerate() {
            let info = stored
                .iter()
                .find(|p| p.number == *number && p.etag == etag.trim_matches('"'))
                .ok_or_else(|| {
                    s3_error!(
                        InvalidPart,
                        "part {number} was not uploaded or its ETag differs"
                    )
                })?;
            if i + 1 < parts.len() && info.size < min_part_size {
                return Err(s3_error!(
                    EntityTooSmall,
                    "part {number} holds {} bytes; every part but the last needs at least {min_part_size} bytes (as S3; ServerBuilder::with_min_part_size lowers it)",
                    info.size
                ));
            }
            md5s.update(
                hex::decode(&info.etag)
                    .map_err(|_| s3_error!(InternalError, "corrupt part record"))?,
            );
            temp.append_file(&dir.join(format!("{number:05}")))?;
            sizes.push(info.size);
            used.push(info);
        }
        let checksum = object_checksum(record.attrs.checksum.as_deref(), parts, &used, declared)?
            .map(Box::new);
        let etag = format!("{}-{}", hex::encode(md5s.finalize()), parts.len());
        let attrs = ObjectAttrs {
            parts: sizes,
            checksum,
            ..record.attrs
        };
        let meta = self.commit_if(bucket, key, temp, etag, attrs, precondition)?;
        // Remember the completion, so a repeated CompleteMultipartUpload (its first answer
        // lost) is answered as S3 does: 200 with the object's ETag.
        let done = Completed {
            key: key.to_owned(),
            etag: meta.etag.clone(),
        };
        let _ = fs::remove_dir_all(&dir);
        if let Ok(json) = serde_json::to_vec(&done) {
            let _ = fs::create_dir_all(&dir).and_then(|()| fs::write(dir.join(COMPLETED), json));
        }
        Ok(meta)
    }

    /// The object an upload made, when `id` was completed for `key` and the object is still
    /// the one it made.
    fn completed_before(&self, bucket: &str, key: &str, id: &str) -> Option<ObjectMeta> {
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let dir = self.internal("uploads", bucket).join(id);
        let done: Completed = serde_json::from_slice(&fs::read(dir.join(COMPLETED)).ok()?).ok()?;
        let meta = self.head(bucket, key).ok()?;
        (done.key == key && done.etag == meta.etag).then_some(meta)
    }

    pub(crate) fn abort_upload(&self, bucket: &str, key: &str, id: &str) -> Result<(), S3Error> {
        let (dir, _) = self.upload_dir(bucket, key, id)?;
        fs::remove_dir_all(&dir).map_err(|e| {
            if is_missing(&e) {
                no_such_upload(id)
            } else {
                internal(e)
            }
        })
    }

    /// Uploads in progress, ordered by key then initiation time.
    pub(crate) fn list_uploads(
        &self,
        bucket: &str,
        prefix: &str,
    ) -> Result<Vec<UploadInfo>, S3Error> {
        self.bucket_dir(bucket)?;
        let root = self.internal("uploads", bucket);
        let entries = match fs::read_dir(&root) {
            Ok(entries) => entries,
            Err(e) if is_missing(&e) => return Ok(Vec::new()),
            Err(e) => return Err(internal(e)),
        };
        let mut uploads = Vec::new();
        for entry in entries {
            let entry = entry.map_err(internal)?;
            let Ok(id) = entry.file_name().into_string() else {
                continue;
            };
            let Some(record) = read_record(&entry.path()) else {
                forget_old_completion(&entry.path());
                continue;
            };
            if record.key.starts_with(prefix) {
                let initiated = UNIX_EPOCH + std::time::Duration::from_nanos(record.initiated_ns);
                uploads.push(UploadInfo {
                    key: record.key,
                    id,
                    initiated,
                });
            }
        }
        uploads.sort_by(|a, b| (&a.key, a.initiated).cmp(&(&b.key, b.initiated)));
        Ok(uploads)
    }
}

impl TempObject {
    /// Appends bytes `span` of `file`, hashing them like [`TempObject::write`].
    fn write_range(&mut self, file: &fs::File, span: std::ops::Range<u64>) -> Result<(), S3Error> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; (span.end - span.start).min(1 << 20) as usize];
        let mut offset = span.start;
        while offset < span.end {
            let n = (span.end - offset).min(buf.len() as u64) as usize;
            file.read_exact_at(&mut buf[..n], offset)
                .map_err(internal)?;
            self.write(&buf[..n])?;
            offset += n as u64;
        }
        Ok(())
    }
}

fn read_record(dir: &Path) -> Option<UploadRecord> {
    serde_json::from_slice(&fs::read(dir.join("upload.json")).ok()?).ok()
}

fn read_parts(dir: &Path) -> std::io::Result<Vec<PartInfo>> {
    let mut parts = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.len() == 10
            && name.ends_with(".json")
            && name.as_bytes()[0].is_ascii_digit()
            && let Ok(info) = serde_json::from_slice::<PartInfo>(&fs::read(entry.path())?)
        {
            parts.push(info);
        }
    }
    parts.sort_by_key(|p| p.number);
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(number: i32, etag: &str) -> CompletedPart {
        CompletedPart {
            number,
            etag: etag.to_owned(),
            ..CompletedPart::default()
        }
    }

    fn upload_part(storage: &Storage, id: &str, n: i32, bytes: &[u8]) -> PartInfo {
        let mut temp = storage.begin_write().unwrap();
        temp.write(bytes).unwrap();
        storage.commit_part("b", "k", id, n, temp, None).unwrap()
    }

    #[test]
    fn multipart_etag_is_md5_of_part_md5s() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket("b").unwrap();
        let id = storage
            .create_upload("b", "k", ObjectAttrs::default())
            .unwrap();
        let p1 = upload_part(&storage, &id, 1, b"hello ");
        let p2 = upload_part(&storage, &id, 2, b"world");
        assert_eq!(storage.list_uploads("b", "").unwrap().len(), 1);
        assert_eq!(storage.list_parts("b", "k", &id).unwrap().0.len(), 2);
        let parts = [part(1, &p1.etag), part(2, &p2.etag)];
        let none = s3s::dto::Checksum::default();
        let err = storage
            .complete_upload("b", "k", &id, (&parts, &none), 100, &Precondition::None)
            .unwrap_err();
        assert_eq!(err.code(), &s3s::S3ErrorCode::EntityTooSmall);
        let meta = storage
            .complete_upload("b", "k", &id, (&parts, &none), 0, &Precondition::None)
            .unwrap();
        let mut md5s = Vec::new();
        md5s.extend(hex::decode(&p1.etag).unwrap());
        md5s.extend(hex::decode(&p2.etag).unwrap());
        assert_eq!(meta.etag, format!("{}-2", hex::encode(Md5::digest(&md5s))));
        assert_eq!(fs::read(dir.path().join("b/k")).unwrap(), b"hello world");
        assert!(storage.list_uploads("b", "").unwrap().is_empty());
        assert_eq!(
            storage.abort_upload("b", "k", &id).unwrap_err().code(),
            &s3s::S3ErrorCode::NoSuchUpload
        );
    }

    #[test]
    fn copied_parts_hash_their_range() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket("b").unwrap();
        let mut temp = storage.begin_write().unwrap();
        temp.write(b"0123456789").unwrap();
        storage
            .commit("b", "src", temp, "e".into(), ObjectAttrs::default())
            .unwrap();
        let id = storage
            .create_upload("b", "k", ObjectAttrs::default())
            .unwrap();
        let ok = |_: &ObjectMeta| Ok(());
        let (p1, _) = storage
            .copy_part(("b", "k", &id, 1), ("b", "src", None), Some(2..=5), ok)
            .unwrap();
        assert_eq!(p1.etag, hex::encode(Md5::digest(b"2345")));
        let (p2, source) = storage
            .copy_part(("b", "k", &id, 2), ("b", "src", None), None, ok)
            .unwrap();
        assert_eq!((p2.size, source.size), (10, 10));
        let err = storage
            .copy_part(("b", "k", &id, 3), ("b", "src", None), Some(5..=10), ok)
            .unwrap_err();
        assert_eq!(err.code(), &s3s::S3ErrorCode::InvalidRange);
        let err = storage
            .copy_part(("b", "k", &id, 3), ("b", "nope", None), None, ok)
            .unwrap_err();
        assert_eq!(err.code(), &s3s::S3ErrorCode::NoSuchKey);
        let parts = [part(1, &p1.etag), part(2, &p2.etag)];
        let none = s3s::dto::Checksum::default();
        storage
            .complete_upload("b", "k", &id, (&parts, &none), 0, &Precondition::None)
            .unwrap();
        assert_eq!(fs::read(dir.path().join("b/k")).unwrap(), b"23450123456789");
    }
}
