//! An S3 Inventory report as a dataset's listing: a LIST of 10⁸ keys costs 10⁵ requests and
//! hours, the daily (or weekly) inventory report of the bucket already holds them.
//!
//! A report is a `manifest.json` in the inventory's destination bucket
//! (`<destination prefix>/<source bucket>/<configuration>/<YYYY-MM-DDTHH-MMZ>/manifest.json`)
//! naming its data files, each with its MD5; [`read_inventory`] reads the manifest, then each
//! data file, checks its MD5, and hands every current object of the source bucket below a
//! prefix to a sink, one at a time. Two output formats are read: CSV (gzipped, columns as the
//! manifest's `fileSchema` says, keys URL-encoded and decoded here) and Parquet (columns found
//! by name in each file's own schema, `bucket`, `key`, `size`, `e_tag`, `is_latest`,
//! `is_delete_marker`; keys as they are, which S3 encodes in CSV reports only; only those
//! columns are decoded; Snappy, S3's compression, or none). Delete markers and non-current
//! versions (a versioned report's `IsDeleteMarker` / `IsLatest` columns) are not objects of the
//! dataset. A data file's bytes are held while it is read (a CSV file's text is decompressed
//! a line at a time); the sink is called as rows are decoded.
//!
//! What the report cannot know: objects written or deleted since it was taken. An object the
//! report lists that the store no longer has is an error naming it when the dataset is read
//! (the loader's stale-manifest error); objects added since are not in the dataset.
//! ORC reports are refused with what to do (configure the inventory as CSV or Parquet).

use std::io::BufRead;

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use parquet::schema::types::Type as ParquetType;

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
    let format = match manifest.file_format.to_ascii_lowercase().as_str() {
        "csv" => ReportFormat::Csv(Columns::of(&manifest.file_schema, &manifest_uri)?),
        "parquet" => ReportFormat::Parquet,
        _ => {
            return Err(Error::invalid_input(format!(
                "{manifest_uri} is a {} report, which bucketload does not read; configure the \
                 inventory with the CSV or Parquet output format",
                manifest.file_format
            )));
        }
    };
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
        let data = get(&location, &path).await?;
        if let Some(expected) = &file.md5 {
            let got = hex::encode(Md5::digest(&data));
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
        let mut rows = Rows {
            bucket,
            prefix,
            summary: &mut summary,
            sink: &mut *sink,
        };
        match &format {
            ReportFormat::Csv(columns) => read_csv(&data, columns, &uri, &mut rows)?,
            ReportFormat::Parquet => read_parquet(data, &uri, &mut rows)?,
        }
        summary.files += 1;
    }
    Ok(summary)
}

async fn get(location: &Location, path: &Path) -> Result<bytes::Bytes> {
    let got = async { location.store().get(path).await?.bytes().await }.await;
    got.map_err(|e| location.error(path, e))
}

/// How the report's data files are written.
#[derive(Debug)]
enum ReportFormat {
    /// Gzipped CSV, columns as the manifest's `fileSchema` says.
    Csv(Columns),
    /// Parquet, columns named in each file's schema.
    Parquet,
}

/// One row of a report, its key decoded.
#[derive(Debug, Default)]
struct Row<'a> {
    bucket: Option<&'a str>,
    key: Option<std::borrow::Cow<'a, str>>,
    /// The size as written, for the error when it is not a number.
    size: Option<Result<u64, String>>,
    etag: Option<&'a str>,
    is_latest: Option<bool>,
    is_delete_marker: Option<bool>,
}

/// Where the rows of every data file go: the current objects of `bucket` below `prefix` to
/// the sink, counted in the summary.
struct Rows<'s, 'k> {
    bucket: &'s str,
    prefix: &'s str,
    summary: &'s mut InventorySummary,
    sink: &'s mut (dyn FnMut(InventoryObject) -> Result<()> + Send + 'k),
}

