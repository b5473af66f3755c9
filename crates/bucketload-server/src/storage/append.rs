//! Appends to objects of directory buckets, as S3 Express takes them: a PutObject with
//! `x-amz-write-offset-bytes` equal to the object's size adds its body to the end; any other
//! offset is refused with 400 `InvalidWriteOffset` and changes nothing. The new object is the
//! old bytes and the appended ones in a temporary file, committed only if the object is still
//! the one copied (its ETag, checked under the commit lock), so of two appends at one offset
//! exactly one lands.

use s3s::{S3Error, S3ErrorCode, s3_error};

use super::{ObjectAttrs, ObjectMeta, Precondition, Storage, TempObject};
use crate::checksum::{self, Algorithm};

impl Storage {
    /// Appends `tail` to object `key` at `offset`, which must be the object's size (0 creates a
    /// missing object with `attrs`). An appended object keeps its content type, metadata and
    /// tags; its checksum is the full-object CRC of the algorithm the append or the object
    /// used, or none for SHA (S3 then has only the checksum of each appended part).
    pub(crate) fn append(
        &self,
        bucket: &str,
        key: &str,
        offset: u64,
        tail: TempObject,
        attrs: ObjectAttrs,
    ) -> Result<ObjectMeta, S3Error> {
        let current = match self.head(bucket, key) {
            Ok(meta) => meta,
            Err(e) if *e.code() == S3ErrorCode::NoSuchKey => {
                if offset != 0 {
                    return Err(invalid_write_offset(offset, 0));
                }
                let etag = hex::encode(tail.md5());
                return self
                    .commit_if(bucket, key, tail, etag, attrs, &Precondition::Absent)
                    .map_err(|e| lost_race(e, offset));
            }
            Err(e) => return Err(e),
        };
        if offset != current.size {
            return Err(invalid_write_offset(offset, current.size));
        }
        if tail.size() == 0 {
            // Nothing to add: the object stays as it is, ETag and all.
            return Ok(current);
        }
        let (before, mut whole) = self.copy_to_temp(bucket, key, None)?;
        if before.size != offset {
            return Err(invalid_write_offset(offset, before.size));
        }
        let tail_path = tail
            .path
            .clone()
            .ok_or_else(|| s3_error!(InternalError, "appended body already committed"))?;
        whole.append_file(&tail_path)?;
        let algorithm = attrs
            .checksum
            .as_deref()
            .or(before.checksum.as_deref())
            .and_then(checksum::Stored::algorithm)
            .filter(|a| !matches!(a, Algorithm::Sha1 | Algorithm::Sha256));
        let sum = algorithm
            .map(|a: Algorithm| whole.checksum(a).map(|v| (a, v)))
            .transpose()?;
        let mut parts = before.parts.clone();
        if !parts.is_empty() {
            parts.push(tail.size());
        }
        let attrs = ObjectAttrs {
            content_type: before.content_type.clone(),
            metadata: before.metadata.clone(),
            headers: before.headers.clone(),
            tags: before.tags.clone(),
            parts,
            checksum: sum.map(|(a, value)| {
                Box::new(checksum::Stored {
                    algorithm: a.name().to_owned(),
                    value,
                    kind: checksum::FULL_OBJECT.to_owned(),
                    parts: Vec::new(),
                })
            }),
        };
        let etag = crate::directory::appended_etag(&before.etag, &tail.md5());
        let unchanged = Precondition::Matches(before.etag.clone());
        self.commit_if(bucket, key, whole, etag, attrs, &unchanged)
            .map_err(|e| lost_race(e, offset))
    }
}

/// An append's precondition failed: another write changed the object since it was read.
fn lost_race(e: S3Error, offset: u64) -> S3Error {
    if *e.code() != S3ErrorCode::PreconditionFailed {
        return e;
    }
    let mut e = S3Error::with_message(
        S3ErrorCode::Custom("InvalidWriteOffset".into()),
        format!(
            "The write offset value that you specified does not match the current object size: another write changed the object while {offset} was appended at; read its size and append again"
        ),
    );
    e.set_status_code(http::StatusCode::BAD_REQUEST);
    e
}

