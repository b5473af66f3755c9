//! The `files` manifest of a one-object-per-sample dataset: list page by page, read every
//! object (many in flight) computing its CRC32C, keep its ETag and size, and write the
//! manifest (format 2, `_bucketload/manifest.bin`, by default) last.
//!
//! Entries stream from the listing into the format-2 writer, which holds one block, and the
//! writer into an anonymous temporary file: a manifest of 10⁹ objects is ~15 GB, which neither
//! memory nor S3's single PUT (5 GB at most) can take. Once every object was read the file is
//! uploaded ([`publish_manifest`]): one PUT when it is smaller than one part, else a multipart
//! upload of [`MANIFEST_PART_SIZE`] parts, several in flight, that is visible only once
//! complete and aborted on any failure. A listing that comes sorted (S3, GCS, Azure, the
//! embedded server) is written as it arrives; keys listed out of order (a local folder lists in
//! directory order, an inventory report's data files come in any order) are held aside
//! ([`late`]: in memory up to half a million, then in sorted runs in temporary files) and
//! merged in at the end, both streams read one entry at a time into a second file, so the
//! manifest is sorted whatever the store's order and memory stays bounded. A format-1 (JSON)
//! manifest is built in memory from the file.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Seek};
use std::time::Instant;

use bucketload_format::{
    ClassCount, DatasetKind, Entry as ManifestEntry, FileEntry, Manifest, ManifestFormat,
    ManifestHeader, ManifestWriter, Parameters, class_of_key, read_manifest,
};
use bucketload_store::object_store::{ObjectStoreExt, path::Path};
use bucketload_store::{ETag, MultipartOptions, MultipartWriter, Store};
use futures::{StreamExt, TryStreamExt};

use crate::base::{DataKey, Entry, KeyedObject, Location, Progress, list};
use crate::error::{Error, Result};

mod late;

use late::Late;

/// Prefix of bucketload's own objects at a dataset root (never part of the dataset).
const RESERVED: &str = "_bucketload/";

/// Bytes per part of a manifest's multipart upload: 10,000 parts (S3's limit) of 16 MiB hold a
/// 156 GiB manifest, ten times a 10⁹-object one, and [`MANIFEST_PARTS_IN_FLIGHT`] of them
/// buffer at most 144 MiB. A manifest smaller than one part is sent with one PUT. The
/// environment variable `BUCKETLOAD_MANIFEST_PART_SIZE` (e.g. `5MiB`; S3 refuses parts under
/// 5 MiB but the last) overrides it, so that tests reach the multipart path with small
/// manifests.
pub const MANIFEST_PART_SIZE: u64 = 16 << 20;

/// Parts of a manifest uploaded at once: 8 × 16 MiB keeps ~1 GB/s in flight at S3's part
/// latencies.
pub const MANIFEST_PARTS_IN_FLIGHT: usize = 8;

/// A manifest ready to upload: built in memory, or in a temporary file (read from its start).
#[derive(Debug)]
pub(crate) enum ManifestBody {
    Bytes(Vec<u8>),
    File(File),
}

