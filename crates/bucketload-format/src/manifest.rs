//! The dataset manifest at the dataset root: format 2 (`_bucketload/manifest.bin`, binary,
//! compressed, streamed; [`ManifestWriter`]) and format 1 (`_bucketload/manifest.json`), both
//! read one entry at a time by [`read_manifest`]. [`Manifest`] collects a whole one, for the
//! tools that need every entry at once.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

mod binary;
mod json;
mod stream;

pub use binary::{MANIFEST2_MAGIC, ManifestWriter};
pub use stream::{Entry, EntrySink, ManifestHeader, read_manifest};

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::writer::ShardSummary;

/// Path of a format-1 (JSON) manifest relative to the dataset root.
pub const MANIFEST_PATH: &str = "_bucketload/manifest.json";

/// Path of a format-2 (binary) manifest relative to the dataset root.
pub const MANIFEST_BIN_PATH: &str = "_bucketload/manifest.bin";

/// Where readers look for a manifest, in order: format 2 first, then format 1.
pub const MANIFEST_PATHS: [&str; 2] = [MANIFEST_BIN_PATH, MANIFEST_PATH];

/// The version of JSON manifests (format 1).
pub const MANIFEST_VERSION: u32 = 1;

/// The version of binary manifests (format 2).
pub const MANIFEST2_VERSION: u32 = binary::VERSION;

/// Which format a manifest is written in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ManifestFormat {
    /// Format 1: pretty JSON at [`MANIFEST_PATH`], read by every bucketload version.
    Json,
    /// Format 2: binary, compressed and checksummed, at [`MANIFEST_BIN_PATH`] (the default).
    #[default]
    Binary,
}

impl ManifestFormat {
    /// The format of `version` (1 or 2).
    pub fn from_version(version: u32) -> Option<ManifestFormat> {
        match version {
            MANIFEST_VERSION => Some(ManifestFormat::Json),
            MANIFEST2_VERSION => Some(ManifestFormat::Binary),
            _ => None,
        }
    }

    /// Its version number.
    pub fn version(self) -> u32 {
        match self {
            ManifestFormat::Json => MANIFEST_VERSION,
            ManifestFormat::Binary => MANIFEST2_VERSION,
        }
    }

    /// Where a manifest in this format lives, relative to the dataset root.
    pub fn path(self) -> &'static str {
        match self {
            ManifestFormat::Json => MANIFEST_PATH,
            ManifestFormat::Binary => MANIFEST_BIN_PATH,
        }
    }

    /// Where the manifest of the other format lives (a writer removes it, so that the two
    /// never disagree).
    pub fn other_path(self) -> &'static str {
        match self {
            ManifestFormat::Json => MANIFEST_BIN_PATH,
            ManifestFormat::Binary => MANIFEST_PATH,
        }
    }
}

/// How the dataset is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DatasetKind {
    /// Tar shards with indexes.
    Shards,
    /// One object per sample file.
    Files,
}

/// Which slice of a `--part i/N` run produced a manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartSpec {
    /// Zero-based slice number.
    pub index: u32,
    /// Number of slices.
    pub count: u32,
}

/// The parameters that created the dataset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parameters {
    /// Source URI the samples came from.
    pub source: String,
    /// Target shard size in bytes (`shards` datasets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_size: Option<u64>,
    /// Target samples per shard (`shards` datasets cut by count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_per_shard: Option<u64>,
    /// Shuffle seed, if shuffled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Digest of the sharding plan (the source listing and the options), 16 hex digits: every
    /// `--part` of one run has the same plan, and a resumed run checks it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Label policy (`none`, `folder`, ...).
    pub label_policy: String,
    /// bucketload version that wrote the dataset.
    pub tool_version: String,
    /// Creation time, RFC 3339 UTC (`2026-11-22T05:15:00Z`).
    pub created: String,
    /// The slice this manifest covers; absent once merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<PartSpec>,
}

/// One shard of a `shards` dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEntry {
    /// Object name relative to the dataset root.
    pub name: String,
    /// Index object name relative to the dataset root.
    pub index: String,
    /// Samples in the shard.
    pub samples: u64,
    /// Shard size in bytes.
    pub bytes: u64,
    /// CRC32C of the shard, 8 lowercase hex digits.
    pub crc32c: String,
    /// MD5 of the shard, 32 lowercase hex digits; empty (absent from the JSON) when it was not
    /// computed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub md5: String,
}

impl ShardEntry {
    /// The entry for a shard written by [`TarWriter`](crate::TarWriter).
    pub fn from_summary(
        name: impl Into<String>,
        index: impl Into<String>,
        samples: u64,
        summary: &ShardSummary,
    ) -> ShardEntry {
        ShardEntry {
            name: name.into(),
            index: index.into(),
            samples,
            bytes: summary.size,
            crc32c: format!("{:08x}", summary.crc32c),
            md5: if summary.md5 == [0; 16] {
                String::new()
            } else {
                hex::encode(summary.md5)
            },
        }
    }
}