impl Rows<'_, '_> {
    /// Takes one row; `at` words an error about it (where it is in the file).
    fn offer(&mut self, row: Row<'_>, at: &dyn Fn(String) -> Error) -> Result<()> {
        self.summary.rows += 1;
        if row.bucket.is_some_and(|b| b != self.bucket) {
            return Ok(());
        }
        if row.is_latest == Some(false) || row.is_delete_marker == Some(true) {
            self.summary.not_current += 1;
            return Ok(());
        }
        let Some(key) = row.key else {
            return Err(at("the row has no key".to_owned()));
        };
        let Some(relative) = key.strip_prefix(self.prefix) else {
            return Ok(());
        };
        if relative.is_empty() || relative.starts_with("_bucketload/") {
            return Ok(());
        }
        let size = match row.size {
            Some(Ok(size)) => size,
            Some(Err(text)) => return Err(at(format!("size {text:?} of {key:?} is not a number"))),
            None => return Err(at(format!("{key:?} has no size"))),
        };
        let etag = row
            .etag
            .map(|e| e.trim_matches('"').to_owned())
            .filter(|e| !e.is_empty());
        self.summary.objects += 1;
        (self.sink)(InventoryObject {
            key: relative.to_owned(),
            size,
            etag,
        })
    }
}

/// Hands every row of a gzipped CSV data file to `rows`.
fn read_csv(gz: &[u8], columns: &Columns, uri: &str, rows: &mut Rows<'_, '_>) -> Result<()> {
    // Decompressed a line at a time: the text of a data file is several times its size.
    let csv = std::io::BufReader::new(flate2::read::MultiGzDecoder::new(gz));
    for (line_no, line) in csv.lines().enumerate() {
        let line = line.map_err(|e| Error::Corrupt {
            uri: uri.to_owned(),
            reason: format!("not a gzipped UTF-8 CSV file ({e}); use a complete report"),
        })?;
        if line.is_empty() {
            continue;
        }
        let at = |reason: String| Error::Corrupt {
            uri: uri.to_owned(),
            reason: format!("line {}: {reason}", line_no + 1),
        };
        let fields = split_csv(&line).map_err(at)?;
        if fields.len() != columns.count {
            return Err(at(format!(
                "{} fields where the schema has {}",
                fields.len(),
                columns.count
            )));
        }
        let flag = |c: Option<usize>| c.map(|c| fields[c].eq_ignore_ascii_case("true"));
        let size = &fields[columns.size];
        let row = Row {
            bucket: columns.bucket.map(|b| fields[b].as_str()),
            key: Some(url_decode(&fields[columns.key]).map_err(at)?.into()),
            size: (!size.is_empty()).then(|| size.parse::<u64>().map_err(|_| size.clone())),
            etag: columns.etag.map(|c| fields[c].as_str()),
            is_latest: flag(columns.is_latest),
            is_delete_marker: flag(columns.is_delete_marker),
        };
        rows.offer(row, &at)?;
    }
    Ok(())
}

/// What a Parquet column of the report is to the dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Bucket,
    Key,
    Size,
    ETag,
    IsLatest,
    IsDeleteMarker,
}

impl Role {
    /// The role of the column named `name` (S3 Inventory's Parquet names), if the dataset
    /// needs it.
    fn of(name: &str) -> Option<Role> {
        Some(match name.to_ascii_lowercase().as_str() {
            "bucket" => Role::Bucket,
            "key" => Role::Key,
            "size" => Role::Size,
            "e_tag" => Role::ETag,
            "is_latest" => Role::IsLatest,
            "is_delete_marker" => Role::IsDeleteMarker,
            _ => return None,
        })
    }
}

