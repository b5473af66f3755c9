//! Reading a manifest of either format one entry at a time: [`read_manifest`] looks at the first
//! bytes (format 2's magic, or JSON's `{`), hands every shard or file entry to the caller's sink
//! as it is decoded, checks order and totals on the way, and returns the header once the whole
//! manifest was read and verified. Nothing grows with the number of entries.

use std::io::{BufRead, BufReader, Read};

use super::{
    ClassCount, DatasetKind, FileEntry, MANIFEST_VERSION, Manifest, Parameters, ShardEntry, binary,
    json,
};
use crate::Error;

/// One entry of a manifest, borrowed from the reader's buffers for the length of one call of
/// the sink (copy what you keep).
#[derive(Debug, Clone, Copy)]
pub enum Entry<'a> {
    /// A shard of a `shards` dataset.
    Shard(&'a ShardEntry),
    /// An object of a `files` dataset.
    File(&'a FileEntry),
}

/// Everything a manifest says besides its entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestHeader {
    /// The format the manifest was read from: 1 (JSON) or 2 (binary).
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
    pub classes: Vec<ClassCount>,
    /// Entries handed to the sink (shards or files).
    pub entries: u64,
}

impl ManifestHeader {
    /// The manifest with these metadata and no entries yet.
    pub fn into_manifest(self) -> Manifest {
        Manifest {
            format_version: self.format_version,
            kind: self.kind,
            parameters: self.parameters,
            samples: self.samples,
            bytes: self.bytes,
            classes: self.classes,
            shards: Vec::new(),
            files: Vec::new(),
        }
    }
}

/// The sink [`read_manifest`] hands entries to; an error it returns stops the read and is
/// returned as is.
pub type EntrySink<'s> = dyn FnMut(Entry<'_>) -> Result<(), Error> + 's;

/// Reads the manifest named `name` (used in errors) from `reader`, format 1 (JSON) or format 2
/// (binary, recognised by its magic), handing each entry to `sink` in manifest order (sorted
/// by name) and returning the rest once the whole manifest was read and checked.
///
/// A truncated, damaged or inconsistent manifest is an error naming it; the sink may have seen
/// some entries by then, which the caller must drop: only `Ok` means the entries were the whole
/// manifest. `reader` need not be buffered.
pub fn read_manifest(
    name: &str,
    reader: impl Read,
    sink: &mut EntrySink<'_>,
) -> Result<ManifestHeader, Error> {
    // 64 KiB: large enough that a GET body bridged into a `Read` is pulled in big pieces.
    let mut reader = BufReader::with_capacity(64 << 10, reader);
    let first = reader.fill_buf().map_err(|source| Error::ManifestIo {
        manifest: name.to_owned(),
        offset: 0,
        action: "read",
        source,
    })?;
    if first.first() == Some(&binary::MAGIC[0]) {
        return binary::read(name, reader, sink);
    }
    if first.is_empty() {
        return Err(Error::CorruptManifest {
            manifest: name.to_owned(),
            offset: 0,
            reason: "the object is empty".to_owned(),
        });
    }
    json::read(name, reader, sink)
}

/// Checks entries as they stream by: the kind matches, names strictly increase, and the totals
/// add up at the end.
#[derive(Debug)]
pub(crate) struct EntryCheck {
    previous: String,
    started: bool,
    pub(crate) entries: u64,
    pub(crate) samples: u64,
    pub(crate) bytes: u64,
}

impl EntryCheck {
    pub(crate) fn new() -> EntryCheck {
        EntryCheck {
            previous: String::new(),
            started: false,
            entries: 0,
            samples: 0,
            bytes: 0,
        }
    }

    /// Records `entry`, or says why it cannot follow the previous one.
    pub(crate) fn add(&mut self, entry: Entry<'_>) -> Result<(), String> {
        let (what, name) = match entry {
            Entry::Shard(s) => ("shard", s.name.as_str()),
            Entry::File(f) => ("file", f.key.as_str()),
        };
        if self.started && self.previous.as_str() >= name {
            return Err(format!("{what} {name:?} is duplicated or out of order"));
        }
        self.started = true;
        self.previous.clear();
        self.previous.push_str(name);
        self.entries += 1;
        let (samples, bytes) = match entry {
            Entry::Shard(s) => (s.samples, s.bytes),
            Entry::File(f) => (1, f.size),
        };
        self.samples = self.samples.saturating_add(samples);
        self.bytes = self.bytes.saturating_add(bytes);
        Ok(())
    }

    /// Checks the header's totals and classes against the entries seen.
    pub(crate) fn finish(&self, header: &ManifestHeader) -> Result<(), String> {
        if header.format_version != MANIFEST_VERSION && header.format_version != 2 {
            return Err(format!(
                "format version {} is not supported (expected 1 or 2); upgrade bucketload",
                header.format_version
            ));
        }
        super::strictly_sorted(header.classes.iter().map(|c| c.name.as_str()))
            .map_err(|n| format!("class {n:?} is duplicated or out of order"))?;
        if (self.samples, self.bytes) != (header.samples, header.bytes) {
            return Err(format!(
                "totals say {} samples and {} bytes but entries sum to {} and {}; re-create the manifest",
                header.samples, header.bytes, self.samples, self.bytes
            ));
        }
        Ok(())
    }
}

/// Whether `entry` belongs in a manifest of `kind`.
pub(crate) fn of_kind(entry: Entry<'_>, kind: DatasetKind) -> bool {
    matches!(
        (entry, kind),
        (Entry::Shard(_), DatasetKind::Shards) | (Entry::File(_), DatasetKind::Files)
    )
}

/// Collects a whole manifest (the convenience behind [`Manifest::read`]).
pub(crate) fn collect(name: &str, reader: impl Read) -> Result<Manifest, Error> {
    let (mut shards, mut files) = (Vec::new(), Vec::new());
    let header = read_manifest(name, reader, &mut |entry| {
        match entry {
            Entry::Shard(s) => shards.push(s.clone()),
            Entry::File(f) => files.push(f.clone()),
        }
        Ok(())
    })?;
    let mut manifest = header.into_manifest();
    manifest.shards = shards;
    manifest.files = files;
    Ok(manifest)
}