/// One object of a `files` dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Key relative to the dataset root.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// ETag as reported by the store, quotes removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// CRC32C, 8 lowercase hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc32c: Option<String>,
}

/// Samples per class; the class index is the position in the list, which
/// is sorted by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassCount {
    /// Class (folder) name.
    pub name: String,
    /// Samples with this class.
    pub count: u64,
}

/// The dataset manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The format it was read from, or is to be written in: [`MANIFEST_VERSION`] (JSON) or
    /// [`MANIFEST2_VERSION`] (binary). [`Manifest::encode`] writes either whatever it says.
    pub format_version: u32,
    /// `shards` or `files`.
    pub kind: DatasetKind,
    /// How the dataset was made.
    pub parameters: Parameters,
    /// Total samples.
    pub samples: u64,
    /// Total bytes of shards or files.
    pub bytes: u64,
    /// Classes sorted by name with sample counts (empty without labels).
    #[serde(default)]
    pub classes: Vec<ClassCount>,
    /// Shards sorted by name (`shards` datasets).
    #[serde(default)]
    pub shards: Vec<ShardEntry>,
    /// Files sorted by key (`files` datasets).
    #[serde(default)]
    pub files: Vec<FileEntry>,
}

impl Manifest {
    /// Parses and validates a manifest named `name` (used in errors), of either format (the
    /// name is historical).
    pub fn from_json(name: &str, bytes: &[u8]) -> Result<Manifest, Error> {
        Manifest::read(name, bytes)
    }

    /// Reads and validates a whole manifest of either format from `reader`, collecting every
    /// entry ([`read_manifest`] streams them instead).
    pub fn read(name: &str, reader: impl Read) -> Result<Manifest, Error> {
        stream::collect(name, reader)
    }

    /// Format 1: pretty JSON with a trailing newline (`format_version` 1 whatever this one
    /// says).
    pub fn to_json(&self) -> Vec<u8> {
        let json = match self.format_version {
            MANIFEST_VERSION => serde_json::to_vec_pretty(self),
            _ => serde_json::to_vec_pretty(&Manifest {
                format_version: MANIFEST_VERSION,
                ..self.clone()
            }),
        };
        let mut out = json.unwrap_or_default();
        out.push(b'\n');
        out
    }

    /// Format 2: the binary manifest ([`ManifestWriter`]). `name` is used in errors: entries
    /// out of order or of the wrong kind.
    pub fn to_binary(&self, name: &str) -> Result<Vec<u8>, Error> {
        let mut writer = ManifestWriter::new(name, Vec::new(), self.kind)?;
        for shard in &self.shards {
            writer.push_shard(shard)?;
        }
        for file in &self.files {
            writer.push_file(file)?;
        }
        let (out, _) = writer.finish(self.parameters.clone(), self.classes.clone())?;
        Ok(out)
    }

    /// The bytes of this manifest in `format`.
    pub fn encode(&self, name: &str, format: ManifestFormat) -> Result<Vec<u8>, Error> {
        match format {
            ManifestFormat::Json => Ok(self.to_json()),
            ManifestFormat::Binary => self.to_binary(name),
        }
    }

    /// Checks the version, totals, ordering and uniqueness of names.
    pub fn validate(&self, name: &str) -> Result<(), Error> {
        let fail = |reason: String| Error::Manifest {
            manifest: name.to_owned(),
            reason,
        };
        if ManifestFormat::from_version(self.format_version).is_none() {
            return Err(fail(format!(
                "format version {} is not supported (expected {MANIFEST_VERSION} or {MANIFEST2_VERSION}); upgrade bucketload",
                self.format_version
            )));
        }
        strictly_sorted(self.shards.iter().map(|s| s.name.as_str()))
            .map_err(|n| fail(format!("shard {n:?} is duplicated or out of order")))?;
        strictly_sorted(self.files.iter().map(|f| f.key.as_str()))
            .map_err(|n| fail(format!("file {n:?} is duplicated or out of order")))?;
        strictly_sorted(self.classes.iter().map(|c| c.name.as_str()))
            .map_err(|n| fail(format!("class {n:?} is duplicated or out of order")))?;
        let (samples, bytes) = match self.kind {
            DatasetKind::Shards => (
                self.shards.iter().map(|s| s.samples).sum(),
                self.shards.iter().map(|s| s.bytes).sum(),
            ),
            DatasetKind::Files => (
                self.files.len() as u64,
                self.files.iter().map(|f| f.size).sum(),
            ),
        };
        if (samples, bytes) != (self.samples, self.bytes) {
            return Err(fail(format!(
                "totals say {} samples and {} bytes but entries sum to {samples} and {bytes}; re-create the manifest",
                self.samples, self.bytes
            )));
        }
        Ok(())
    }
}