/// S3's 400 for an append whose offset is not the object's size.
fn invalid_write_offset(offset: u64, size: u64) -> S3Error {
    let mut e = S3Error::with_message(
        S3ErrorCode::Custom("InvalidWriteOffset".into()),
        format!(
            "The write offset value that you specified does not match the current object size: the offset is {offset}, the object holds {size} bytes; append at {size}"
        ),
    );
    e.set_status_code(http::StatusCode::BAD_REQUEST);
    e
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};

    use super::*;

    const BUCKET: &str = "logs--use1-az4--x-s3";

    fn storage() -> (tempfile::TempDir, Storage) {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket(BUCKET).unwrap();
        (dir, storage)
    }

    fn body(storage: &Storage, bytes: &[u8]) -> TempObject {
        let mut temp = storage.begin_write().unwrap();
        temp.write(bytes).unwrap();
        temp
    }

    fn content(storage: &Storage, key: &str) -> Vec<u8> {
        let (_, mut file) = storage.open_version(BUCKET, key, None).unwrap();
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut out).unwrap();
        out
    }

    fn append(storage: &Storage, offset: u64, bytes: &[u8]) -> Result<ObjectMeta, S3Error> {
        let tail = body(storage, bytes);
        storage.append(BUCKET, "log", offset, tail, ObjectAttrs::default())
    }

    #[test]
    fn appends_at_the_size_and_refuses_other_offsets() {
        let (_dir, s) = storage();
        let first = append(&s, 0, b"hello ").unwrap();
        let second = append(&s, 6, b"world").unwrap();
        assert_eq!(content(&s, "log"), b"hello world");
        assert_eq!(second.size, 11);
        assert_ne!(first.etag, second.etag);
        for offset in [0, 5, 12] {
            let e = append(&s, offset, b"!").unwrap_err();
            assert_eq!(e.code().as_str(), "InvalidWriteOffset", "{offset}");
        }
        assert_eq!(content(&s, "log"), b"hello world");
        assert_eq!(s.head(BUCKET, "log").unwrap().etag, second.etag);
    }

    #[test]
    fn an_append_to_a_missing_object_needs_offset_zero() {
        let (_dir, s) = storage();
        let tail = body(&s, b"x");
        let e = s
            .append(BUCKET, "new", 1, tail, ObjectAttrs::default())
            .unwrap_err();
        assert_eq!(e.code().as_str(), "InvalidWriteOffset");
        assert_eq!(
            s.head(BUCKET, "new").unwrap_err().code(),
            &S3ErrorCode::NoSuchKey
        );
    }

    #[test]
    fn an_empty_append_changes_nothing() {
        let (_dir, s) = storage();
        let first = append(&s, 0, b"abc").unwrap();
        let same = append(&s, 3, b"").unwrap();
        assert_eq!(same.etag, first.etag);
        assert_eq!(content(&s, "log"), b"abc");
    }

    #[test]
    fn of_concurrent_appends_at_one_offset_exactly_one_lands() {
        let (_dir, s) = storage();
        append(&s, 0, b"base").unwrap();
        let s = Arc::new(s);
        let writers = 8;
        let barrier = Arc::new(Barrier::new(writers));
        let handles: Vec<_> = (0..writers)
            .map(|i| {
                let (s, barrier) = (Arc::clone(&s), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    let tail = body(&s, &[b'a' + i as u8; 3]);
                    barrier.wait();
                    s.append(BUCKET, "log", 4, tail, ObjectAttrs::default())
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let won: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(won.len(), 1, "{results:?}");
        for lost in results.iter().filter_map(|r| r.as_ref().err()) {
            assert_eq!(lost.code().as_str(), "InvalidWriteOffset");
        }
        let bytes = content(&s, "log");
        assert_eq!(bytes.len(), 7);
        assert_eq!(&bytes[..4], b"base");
        assert!(bytes[4..].iter().all(|b| *b == bytes[4]), "{bytes:?}");
        assert_eq!(s.head(BUCKET, "log").unwrap().etag, won[0].etag);
    }
}
