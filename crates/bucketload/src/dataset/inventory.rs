//! An S3 Inventory report as a dataset's listing: a LIST of 10⁸ keys costs 10⁵ requests and
//! hours, the daily (or weekly) inventory report of the bucket already holds them.
//!
//! A report is a `manifest.json` in the inventory's destination bucket
//! (`<destination prefix>/<source bucket>/<configuration>/<YYYY-MM-DDTHH-MMZ>/manifest.json`)
//! naming its data files, each with its MD5; [`read_inventory`] reads the manifest, then each
//! data file (gzipped CSV, columns as the manifest's `fileSchema` says), checks its MD5, and hands
//! every current object of the source bucket below a prefix to a sink, one at a time. Keys are
//! URL-encoded in the report and are decoded here. Delete markers and non-current versions (a
//! versioned report's `IsDeleteMarker` / `IsLatest` columns) are not objects of the dataset.
//!
//! What the report cannot know: objects written or deleted since it was taken. An object the
//! report lists that the store no longer has is an error naming it when the dataset is read
//! (the loader's stale-manifest error); objects added since are not in the dataset.
//! Parquet and ORC reports are refused with what to do (configure the inventory as CSV).

use std::io::Read;

use bucketload_store::Store;
use bucketload_store::object_store::{ObjectStoreExt, path::Path};
use md5::{Digest, Md5};
use serde::Deserialize;

use crate::base::Location;
use crate::error::{Error, Result};

/// One current object of the report, below the dataset's prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryObject {
    /// The key relative to the dataset's prefix.
    pub key: String,
    pub size: u64,
    /// The ETag as the report gives it (unquoted), when it has the column.
    pub etag: Option<String>,
}

/// What [`read_inventory`] read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventorySummary {
    /// The report's `manifest.json`.
    pub manifest_uri: String,
    /// When S3 took the report (milliseconds since the Unix epoch, as the manifest says).
    pub created: Option<String>,
    /// Data files read.
    pub files: usize,
    /// Rows read, of every prefix.
    pub rows: u64,
    /// Objects handed to the sink.
    pub objects: u64,
    /// Rows left out as delete markers or non-current versions.
    pub not_current: u64,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReportManifest {
    source_bucket: String,
    #[serde(default)]
    file_format: String,
    #[serde(default)]
    file_schema: String,
    #[serde(default)]
    creation_timestamp: Option<String>,
    files: Vec<ReportFile>,
}

#[derive(Debug, Deserialize)]
struct ReportFile {
    key: String,
    #[serde(default, rename = "MD5checksum")]
    md5: Option<String>,
}

/// Where each column the dataset needs is in a row.
#[derive(Debug)]
struct Columns {
    bucket: Option<usize>,
    key: usize,
    size: usize,
    etag: Option<usize>,
    is_latest: Option<usize>,
    is_delete_marker: Option<usize>,
    count: usize,
}

impl Columns {
    fn of(schema: &str, manifest_uri: &str) -> Result<Columns> {
        let names: Vec<String> = schema
            .split(',')
            .map(|n| n.trim().to_ascii_lowercase())
            .collect();
        let find = |name: &str| names.iter().position(|n| n == name);
        let required = |name: &str| {
            find(name).ok_or_else(|| Error::Corrupt {
                uri: manifest_uri.to_owned(),
                reason: format!(
                    "its fileSchema ({schema:?}) has no {name} column; a dataset needs the \
                     report's Key and Size: add the Size field to the inventory configuration"
                ),
            })
        };
        Ok(Columns {
            bucket: find("bucket"),
            key: required("key")?,
            size: required("size")?,
            etag: find("etag"),
            is_latest: find("islatest"),
            is_delete_marker: find("isdeletemarker"),
            count: names.len(),
        })
    }
}

