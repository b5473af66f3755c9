//! Format 1 of the manifest (`_bucketload/manifest.json`) read as a stream: a serde visitor
//! walks the top-level object and hands each element of `shards` and `files` to the sink as it
//! is parsed, so no document tree and no list of entries is ever built.

use std::fmt;
use std::io::Read;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::stream::{Entry, EntryCheck, EntrySink, ManifestHeader, of_kind};
use super::{ClassCount, DatasetKind, FileEntry, Parameters, ShardEntry};
use crate::Error;

/// Reads a JSON manifest; see [`read_manifest`](super::read_manifest).
pub(crate) fn read(
    name: &str,
    reader: impl Read,
    sink: &mut EntrySink<'_>,
) -> Result<ManifestHeader, Error> {
    let mut state = State {
        name,
        sink,
        check: EntryCheck::new(),
        kind: None,
        failed: None,
    };
    let mut de = serde_json::Deserializer::from_reader(reader);
    let parsed = (&mut de)
        .deserialize_map(TopLevel { state: &mut state })
        .and_then(|fields| de.end().map(|()| fields));
    if let Some(failed) = state.failed.take() {
        return Err(failed);
    }
    let fields = parsed.map_err(|e| json_error(name, e))?;
    let missing = |field: &str| Error::Manifest {
        manifest: name.to_owned(),
        reason: format!("field `{field}` is missing; re-create the manifest"),
    };
    let header = ManifestHeader {
        format_version: fields
            .format_version
            .ok_or_else(|| missing("format_version"))?,
        kind: fields.kind.ok_or_else(|| missing("kind"))?,
        parameters: fields.parameters.ok_or_else(|| missing("parameters"))?,
        samples: fields.samples.ok_or_else(|| missing("samples"))?,
        bytes: fields.bytes.ok_or_else(|| missing("bytes"))?,
        classes: fields.classes,
        entries: state.check.entries,
    };
    if header.format_version != 1 {
        return Err(Error::Manifest {
            manifest: name.to_owned(),
            reason: format!(
                "format version {} is not supported in JSON (expected 1); upgrade bucketload",
                header.format_version
            ),
        });
    }
    state
        .check
        .finish(&header)
        .map_err(|reason| Error::Manifest {
            manifest: name.to_owned(),
            reason,
        })?;
    Ok(header)
}

/// A JSON error, or the I/O error of the stream under it (a failed GET is not a bad manifest).
fn json_error(name: &str, e: serde_json::Error) -> Error {
    if e.is_io() {
        return Error::ManifestIo {
            manifest: name.to_owned(),
            offset: 0,
            action: "read",
            source: std::io::Error::from(e),
        };
    }
    Error::ManifestJson {
        manifest: name.to_owned(),
        source: e,
    }
}

struct State<'n, 's, 'k> {
    name: &'n str,
    sink: &'s mut EntrySink<'k>,
    check: EntryCheck,
    kind: Option<DatasetKind>,
    /// The error of the sink or of the entry checks, which serde only sees as "custom".
    failed: Option<Error>,
}

impl State<'_, '_, '_> {
    fn accept(&mut self, entry: Entry<'_>) -> Result<(), Error> {
        let fail = |reason: String| Error::Manifest {
            manifest: self.name.to_owned(),
            reason,
        };
        if let Some(kind) = self.kind
            && !of_kind(entry, kind)
        {
            return Err(fail(format!("a {kind:?} manifest lists {entry:?}")));
        }
        self.check.add(entry).map_err(fail)?;
        (self.sink)(entry)
    }
}

#[derive(Default)]
struct Fields {
    format_version: Option<u32>,
    kind: Option<DatasetKind>,
    parameters: Option<Parameters>,
    samples: Option<u64>,
    bytes: Option<u64>,
    classes: Vec<ClassCount>,
}

struct TopLevel<'a, 'n, 's, 'k> {
    state: &'a mut State<'n, 's, 'k>,
}

impl<'de> Visitor<'de> for TopLevel<'_, '_, '_, '_> {
    type Value = Fields;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a bucketload manifest object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
        let mut fields = Fields::default();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "format_version" => fields.format_version = Some(map.next_value()?),
                "kind" => {
                    let kind = map.next_value()?;
                    self.state.kind = Some(kind);
                    fields.kind = Some(kind);
                }
                "parameters" => fields.parameters = Some(map.next_value()?),
                "samples" => fields.samples = Some(map.next_value()?),
                "bytes" => fields.bytes = Some(map.next_value()?),
                "classes" => fields.classes = map.next_value()?,
                "shards" => map.next_value_seed(Entries::<ShardEntry> {
                    state: self.state,
                    of: std::marker::PhantomData,
                })?,
                "files" => map.next_value_seed(Entries::<FileEntry> {
                    state: self.state,
                    of: std::marker::PhantomData,
                })?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(fields)
    }
}

/// Either kind of entry, for [`Entries`].
trait AnyEntry: for<'de> serde::Deserialize<'de> {
    fn entry(&self) -> Entry<'_>;
}

impl AnyEntry for ShardEntry {
    fn entry(&self) -> Entry<'_> {
        Entry::Shard(self)
    }
}

impl AnyEntry for FileEntry {
    fn entry(&self) -> Entry<'_> {
        Entry::File(self)
    }
}

struct Entries<'a, 'n, 's, 'k, T> {
    state: &'a mut State<'n, 's, 'k>,
    of: std::marker::PhantomData<T>,
}

impl<'de, T: AnyEntry> DeserializeSeed<'de> for Entries<'_, '_, '_, '_, T> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_seq(self)
    }
}

impl<'de, T: AnyEntry> Visitor<'de> for Entries<'_, '_, '_, '_, T> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of manifest entries")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(entry) = seq.next_element::<T>()? {
            if let Err(e) = self.state.accept(entry.entry()) {
                self.state.failed = Some(e);
                return Err(de::Error::custom("stopped by the manifest's reader"));
            }
        }
        Ok(())
    }
}