fn strictly_sorted<'a>(names: impl Iterator<Item = &'a str>) -> Result<(), &'a str> {
    let mut previous: Option<&str> = None;
    for name in names {
        if previous.is_some_and(|p| p >= name) {
            return Err(name);
        }
        previous = Some(name);
    }
    Ok(())
}

/// Stitches the manifests of `--part i/N` slices into one: shards and files
/// are concatenated and sorted, class counts summed, totals recomputed.
/// Fails if versions, kinds or parameters differ (other than `created` and
/// `part`), if a shard or file appears in two parts, or if a part is
/// missing or repeated. `created` becomes the latest of the parts'.
pub fn merge_manifests(parts: &[Manifest]) -> Result<Manifest, Error> {
    let fail = |reason: String| Error::Manifest {
        manifest: "merged manifest".to_owned(),
        reason,
    };
    let first = parts
        .first()
        .ok_or_else(|| fail("no manifests to merge".into()))?;
    check_parts(parts).map_err(fail)?;
    let mut shards = BTreeMap::new();
    let mut files = BTreeMap::new();
    let mut classes: BTreeMap<String, u64> = BTreeMap::new();
    for (i, part) in parts.iter().enumerate() {
        part.validate(&format!("part {i}"))?;
        for s in &part.shards {
            if shards.insert(s.name.clone(), s.clone()).is_some() {
                return Err(fail(format!(
                    "shard {:?} appears in more than one part",
                    s.name
                )));
            }
        }
        for f in &part.files {
            if files.insert(f.key.clone(), f.clone()).is_some() {
                return Err(fail(format!(
                    "file {:?} appears in more than one part",
                    f.key
                )));
            }
        }
        for c in &part.classes {
            *classes.entry(c.name.clone()).or_default() += c.count;
        }
    }
    let created = parts
        .iter()
        .map(|p| p.parameters.created.clone())
        .max()
        .unwrap_or_default();
    let merged = Manifest {
        format_version: MANIFEST_VERSION,
        kind: first.kind,
        parameters: Parameters {
            created,
            part: None,
            ..first.parameters.clone()
        },
        samples: parts.iter().map(|p| p.samples).sum(),
        bytes: parts.iter().map(|p| p.bytes).sum(),
        classes: classes
            .into_iter()
            .map(|(name, count)| ClassCount { name, count })
            .collect(),
        shards: shards.into_values().collect(),
        files: files.into_values().collect(),
    };
    merged.validate("merged manifest")?;
    Ok(merged)
}

fn check_parts(parts: &[Manifest]) -> Result<(), String> {
    let first = &parts[0];
    let comparable = |p: &Parameters| Parameters {
        created: String::new(),
        part: None,
        ..p.clone()
    };
    let mut seen = BTreeSet::new();
    for (i, part) in parts.iter().enumerate() {
        if part.format_version != first.format_version {
            return Err(format!(
                "part {i} has format version {} but part 0 has {}",
                part.format_version, first.format_version
            ));
        }
        if part.kind != first.kind {
            return Err(format!(
                "part {i} is a {:?} dataset but part 0 is {:?}",
                part.kind, first.kind
            ));
        }
        if comparable(&part.parameters) != comparable(&first.parameters) {
            return Err(format!(
                "part {i} was made with different parameters than part 0; re-run it with the same options"
            ));
        }
        if let Some(spec) = part.parameters.part {
            let expected = first.parameters.part.map(|p| p.count);
            if Some(spec.count) != expected || spec.index >= spec.count || !seen.insert(spec.index)
            {
                return Err(format!(
                    "part {i} is slice {}/{} which is repeated or inconsistent",
                    spec.index, spec.count
                ));
            }
        }
    }
    if let Some(spec) = first.parameters.part
        && seen.len() != spec.count as usize
    {
        let missing: Vec<u32> = (0..spec.count).filter(|i| !seen.contains(i)).collect();
        return Err(format!(
            "slices {missing:?} of {} are missing; run them before merging",
            spec.count
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_entries_hex_encode_checksums() {
        let summary = ShardSummary {
            size: 3072,
            crc32c: 0x0c,
            md5: [0xab; 16],
            members: 2,
        };
        let entry =
            ShardEntry::from_summary("shard-000000.tar", "shard-000000.tar.idx", 1, &summary);
        assert_eq!((entry.crc32c.as_str(), entry.bytes), ("0000000c", 3072));
        assert_eq!(entry.md5, "ab".repeat(16));
    }
}