/// Reads the S3 Inventory report whose `manifest.json` is `manifest_key` in `reports` (a store
/// opened at the root of the inventory's destination bucket), and hands `sink` every current
/// object of `bucket` whose key starts with `prefix` (a key prefix ending in `/`, or empty for
/// the whole bucket), with its key relative to `prefix`. Objects below `_bucketload/` (the
/// dataset's own) are left out. Rows come in the report's order, which S3 does not promise to be
/// sorted.
pub async fn read_inventory(
    reports: &Store,
    manifest_key: &str,
    bucket: &str,
    prefix: &str,
    sink: &mut (dyn FnMut(InventoryObject) -> Result<()> + Send),
) -> Result<InventorySummary> {
    let location = Location::from_store(reports);
    let manifest_path = Path::from(manifest_key);
    let manifest_uri = location.uri_of(&manifest_path);
    let bytes = get(&location, &manifest_path).await?;
    let manifest: ReportManifest = serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
        uri: manifest_uri.clone(),
        reason: format!(
            "not an S3 Inventory manifest.json ({e}); give the manifest.json of a report"
        ),
    })?;
    if manifest.source_bucket != bucket {
        return Err(Error::invalid_input(format!(
            "{manifest_uri} is the inventory of bucket {}, not of {bucket}; give a report of \
             the dataset's bucket",
            manifest.source_bucket
        )));
    }
    if !manifest.file_format.eq_ignore_ascii_case("csv") {
        return Err(Error::invalid_input(format!(
            "{manifest_uri} is a {} report, which bucketload does not read yet; configure the \
             inventory with the CSV output format",
            manifest.file_format
        )));
    }
    let columns = Columns::of(&manifest.file_schema, &manifest_uri)?;
    let mut summary = InventorySummary {
        manifest_uri: manifest_uri.clone(),
        created: manifest.creation_timestamp.clone(),
        files: 0,
        rows: 0,
        objects: 0,
        not_current: 0,
    };
    for file in &manifest.files {
        let path = Path::from(file.key.as_str());
        let uri = location.uri_of(&path);
        let gz = get(&location, &path).await?;
        if let Some(expected) = &file.md5 {
            let got = hex::encode(Md5::digest(&gz));
            if !got.eq_ignore_ascii_case(expected) {
                return Err(Error::Corrupt {
                    uri,
                    reason: format!(
                        "its MD5 is {got}, the report's manifest says {expected}; the report \
                         changed or was cut short: use a complete report"
                    ),
                });
            }
        }
        let mut csv = String::new();
        flate2::read::MultiGzDecoder::new(&gz[..])
            .read_to_string(&mut csv)
            .map_err(|e| Error::Corrupt {
                uri: uri.clone(),
                reason: format!("not a gzipped UTF-8 CSV file ({e}); use a complete report"),
            })?;
        for (line_no, line) in csv.lines().enumerate() {
            if line.is_empty() {
                continue;
            }
            summary.rows += 1;
            let at = |reason: String| Error::Corrupt {
                uri: uri.clone(),
                reason: format!("line {}: {reason}", line_no + 1),
            };
            let fields = split_csv(line).map_err(at)?;
            if fields.len() != columns.count {
                return Err(at(format!(
                    "{} fields where the schema has {}",
                    fields.len(),
                    columns.count
                )));
            }
            if columns.bucket.is_some_and(|b| fields[b] != bucket) {
                continue;
            }
            let flag = |c: Option<usize>| c.map(|c| fields[c].eq_ignore_ascii_case("true"));
            if flag(columns.is_latest) == Some(false)
                || flag(columns.is_delete_marker) == Some(true)
            {
                summary.not_current += 1;
                continue;
            }
            let key = url_decode(&fields[columns.key]).map_err(at)?;
            let Some(relative) = key.strip_prefix(prefix) else {
                continue;
            };
            if relative.is_empty() || relative.starts_with("_bucketload/") {
                continue;
            }
            let size = fields[columns.size].parse::<u64>().map_err(|_| {
                at(format!(
                    "size {:?} of {key:?} is not a number",
                    fields[columns.size]
                ))
            })?;
            let etag = columns
                .etag
                .map(|c| fields[c].trim_matches('"').to_owned())
                .filter(|e| !e.is_empty());
            summary.objects += 1;
            sink(InventoryObject {
                key: relative.to_owned(),
                size,
                etag,
            })?;
        }
        summary.files += 1;
    }
    Ok(summary)
}

async fn get(location: &Location, path: &Path) -> Result<bytes::Bytes> {
    let got = async { location.store().get(path).await?.bytes().await }.await;
    got.map_err(|e| location.error(path, e))
}

/// The fields of one CSV line: quoted (`"a,b"`, `""` for a quote) or bare.
fn split_csv(line: &str) -> std::result::Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => return Err("a quoted field is not closed".to_owned()),
                }
            }
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => fields.push(field),
                Some(c) => return Err(format!("{c:?} after a quoted field")),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(field);
                        return Ok(fields);
                    }
                    Some(',') => break,
                    Some(c) => field.push(c),
                }
            }
            fields.push(field);
        }
    }
}

/// A key as the report writes it, URL-encoded (`%XX`, and `+` for a space), decoded.
fn url_decode(encoded: &str) -> std::result::Result<String, String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("key {encoded:?} has a bad %-escape"))?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| format!("key {encoded:?} does not decode to UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_quoted_and_bare() {
        assert_eq!(
            split_csv(r#""b","a%2Cb","12","""x""",,y"#).unwrap(),
            ["b", "a%2Cb", "12", "\"x\"", "", "y"]
        );
        assert_eq!(split_csv("").unwrap(), [""]);
        assert!(split_csv(r#""open"#).is_err());
        assert!(split_csv(r#""a"b"#).is_err());
    }

    #[test]
    fn keys_are_url_decoded() {
        assert_eq!(url_decode("a+b%2Fc%C3%BC%2B").unwrap(), "a b/cü+");
        assert_eq!(url_decode("plain/key.jpg").unwrap(), "plain/key.jpg");
        assert!(url_decode("bad%2").is_err());
        assert!(url_decode("bad%zz").is_err());
        assert!(url_decode("%ff").is_err());
    }

    #[test]
    fn schema_needs_key_and_size() {
        let c = Columns::of("Bucket, Key, Size, ETag, IsLatest", "m").unwrap();
        assert_eq!(
            (c.bucket, c.key, c.size, c.etag, c.is_latest),
            (Some(0), 1, 2, Some(3), Some(4))
        );
        let err = Columns::of("Bucket, Key, ETag", "s3://i/m.json").unwrap_err();
        assert!(err.to_string().contains("no size column"), "{err}");
    }
}