/// What [`write_files_manifest`] did.
#[derive(Debug, Clone)]
pub struct ManifestReport {
    /// What the manifest says besides its entries (totals, classes, parameters).
    pub header: ManifestHeader,
    /// Full URI of the manifest object.
    pub uri: String,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Lists the dataset below `store`'s prefix page by page, reads every object with
/// `concurrency` GETs in flight computing its CRC32C, and writes the `files` manifest in
/// `format` after every object was read (deleting the other format's manifest first, so the
/// two never disagree). Classes are the objects' folders when every object has one.
pub async fn write_files_manifest(
    store: &Store,
    concurrency: usize,
    format: ManifestFormat,
    progress: &dyn Progress,
) -> Result<ManifestReport> {
    let started = Instant::now();
    let location = Location::from_store(store);
    let key = Path::from(format.path());
    let uri = store.object_uri(&key);
    let mut out = FilesOut::new(&uri, store.uri().to_string())?;
    let mut entries = list(&location, None, true)
        .try_filter_map(|entry| std::future::ready(Ok(listed_object(entry))))
        .map_ok(|meta| read_entry(&location, meta, progress))
        .try_buffered(concurrency.max(1));
    while let Some(entry) = entries.try_next().await? {
        out.push(entry)?;
    }
    progress.finish();
    if out.entries() == 0 {
        let message = format!("no objects below {}; nothing to describe", store.uri());
        return Err(Error::invalid_input(message));
    }
    let (body, header) = out.finish_blocking(uri, format).await?;
    let uri = publish_manifest_body(store, format, body).await?;
    Ok(ManifestReport {
        header,
        uri,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Writes the `files` manifest of the dataset at `store` from an S3 Inventory report instead of
/// a LIST: `manifest_key` is the report's `manifest.json` in `reports` (a store opened at the
/// root of the inventory's destination bucket). Every current object of the dataset's bucket
/// below its prefix is recorded with the size and ETag the report gives; no object is read, so
/// the manifest has no CRC32Cs (reads validate by ETag and size). Objects the report lists that
/// the store no longer has are errors naming them when the dataset is read; objects added
/// since the report are not in the dataset. Rows the report gives out of key order are merged
/// in at the end (sorted with bounded memory, see the module docs).
pub async fn write_inventory_manifest(
    store: &Store,
    reports: &Store,
    manifest_key: &str,
    format: ManifestFormat,
    progress: &dyn Progress,
) -> Result<(ManifestReport, crate::dataset::InventorySummary)> {
    let started = Instant::now();
    let key = Path::from(format.path());
    let uri = store.object_uri(&key);
    if store.uri().scheme() != bucketload_store::Scheme::S3 {
        return Err(Error::invalid_input(format!(
            "{} is not an S3 dataset; S3 Inventory reports describe S3 buckets only",
            store.uri()
        )));
    }
    let bucket = store.uri().bucket().to_owned();
    let prefix = match store.uri().prefix() {
        "" => String::new(),
        p => format!("{p}/"),
    };
    let mut out = FilesOut::new(&uri, store.uri().to_string())?;
    let mut sink = |object: crate::dataset::InventoryObject| {
        progress.advance(1, object.size);
        out.push(FileEntry {
            key: object.key,
            size: object.size,
            etag: object
                .etag
                .as_deref()
                .and_then(|e| ETag::from_store(Some(e)))
                .map(|e| e.to_string()),
            crc32c: None,
        })
    };
    let summary =
        crate::dataset::read_inventory(reports, manifest_key, &bucket, &prefix, &mut sink).await?;
    progress.finish();
    if out.entries() == 0 {
        return Err(Error::invalid_input(format!(
            "{} lists no object below {}; check the report and the dataset URI",
            summary.manifest_uri,
            store.uri()
        )));
    }
    let (body, header) = out.finish_blocking(uri, format).await?;
    let uri = publish_manifest_body(store, format, body).await?;
    let report = ManifestReport {
        header,
        uri,
        seconds: started.elapsed().as_secs_f64(),
    };
    Ok((report, summary))
}

/// The dataset's object of a listing entry (not folder markers, not bucketload's own).
fn listed_object(entry: Entry) -> Option<KeyedObject> {
    let object = match entry {
        Entry::Object(meta) => KeyedObject {
            key: DataKey::Path(meta.location),
            size: meta.size,
            e_tag: meta.e_tag,
        },
        Entry::Unaddressable(l) => KeyedObject {
            key: DataKey::new(&l.key),
            size: l.size,
            e_tag: l.e_tag,
        },
        Entry::Dir(_) => return None,
    };
    (!object.key.to_string().starts_with(RESERVED)).then_some(object)
}

/// Writes `bytes` as the dataset manifest in `format` at `store`'s root: see
/// [`publish_manifest_body`].
pub(crate) async fn publish_manifest(
    store: &Store,
    format: ManifestFormat,
    bytes: Vec<u8>,
) -> Result<String> {
    publish_manifest_body(store, format, ManifestBody::Bytes(bytes)).await
}

/// Writes `body` as the dataset manifest in `format` at `store`'s root, after deleting the
/// manifest of the other format (if any): readers look for format 2 first, and a stale one
/// must never shadow the new one. The upload is one PUT or a multipart upload (see
/// [`MANIFEST_PART_SIZE`]): either way the new manifest appears whole or not at all. Returns
/// the manifest's URI.
pub(crate) async fn publish_manifest_body(
    store: &Store,
    format: ManifestFormat,
    body: ManifestBody,
) -> Result<String> {
    let location = Location::from_store(store);
    let os = store.object_store();
    let other = Path::from(format.other_path());
    // Looked for first (a HEAD, a read): most datasets never had the other format.
    let exists = match os.head(&other).await {
        Ok(_) => true,
        Err(bucketload_store::object_store::Error::NotFound { .. }) => false,
        Err(e) => return Err(location.error(&other, e)),
    };
    if exists {
        store
            .delete_key(&other)
            .await
            .map_err(|e| location.error(&other, e))?;
    }
    let key = Path::from(format.path());
    let uri = store.object_uri(&key);
    let mut writer = MultipartWriter::new(os, key, upload_options())
        .with_store(store)
        .with_uri(&uri);
    match body {
        ManifestBody::Bytes(bytes) => writer.write(bytes.into()).await?,
        ManifestBody::File(file) => {
            if let Err(e) = send_file(&mut writer, file).await {
                if let Err(abort) = writer.abort().await {
                    tracing::warn!(%uri, error = %abort, "cannot abort the manifest's upload");
                }
                return Err(e);
            }
        }
    }
    writer.finish().await?;
    Ok(uri)
}

/// The part size and parts in flight of a manifest's upload (see [`MANIFEST_PART_SIZE`]).
fn upload_options() -> MultipartOptions {
    let part_size = std::env::var("BUCKETLOAD_MANIFEST_PART_SIZE")
        .ok()
        .and_then(|s| bucketload_store::parse_size(&s).ok())
        .filter(|&n| n > 0)
        .unwrap_or(MANIFEST_PART_SIZE);
    MultipartOptions {
        part_size,
        concurrency: MANIFEST_PARTS_IN_FLIGHT,
    }
}

/// Hands `writer` the bytes of `file` one part at a time (read off the Tokio workers).
async fn send_file(writer: &mut MultipartWriter, file: File) -> Result<()> {
    use tokio::io::AsyncReadExt;
    let chunk = usize::try_from(upload_options().part_size).unwrap_or(usize::MAX);
    let mut file = tokio::fs::File::from_std(file);
    loop {
        let mut part = Vec::with_capacity(chunk);
        (&mut file)
            .take(chunk as u64)
            .read_to_end(&mut part)
            .await
            .map_err(|source| temp_error("read", source))?;
        if part.is_empty() {
            return Ok(());
        }
        writer.write(part.into()).await?;
    }
}

/// An error of the temporary files a manifest is built in (`action`: what failed).
fn temp_error(action: &str, source: std::io::Error) -> Error {
    Error::Io {
        path: format!(
            "a temporary file of the manifest in {} (set TMPDIR to a folder with room)",
            std::env::temp_dir().display()
        ),
        action: action.to_owned(),
        source,
    }
}

/// A new anonymous temporary file (deleted when closed), for a manifest being built.
fn temp_file() -> Result<File> {
    tempfile::tempfile().map_err(|e| temp_error("create", e))
}

/// `file`, written, read from its start.
fn rewound(mut file: File) -> Result<File> {
    file.rewind().map_err(|e| temp_error("rewind", e))?;
    Ok(file)
}

/// The manifest being written: entries in key order go straight to the format-2 writer;
/// entries listed out of order wait in `late` and are merged in by [`FilesOut::finish`].
struct FilesOut {
    writer: ManifestWriter<BufWriter<File>>,
    source: String,
    last: Option<String>,
    late: Late,
    classes: Option<BTreeMap<String, u64>>,
}

impl FilesOut {
    fn new(uri: &str, source: String) -> Result<FilesOut> {
        Ok(FilesOut {
            writer: ManifestWriter::new(uri, BufWriter::new(temp_file()?), DatasetKind::Files)?,
            source,
            last: None,
            late: Late::new(late::RUN_ENTRIES, late::FAN_IN),
            classes: Some(BTreeMap::new()),
        })
    }

    fn entries(&self) -> u64 {
        self.writer.entries() + self.late.len()
    }

    fn push(&mut self, entry: FileEntry) -> Result<()> {
        match (&mut self.classes, class_of_key(&entry.key)) {
            (Some(counts), Some(class)) => match counts.get_mut(class) {
                Some(n) => *n += 1,
                None => _ = counts.insert(class.to_owned(), 1),
            },
            (classes, _) => *classes = None,
        }
        if self
            .last
            .as_deref()
            .is_some_and(|last| last >= entry.key.as_str())
        {
            return self.late.push(entry);
        }
        self.writer.push_file(&entry)?;
        self.last = Some(entry.key);
        Ok(())
    }

    /// [`FilesOut::finish`] off the Tokio workers (merging and reading back files).
    async fn finish_blocking(
        self,
        uri: String,
        format: ManifestFormat,
    ) -> Result<(ManifestBody, ManifestHeader)> {
        tokio::task::spawn_blocking(move || self.finish(&uri, format))
            .await
            .map_err(|e| Error::invalid_input(format!("writing the manifest stopped: {e}")))?
    }

    /// The manifest in `format`, and its header.
    fn finish(self, uri: &str, format: ManifestFormat) -> Result<(ManifestBody, ManifestHeader)> {
        let classes: Vec<ClassCount> = self
            .classes
            .unwrap_or_default()
            .into_iter()
            .map(|(name, count)| ClassCount { name, count })
            .collect();
        let policy = if classes.is_empty() { "none" } else { "folder" };
        let params = parameters(&self.source, policy);
        let (out, mut header) = self.writer.finish(params.clone(), classes.clone())?;
        let mut file = out
            .into_inner()
            .map_err(|e| temp_error("write", e.into_error()))?;
        if self.late.len() > 0 {
            (file, header) = merge_late(uri, rewound(file)?, self.late, params, classes)?;
        }
        let file = rewound(file)?;
        if format == ManifestFormat::Json {
            let json = Manifest::read(uri, BufReader::new(file))?.to_json();
            return Ok((ManifestBody::Bytes(json), header));
        }
        Ok((ManifestBody::File(file), header))
    }
}

/// The manifest `sorted` (a file read from its start) with the entries `late` (listed out of
/// order) merged in, in a new temporary file: both stream through, the sorted ones one block
/// at a time, the late ones one entry per run at a time.
fn merge_late(
    uri: &str,
    sorted: File,
    late: Late,
    params: Parameters,
    classes: Vec<ClassCount>,
) -> Result<(File, ManifestHeader)> {
    tracing::debug!(late = late.len(), "the listing was not sorted; merging");
    let mut late = late.into_sorted()?;
    let out = BufWriter::new(temp_file()?);
    let mut writer = ManifestWriter::new(uri, out, DatasetKind::Files)?;
    let late_error = |source| bucketload_format::Error::ManifestIo {
        manifest: format!("{uri} (entries listed out of order, in a temporary file)"),
        offset: 0,
        action: "read",
        source,
    };
    read_manifest(uri, BufReader::new(sorted), &mut |entry| {
        let ManifestEntry::File(file) = entry else {
            return Ok(());
        };
        while late.peek_key().is_some_and(|k| k <= file.key.as_str()) {
            if let Some(next) = late.next() {
                writer.push_file(&next.map_err(late_error)?)?; // an equal key fails: listed twice
            }
        }
        writer.push_file(file)
    })?;
    for next in late {
        writer.push_file(&next.map_err(late_error)?)?;
    }
    let (out, header) = writer.finish(params, classes)?;
    let file = out
        .into_inner()
        .map_err(|e| temp_error("write", e.into_error()))?;
    Ok((file, header))
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

/// The parameters of a `files` manifest made now.
fn parameters(source: &str, label_policy: &str) -> Parameters {
    Parameters {
        source: source.to_owned(),
        shard_size: None,
        samples_per_shard: None,
        seed: None,
        plan: None,
        label_policy: label_policy.to_owned(),
        tool_version: env!("CARGO_PKG_VERSION").to_owned(),
        created: now_rfc3339(),
        part: None,
    }
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

    /// The manifest of `files` pushed in this order.
    fn manifest_of(files: &[FileEntry], format: ManifestFormat) -> Result<Manifest> {
        manifest_with_runs(files, format, late::RUN_ENTRIES)
    }

    /// The same, out-of-order entries written out in runs of `run`, merged two at a time.
    fn manifest_with_runs(
        files: &[FileEntry],
        format: ManifestFormat,
        run: usize,
    ) -> Result<Manifest> {
        let mut out = FilesOut::new("m", "mem://x".into())?;
        out.late = Late::new(run, 2);
        for f in files {
            out.push(f.clone())?;
        }
        let body = match out.finish("m", format)?.0 {
            ManifestBody::Bytes(bytes) => bytes,
            ManifestBody::File(mut file) => {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut file, &mut bytes).unwrap();
                bytes
            }
        };
        Ok(Manifest::read("m", &body[..])?)
    }

    #[test]
    fn classes_come_from_folders_only_when_every_file_has_one() {
        let files = vec![file("a/1.jpg", 3), file("a/2.jpg", 4), file("b/1.jpg", 5)];
        let m = manifest_of(&files, ManifestFormat::Binary).unwrap();
        assert_eq!(m.parameters.label_policy, "folder");
        assert_eq!(m.parameters.source, "mem://x");
        assert_eq!(m.classes.len(), 2);
        assert_eq!((m.classes[0].count, m.classes[1].count), (2, 1));
        assert_eq!((m.samples, m.bytes), (3, 12));
        let m = manifest_of(
            &[file("a/1.jpg", 1), file("top.jpg", 1)],
            ManifestFormat::Json,
        );
        let m = m.unwrap();
        assert_eq!(m.format_version, 1);
        assert!(m.classes.is_empty());
        assert_eq!(m.parameters.label_policy, "none");
    }

    #[test]
    fn keys_listed_out_of_order_are_merged_in() {
        let keys = ["b/2", "a/1", "c/1", "b/1", "a/0", "d/9", "c/0"];
        let files: Vec<FileEntry> = keys.iter().map(|k| file(k, 1)).collect();
        let m = manifest_of(&files, ManifestFormat::Binary).unwrap();
        let mut sorted = keys.to_vec();
        sorted.sort_unstable();
        assert_eq!(
            m.files.iter().map(|f| f.key.as_str()).collect::<Vec<_>>(),
            sorted
        );
        assert_eq!(m.classes.iter().map(|c| c.count).sum::<u64>(), 7);
        let twice = [file("b", 1), file("a", 1), file("b", 1)];
        let err = manifest_of(&twice, ManifestFormat::Binary).unwrap_err();
        assert!(err.to_string().contains("\"b\" is duplicated"), "{err}");
        // Written out in runs of two (merged in pairs): the same manifest, the same refusal.
        let m = manifest_with_runs(&files, ManifestFormat::Binary, 2).unwrap();
        assert_eq!(
            m.files.iter().map(|f| f.key.as_str()).collect::<Vec<_>>(),
            sorted
        );
        let twice = [
            file("z", 1),
            file("b", 1),
            file("c", 1),
            file("a", 1),
            file("b", 1),
        ];
        let err = manifest_with_runs(&twice, ManifestFormat::Binary, 2).unwrap_err();
        assert!(err.to_string().contains("\"b\" is duplicated"), "{err}");
    }
}
