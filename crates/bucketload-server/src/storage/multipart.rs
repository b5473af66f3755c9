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

use super::assembly::{ASSEMBLY, PartWriter, copy_range};
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
    /// The upload's slot size when the part sits in its slot of the assembly file (see
    /// `assembly`); otherwise it is a file of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) slot: Option<u64>,
}

#[derive(Clone, Debug)]
pub(crate) struct UploadInfo {
    pub(crate) key: String,
    pub(crate) id: String,
    pub(crate) initiated: SystemTime,
}

pub(super) fn now_ns() -> u64 {
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

    /// Where part `part` of upload `id`, announced as `size` bytes, is received (see
    /// [`Storage::begin_part`]).
    pub(crate) fn receive_part(
        &self,
        (bucket, key, id): (&str, &str, &str),
        part: i32,
        announced: (Option<u64>, u64),
    ) -> Result<PartWriter, S3Error> {
        let (dir, _) = self.upload_dir(bucket, key, id)?;
        self.begin_part(&dir, part, announced)
    }

    /// Stores a received part, replacing any earlier part with the same number.
    pub(crate) fn commit_part(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        part: i32,
        writer: PartWriter,
        checksum: Option<String>,
    ) -> Result<PartInfo, S3Error> {
        let (dir, _) = self.upload_dir(bucket, key, id)?;
        let part_path = dir.join(format!("{part:05}"));
        let info = match writer {
            PartWriter::Slot(slot) => {
                let info = PartInfo {
                    checksum,
                    ..slot.finish(part, self.fsync).map_err(internal)?
                };
                self.write_part_record(&dir, &info)?;
                // Its lock is held until the record names the slot. The record no longer
                // names a file an earlier upload of this part left.
                drop(slot);
                match fs::remove_file(&part_path) {
                    Err(e) if !is_missing(&e) => return Err(internal(e)),
                    _ => {}
                }
                info
            }
            PartWriter::Own(mut temp) => {
                let info = PartInfo {
                    number: part,
                    etag: hex::encode(temp.md5()),
                    size: temp.size(),
                    mtime_ns: now_ns(),
                    checksum,
                    slot: None,
                };
                let Some(path) = temp.path.take() else {
                    return Err(s3_error!(InternalError, "part written twice"));
                };
                if self.fsync {
                    temp.file.sync_all().map_err(internal)?;
                }
                if let Err(e) = fs::rename(&path, &part_path) {
                    let _ = fs::remove_file(&path);
                    return Err(if is_missing(&e) {
                        no_such_upload(id)
                    } else {
                        internal(e)
                    });
                }
                self.write_part_record(&dir, &info)?;
                info
            }
        };
        Ok(info)
    }

    /// Writes a part's record under a private name and renames it into place, so readers see
    /// the old record or the new one.
    fn write_part_record(&self, dir: &Path, info: &PartInfo) -> Result<(), S3Error> {
        let json = serde_json::to_vec(info).map_err(|e| internal(e.into()))?;
        let private = self.temp_path();
        fs::write(&private, json).map_err(internal)?;
        fs::rename(&private, dir.join(format!("{:05}.json", info.number))).map_err(|e| {
            let _ = fs::remove_file(&private);
            if is_missing(&e) {
                no_such_upload(&dir.file_name().unwrap_or_default().to_string_lossy())
            } else {
                internal(e)
            }
        })
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
        let info = self.commit_part(bucket, key, id, part, PartWriter::Own(temp), checksum)?;
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
        // S3 Express: "the PartNumber must start at 1 and the part numbers must be consecutive".
        if crate::directory::is_directory_bucket(bucket)
            && let Some((i, p)) = parts
                .iter()
                .enumerate()
                .find(|(i, p)| p.number != *i as i32 + 1)
        {
            return Err(s3_error!(
                InvalidPartOrder,
                "in a directory bucket the part numbers must start at 1 and be consecutive; part {} is listed where part {} belongs",
                p.number,
                i + 1
            ));
        }
        let stored = read_parts(&dir).map_err(internal)?;
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
            sizes.push(info.size);
            used.push(info);
        }
        let (temp, in_place) = match self.assembled_in_place(&dir, &used)? {
            Some(temp) => (temp, true),
            None => (self.copy_parts(&dir, &used)?, false),
        };
        let checksum = object_checksum(record.attrs.checksum.as_deref(), parts, &used, declared)?
            .map(Box::new);
        let etag = format!("{}-{}", hex::encode(md5s.finalize()), parts.len());
        let attrs = ObjectAttrs {
            parts: sizes,
            checksum,
            ..record.attrs
        };
        let committed = self.commit_if(bucket, key, temp, etag, attrs, precondition);
        if in_place && committed.is_err() {
            self.unseal(&dir);
        }
        let meta = committed?;
        // Remember the completion, so a repeated CompleteMultipartUpload (its first answer
        // lost) is answered as S3 does: 200 with the object's ETag.
        let done = Completed {
            key: key.to_owned(),
            etag: meta.etag.clone(),
        };
        let _ = self.discard(&dir);
        if let Ok(json) = serde_json::to_vec(&done) {
            let _ = fs::create_dir_all(&dir).and_then(|()| fs::write(dir.join(COMPLETED), json));
        }
        Ok(meta)
    }

    /// A temporary file holding `parts` one after another, copied from their files or slots.
    fn copy_parts(&self, dir: &Path, parts: &[&PartInfo]) -> Result<TempObject, S3Error> {
        let mut temp = self.begin_write()?;
        let assembly = match parts.iter().any(|p| p.slot.is_some()) {
            true => Some(fs::File::open(dir.join(ASSEMBLY)).map_err(internal)?),
            false => None,
        };
        for info in parts {
            let (Some(slot_size), Some(from)) = (info.slot, &assembly) else {
                temp.append_file(&dir.join(format!("{:05}", info.number)))?;
                continue;
            };
            let offset = u64::try_from(info.number - 1).unwrap_or(0) * slot_size;
            copy_range(from, offset, info.size, &mut temp.file).map_err(internal)?;
            temp.size += info.size;
        }
        Ok(temp)
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
        self.discard(&dir).map_err(|e| {
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
        storage
            .commit_part("b", "k", id, n, PartWriter::Own(temp), None)
            .unwrap()
    }

    /// Part `n` received as a request announcing `hint` bytes would be, in chunks of 3 bytes.
    fn upload_announced(storage: &Storage, id: &str, n: i32, bytes: &[u8], hint: u64) -> PartInfo {
        let mut writer = storage
            .receive_part(("b", "k", id), n, (Some(hint).filter(|&h| h > 0), 5))
            .unwrap();
        for chunk in bytes.chunks(3) {
            writer
                .write(storage, bytes::Bytes::copy_from_slice(chunk))
                .unwrap();
        }
        storage.commit_part("b", "k", id, n, writer, None).unwrap()
    }

    fn inode(path: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(path).unwrap().ino()
    }

    fn complete(storage: &Storage, id: &str, parts: &[&PartInfo]) -> Result<ObjectMeta, S3Error> {
        complete_if(storage, id, parts, &Precondition::None)
    }

    fn complete_if(
        storage: &Storage,
        id: &str,
        parts: &[&PartInfo],
        precondition: &Precondition,
    ) -> Result<ObjectMeta, S3Error> {
        let listed: Vec<_> = parts.iter().map(|p| part(p.number, &p.etag)).collect();
        let none = s3s::dto::Checksum::default();
        storage.complete_upload("b", "k", id, (&listed, &none), 0, precondition)
    }

    fn etag_of(parts: &[&[u8]]) -> String {
        let md5s: Vec<u8> = parts.iter().flat_map(|p| Md5::digest(p).to_vec()).collect();
        format!("{}-{}", hex::encode(Md5::digest(&md5s)), parts.len())
    }

    fn new_upload() -> (tempfile::TempDir, Storage, String, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket("b").unwrap();
        let id = storage
            .create_upload("b", "k", ObjectAttrs::default())
            .unwrap();
        let upload = storage.internal("uploads", "b").join(&id);
        (dir, storage, id, upload)
    }

    #[test]
    fn a_directory_bucket_needs_consecutive_parts_and_hides_the_md5() {
        let bucket = "d--use1-az4--x-s3";
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket(bucket).unwrap();
        let id = storage
            .create_upload(bucket, "k", ObjectAttrs::default())
            .unwrap();
        let upload = |n: i32, bytes: &[u8]| {
            let mut temp = storage.begin_write().unwrap();
            temp.write(bytes).unwrap();
            storage
                .commit_part(bucket, "k", &id, n, PartWriter::Own(temp), None)
                .unwrap()
        };
        let (i1, i3) = (upload(1, b"one"), upload(3, b"three"));
        let none = s3s::dto::Checksum::default();
        let gap = [part(1, &i1.etag), part(3, &i3.etag)];
        let e = storage
            .complete_upload(bucket, "k", &id, (&gap, &none), 0, &Precondition::None)
            .unwrap_err();
        assert_eq!(e.code(), &s3s::S3ErrorCode::InvalidPartOrder);
        let i2 = upload(2, b"two");
        let all = [part(1, &i1.etag), part(2, &i2.etag), part(3, &i3.etag)];
        let meta = storage
            .complete_upload(bucket, "k", &id, (&all, &none), 0, &Precondition::None)
            .unwrap();
        let plain = etag_of(&[b"one", b"two", b"three"]);
        assert_eq!(meta.etag, crate::directory::etag(&plain));
        assert_eq!(storage.head(bucket, "k").unwrap().etag, meta.etag);
    }

    #[test]
    fn parts_in_their_slots_become_the_object_without_a_copy() {
        let (dir, storage, id, upload) = new_upload();
        let (p1, p2, p3) = (
            b"first part".as_slice(),
            b"other part".as_slice(),
            b"end".as_slice(),
        );
        // Out of order, the last part (shorter) neither first nor last to arrive.
        let i2 = upload_announced(&storage, &id, 2, p2, 10);
        let i3 = upload_announced(&storage, &id, 3, p3, 3);
        let i1 = upload_announced(&storage, &id, 1, p1, 10);
        assert_eq!((i1.slot, i2.slot, i3.slot), (Some(10), Some(10), Some(10)));
        assert_eq!(i1.etag, hex::encode(Md5::digest(p1)));
        let assembly = inode(&upload.join(ASSEMBLY));
        let meta = complete(&storage, &id, &[&i1, &i2, &i3]).unwrap();
        assert_eq!(meta.etag, etag_of(&[p1, p2, p3]));
        assert_eq!(meta.size, 23);
        let object = dir.path().join("b/k");
        assert_eq!(fs::read(&object).unwrap(), b"first partother partend");
        assert_eq!(
            inode(&object),
            assembly,
            "the assembly file became the object"
        );
        // Nothing can be written into it any more.
        let late = storage
            .receive_part(("b", "k", &id), 4, (Some(10), 5))
            .unwrap_err();
        assert_eq!(late.code(), &s3s::S3ErrorCode::NoSuchUpload);
        assert!(!upload.join(ASSEMBLY).exists());
    }

    #[test]
    fn a_last_part_that_arrives_first_is_the_only_one_copied() {
        let (dir, storage, id, upload) = new_upload();
        // Below the least size of a part but the last, it does not fix the slot size, so it
        // goes to a file of its own; the others take their slots.
        let i3 = upload_announced(&storage, &id, 3, b"end", 3);
        assert_eq!(i3.slot, None);
        let i1 = upload_announced(&storage, &id, 1, b"first part", 10);
        let i2 = upload_announced(&storage, &id, 2, b"other part", 10);
        let assembly = inode(&upload.join(ASSEMBLY));
        let meta = complete(&storage, &id, &[&i1, &i2, &i3]).unwrap();
        let object = dir.path().join("b/k");
        assert_eq!(fs::read(&object).unwrap(), b"first partother partend");
        assert_eq!(meta.etag, etag_of(&[b"first part", b"other part", b"end"]));
        assert_eq!(inode(&object), assembly);
    }

    #[test]
    fn a_single_part_becomes_the_object_without_a_copy() {
        for announced in [None, Some(12)] {
            let (dir, storage, id, upload) = new_upload();
            let mut writer = storage
                .receive_part(("b", "k", &id), 1, (announced, 5))
                .unwrap();
            writer
                .write(&storage, bytes::Bytes::from_static(b"all of it!!!"))
                .unwrap();
            let i1 = storage.commit_part("b", "k", &id, 1, writer, None).unwrap();
            let before = match i1.slot {
                Some(_) => inode(&upload.join(ASSEMBLY)),
                None => inode(&upload.join("00001")),
            };
            complete(&storage, &id, &[&i1]).unwrap();
            let object = dir.path().join("b/k");
            assert_eq!(fs::read(&object).unwrap(), b"all of it!!!", "{announced:?}");
            assert_eq!(inode(&object), before, "{announced:?}");
        }
    }

    #[test]
    fn parts_that_do_not_fill_their_slots_exactly_are_copied() {
        let parts: [&[u8]; 4] = [b"aaaaaaaaaa", b"bbbbbbbbbb", b"cccccccccc", b"dd"];
        // (uploads as (part, bytes, announced size), parts listed, expected object)
        type Case<'a> = (&'a str, Vec<(i32, &'a [u8], u64)>, Vec<i32>, Vec<u8>);
        let cases: Vec<Case<'_>> = vec![
            (
                "a short part in the middle",
                vec![(1, parts[0], 10), (2, b"bbbb", 4), (3, parts[3], 2)],
                vec![1, 2, 3],
                b"aaaaaaaaaabbbbdd".to_vec(),
            ),
            (
                "the listing does not start at part 1",
                vec![(1, parts[0], 10), (2, parts[1], 10), (3, parts[3], 2)],
                vec![2, 3],
                b"bbbbbbbbbbdd".to_vec(),
            ),
            (
                "a part past the listed ones",
                vec![
                    (1, parts[0], 10),
                    (2, parts[1], 10),
                    (3, parts[2], 10),
                    (4, parts[3], 2),
                ],
                vec![1, 2, 3],
                b"aaaaaaaaaabbbbbbbbbbcccccccccc".to_vec(),
            ),
            (
                "a part sent again with other bytes",
                vec![
                    (1, parts[0], 10),
                    (2, parts[1], 10),
                    (2, parts[2], 10),
                    (3, parts[3], 2),
                ],
                vec![1, 2, 3],
                b"aaaaaaaaaaccccccccccdd".to_vec(),
            ),
            (
                "a part longer than it announced",
                vec![
                    (1, parts[0], 10),
                    (2, b"bbbbbbbbbbbb", 10),
                    (3, parts[3], 2),
                ],
                vec![1, 2, 3],
                b"aaaaaaaaaabbbbbbbbbbbbdd".to_vec(),
            ),
            (
                "a part that did not announce its size",
                vec![(1, parts[0], 10), (2, parts[1], 0), (3, parts[3], 2)],
                vec![1, 2, 3],
                b"aaaaaaaaaabbbbbbbbbbdd".to_vec(),
            ),
        ];
        for (what, uploads, listed, expected) in cases {
            let (dir, storage, id, upload) = new_upload();
            let mut infos = std::collections::BTreeMap::new();
            let mut bytes = std::collections::BTreeMap::new();
            for (n, body, hint) in uploads {
                infos.insert(n, upload_announced(&storage, &id, n, body, hint));
                bytes.insert(n, body);
            }
            let assembly = inode(&upload.join(ASSEMBLY));
            let used: Vec<&PartInfo> = listed.iter().map(|n| &infos[n]).collect();
            let meta = complete(&storage, &id, &used).unwrap_or_else(|e| panic!("{what}: {e}"));
            let object = dir.path().join("b/k");
            assert_eq!(fs::read(&object).unwrap(), expected, "{what}");
            let sent: Vec<&[u8]> = listed.iter().map(|n| bytes[n]).collect();
            assert_eq!(meta.etag, etag_of(&sent), "{what}");
            assert_ne!(inode(&object), assembly, "{what}: copied");
        }
    }

    #[test]
    fn a_completion_waits_for_no_part_still_being_written() {
        let (dir, storage, id, _) = new_upload();
        let i1 = upload_announced(&storage, &id, 1, b"0123456789", 10);
        let i2 = upload_announced(&storage, &id, 2, b"xy", 2);
        let mut writing = storage
            .receive_part(("b", "k", &id), 3, (Some(10), 5))
            .unwrap();
        writing
            .write(&storage, bytes::Bytes::from_static(b"late"))
            .unwrap();
        // Part 3 is still arriving: the listed parts are copied out of the assembly file.
        complete(&storage, &id, &[&i1, &i2]).unwrap();
        writing
            .write(&storage, bytes::Bytes::from_static(b"bytes!"))
            .unwrap();
        let late = storage
            .commit_part("b", "k", &id, 3, writing, None)
            .unwrap_err();
        assert_eq!(late.code(), &s3s::S3ErrorCode::NoSuchUpload);
        assert_eq!(fs::read(dir.path().join("b/k")).unwrap(), b"0123456789xy");
    }

    #[test]
    fn a_refused_completion_in_place_keeps_every_part() {
        let (dir, storage, id, upload) = new_upload();
        let mut temp = storage.begin_write().unwrap();
        temp.write(b"already here").unwrap();
        storage
            .commit("b", "k", temp, "e".into(), ObjectAttrs::default())
            .unwrap();
        let i1 = upload_announced(&storage, &id, 1, b"0123456789", 10);
        let i2 = upload_announced(&storage, &id, 2, b"xy", 2);
        let refused = complete_if(&storage, &id, &[&i1, &i2], &Precondition::Absent).unwrap_err();
        assert_eq!(refused.code(), &s3s::S3ErrorCode::PreconditionFailed);
        assert_eq!(fs::read(dir.path().join("b/k")).unwrap(), b"already here");
        // The upload goes on: a part can still be written in place, and the completion
        // that follows finds every byte.
        let i3 = upload_announced(&storage, &id, 3, b"z", 1);
        assert!(i3.slot.is_some());
        assert!(upload.join(ASSEMBLY).exists());
        let retried = complete(&storage, &id, &[&i1, &i2]).unwrap();
        assert_eq!(retried.etag, etag_of(&[b"0123456789", b"xy"]));
        assert_eq!(fs::read(dir.path().join("b/k")).unwrap(), b"0123456789xy");
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