/// Hands every row of a Parquet data file to `rows`, decoding only the columns it needs.
fn read_parquet(file: bytes::Bytes, uri: &str, rows: &mut Rows<'_, '_>) -> Result<()> {
    let corrupt = |e: parquet::errors::ParquetError| Error::Corrupt {
        uri: uri.to_owned(),
        reason: format!("not a readable Parquet file ({e}); use a complete report"),
    };
    let reader = SerializedFileReader::new(file).map_err(corrupt)?;
    let schema = reader.metadata().file_metadata().schema();
    let (mut roles, mut fields) = (Vec::new(), Vec::new());
    for field in schema.get_fields() {
        if let Some(role) = Role::of(field.name()).filter(|r| !roles.contains(r)) {
            roles.push(role);
            fields.push(field.clone());
        }
    }
    for (role, name) in [(Role::Key, "key"), (Role::Size, "size")] {
        if !roles.contains(&role) {
            return Err(Error::Corrupt {
                uri: uri.to_owned(),
                reason: format!(
                    "its schema has no {name} column; a dataset needs the report's key and \
                     size: add the Size field to the inventory configuration"
                ),
            });
        }
    }
    let projection = ParquetType::group_type_builder(schema.name())
        .with_fields(fields)
        .build()
        .map_err(corrupt)?;
    let records = reader.get_row_iter(Some(projection)).map_err(corrupt)?;
    for (n, record) in records.enumerate() {
        let at = |reason: String| Error::Corrupt {
            uri: uri.to_owned(),
            reason: format!("row {}: {reason}", n + 1),
        };
        let record = record.map_err(corrupt)?;
        let mut row = Row::default();
        for (role, (name, value)) in roles.iter().zip(record.get_column_iter()) {
            let wrong = || at(format!("column {name} holds {value:?}"));
            match (role, value) {
                (_, Field::Null) => {}
                (Role::Bucket, v) => row.bucket = Some(text(v).ok_or_else(wrong)?),
                (Role::Key, v) => row.key = Some(text(v).ok_or_else(wrong)?.into()),
                (Role::ETag, v) => row.etag = Some(text(v).ok_or_else(wrong)?),
                (Role::Size, Field::Long(n)) => {
                    row.size = Some(u64::try_from(*n).map_err(|_| n.to_string()));
                }
                (Role::Size, Field::Int(n)) => {
                    row.size = Some(u64::try_from(*n).map_err(|_| n.to_string()));
                }
                (Role::IsLatest, Field::Bool(b)) => row.is_latest = Some(*b),
                (Role::IsDeleteMarker, Field::Bool(b)) => row.is_delete_marker = Some(*b),
                _ => return Err(wrong()),
            }
        }
        rows.offer(row, &at)?;
    }
    Ok(())
}

/// A Parquet string value (a UTF-8 annotated column, or bytes that are UTF-8).
fn text(value: &Field) -> Option<&str> {
    match value {
        Field::Str(s) => Some(s),
        Field::Bytes(b) => std::str::from_utf8(b.data()).ok(),
        _ => None,
    }
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
    fn parquet_columns_are_found_by_s3_names() {
        assert_eq!(Role::of("key"), Some(Role::Key));
        assert_eq!(Role::of("E_TAG"), Some(Role::ETag));
        assert_eq!(Role::of("is_delete_marker"), Some(Role::IsDeleteMarker));
        assert_eq!(Role::of("last_modified_date"), None);
    }

    #[test]
    fn a_file_that_is_not_parquet_is_corrupt() {
        let mut summary = InventorySummary {
            manifest_uri: "m".into(),
            created: None,
            files: 0,
            rows: 0,
            objects: 0,
            not_current: 0,
        };
        let mut sink = |_: InventoryObject| Ok(());
        let mut rows = Rows {
            bucket: "b",
            prefix: "",
            summary: &mut summary,
            sink: &mut sink,
        };
        let bytes = bytes::Bytes::from_static(b"PAR1 not really");
        let err = read_parquet(bytes, "s3://i/d.parquet", &mut rows).unwrap_err();
        assert!(err.to_string().contains("s3://i/d.parquet"), "{err}");
        assert!(err.to_string().contains("Parquet"), "{err}");
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
