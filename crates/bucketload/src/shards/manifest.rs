//! The `files` manifest of a one-object-per-sample dataset: list once, read every object (many in
//! flight) computing its CRC32C, keep its ETag and size, and write
//! `_bucketload/manifest.json` last.

use std::collections::BTreeMap;
use std::time::Instant;

use bucketload_format::{
    ClassCount, DatasetKind, FileEntry, MANIFEST_PATH, MANIFEST_VERSION, Manifest, Parameters,
    class_of_key,
};
use bucketload_store::object_store::{ObjectStoreExt, PutPayload, path::Path};
use bucketload_store::{ETag, Store};
use futures::{StreamExt, TryStreamExt};

use crate::base::{KeyedObject, Location, Progress, list_all_keys};
use crate::error::{Error, Result};

/// Prefix of bucketload's own objects at a dataset root (never part of the dataset).
const RESERVED: &str = "_bucketload/";

/// What [`write_files_manifest`] did.
#[derive(Debug, Clone)]
pub struct ManifestReport {
    /// The manifest written.
    pub manifest: Manifest,
    /// Full URI of the manifest object.
    pub uri: String,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Lists the dataset below `store`'s prefix once, reads every object with `concurrency` GETs in
/// flight computing its CRC32C, and writes the `files` manifest at `_bucketload/manifest.json`
/// after every object was read. Classes are the objects' folders when every object has one.
pub async fn write_files_manifest(
    store: &Store,
    concurrency: usize,
    progress: &dyn Progress,
) -> Result<ManifestReport> {
    let started = Instant::now();
    let location = Location::from_store(store);
    let mut metas: Vec<KeyedObject> = list_all_keys(&location).await?;
    metas.retain(|m| !m.key.as_str().starts_with(RESERVED));
    if metas.is_empty() {
        let message = format!("no objects below {}; nothing to describe", store.uri());
        return Err(Error::invalid_input(message));
    }
    progress.set_total(metas.len() as u64, Some(metas.iter().map(|m| m.size).sum()));
    let files: Vec<FileEntry> = futures::stream::iter(metas)
        .map(|meta| read_entry(&location, meta, progress))
        .buffered(concurrency.max(1))
        .try_collect()
        .await?;
    progress.finish();
    let manifest = files_manifest(store.uri().to_string(), files);
    let key = Path::from(MANIFEST_PATH);
    let uri = store.object_uri(&key);
    manifest.validate(&uri)?;
    store
        .object_store()
        .put(&key, PutPayload::from(manifest.to_json()))
        .await
        .map_err(|e| location.error(&key, e))?;
    Ok(ManifestReport {
        manifest,
        uri,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// GETs one object, streaming its body through CRC32C.
async fn read_entry(
    location: &Location,
    meta: KeyedObject,
    progress: &dyn Progress,
) -> Result<FileEntry> {
    let key = meta.key;
    let get = location.get_key(&key).await?;
    // Recorded bare (`ETag`'s spelling), whatever quotes the store sends.
    let etag = ETag::from_store(get.meta.e_tag.as_deref()).map(|e| e.to_string());
    let size = get.meta.size;
    let mut body = get.into_stream();
    let (mut crc, mut read) = (0u32, 0u64);
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| location.error_of_key(&key, e))?;
        crc = crc32c::crc32c_append(crc, &chunk);
        read += chunk.len() as u64;
    }
    if read != size {
        return Err(Error::Corrupt {
            uri: location.uri_of_data_key(&key),
            reason: format!("read {read} bytes but the store reports {size}; run again"),
        });
    }
    progress.advance(1, size);
    Ok(FileEntry {
        key: key.to_string(),
        size,
        etag,
        crc32c: Some(format!("{crc:08x}")),
    })
}

/// The manifest of `files` (sorted by key).
fn files_manifest(source: String, files: Vec<FileEntry>) -> Manifest {
    let classes = classes_of(&files);
    let label_policy = if classes.is_empty() { "none" } else { "folder" };
    Manifest {
        format_version: MANIFEST_VERSION,
        kind: DatasetKind::Files,
        parameters: Parameters {
            source,
            shard_size: None,
            samples_per_shard: None,
            seed: None,
            plan: None,
            label_policy: label_policy.to_owned(),
            tool_version: env!("CARGO_PKG_VERSION").to_owned(),
            created: now_rfc3339(),
            part: None,
        },
        samples: files.len() as u64,
        bytes: files.iter().map(|f| f.size).sum(),
        classes,
        shards: Vec::new(),
        files,
    }
}

/// Objects per folder when every object sits in a folder; empty otherwise.
fn classes_of(files: &[FileEntry]) -> Vec<ClassCount> {
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for file in files {
        match class_of_key(&file.key) {
            Some(class) => *counts.entry(class).or_default() += 1,
            None => return Vec::new(),
        }
    }
    counts
        .into_iter()
        .map(|(name, count)| ClassCount {
            name: name.to_owned(),
            count,
        })
        .collect()
}

/// The current time as RFC 3339 UTC with seconds (`2026-11-22T05:15:00Z`).
pub(crate) fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's method).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(key: &str, size: u64) -> FileEntry {
        FileEntry {
            key: key.to_owned(),
            size,
            etag: None,
            crc32c: Some("00000000".to_owned()),
        }
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_414), (2025, 11, 22));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn classes_come_from_folders_only_when_every_file_has_one() {
        let files = vec![file("a/1.jpg", 3), file("a/2.jpg", 4), file("b/1.jpg", 5)];
        let m = files_manifest("mem://x".into(), files);
        assert_eq!(m.parameters.label_policy, "folder");
        assert_eq!(m.classes.len(), 2);
        assert_eq!((m.classes[0].count, m.classes[1].count), (2, 1));
        assert_eq!((m.samples, m.bytes), (3, 12));
        m.validate("m").unwrap();
        let m = files_manifest(
            "mem://x".into(),
            vec![file("a/1.jpg", 1), file("top.jpg", 1)],
        );
        assert!(m.classes.is_empty());
        assert_eq!(m.parameters.label_policy, "none");
    }
}
