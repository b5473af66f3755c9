//! Where a tool works: a store, the URI of its root and its endpoint, so every error names the
//! object it is about.

use std::sync::Arc;

use bucketload_store::object_store::{GetOptions, ObjectStore, ObjectStoreExt, path::Path};
use futures::StreamExt;

use crate::error::Error;

/// A manifest streamed by [`Location::read_manifest`].
pub struct ManifestRead<S> {
    /// The object it was read from (`_bucketload/manifest.bin` or `_bucketload/manifest.json`).
    pub key: Path,
    /// Everything but the entries.
    pub header: bucketload_format::ManifestHeader,
    /// The sink, given back.
    pub sink: S,
}

impl<S> std::fmt::Debug for ManifestRead<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManifestRead")
            .field("key", &self.key)
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

/// Every entry of a manifest (for [`Location::manifest`]).
#[derive(Debug, Default)]
struct Collect {
    shards: Vec<bucketload_format::ShardEntry>,
    files: Vec<bucketload_format::FileEntry>,
}

/// A GET body, fed chunk by chunk over a channel, read as a blocking [`std::io::Read`].
/// Bytes of a manifest read by one ranged GET, when it is larger than that (see
/// [`Location::stream_manifest`]); `BUCKETLOAD_MANIFEST_RANGE` (bytes, e.g. `1KiB`) overrides it,
/// for tests; `0` reads the whole body in one GET.
const MANIFEST_RANGE: u64 = 8 << 20;
/// Ranged GETs of one manifest in flight.
const MANIFEST_RANGES_IN_FLIGHT: usize = 3;

fn manifest_range() -> Option<u64> {
    let range = std::env::var("BUCKETLOAD_MANIFEST_RANGE")
        .ok()
        .and_then(|v| bucketload_store::parse_size(&v).ok())
        .unwrap_or(MANIFEST_RANGE);
    (range > 0).then_some(range)
}

struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<std::io::Result<bytes::Bytes>>,
    current: bytes::Bytes,
}

impl std::io::Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                None => return Ok(0),
                Some(chunk) => self.current = chunk?,
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// A store together with the URI of its root and its endpoint, so errors name objects fully.
#[derive(Clone)]
pub struct Location {
    store: Arc<dyn ObjectStore>,
    base: String,
    endpoint: String,
    root: String,
    handle: Option<bucketload_store::Store>,
}

impl std::fmt::Debug for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Location")
            .field("base", &self.base)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.base)
    }
}

impl Location {
    /// A store whose keys are relative to `base_uri` (e.g. `s3://bucket/prefix`); `endpoint`
    /// names the server in "cannot reach" messages.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        base_uri: impl Into<String>,
        endpoint: impl Into<String>,
    ) -> Location {
        let base = base_uri.into().trim_end_matches('/').to_string();
        Location {
            root: format!("{base}/"),
            store,
            base,
            endpoint: endpoint.into(),
            handle: None,
        }
    }

    /// Wraps a [`bucketload_store::Store`].
    pub fn from_store(store: &bucketload_store::Store) -> Location {
        let endpoint = store
            .config()
            .endpoint()
            .unwrap_or("the AWS S3 endpoint")
            .to_string();
        let mut location = Location::new(store.object_store(), store.uri().to_string(), endpoint);
        location.root = store.uri().root();
        location.handle = Some(store.clone());
        location
    }

    /// The dataset manifest at the root, `None` if there is none: format 2
    /// (`_bucketload/manifest.bin`) when there is one, else format 1
    /// (`_bucketload/manifest.json`), streamed from the GET through
    /// [`Location::read_manifest`] and collected. A manifest that does not read whole is an
    /// error naming it.
    pub async fn manifest(&self) -> crate::Result<Option<bucketload_format::Manifest>> {
        Ok(self.manifest_found().await?.map(|(_, manifest)| manifest))
    }

    /// [`Location::manifest`] with the key of the object it was read from.
    pub async fn manifest_found(
        &self,
    ) -> crate::Result<Option<(Path, bucketload_format::Manifest)>> {
        let Some((key, got)) = self.manifest_get().await? else {
            return Ok(None);
        };
        let manifest = self.manifest_of(key.clone(), got).await?;
        Ok(Some((key, manifest)))
    }

    /// The whole manifest of a [`Location::manifest_get`] response, streamed from its body and
    /// collected.
    pub async fn manifest_of(
        &self,
        key: Path,
        got: bucketload_store::object_store::GetResult,
    ) -> crate::Result<bucketload_format::Manifest> {
        use bucketload_format::Entry;
        let collected = Arc::new(std::sync::Mutex::new(Collect::default()));
        let into = Arc::clone(&collected);
        let sink = move |entry: Entry<'_>| {
            let mut into = into
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match entry {
                Entry::Shard(s) => into.shards.push(s.clone()),
                Entry::File(f) => into.files.push(f.clone()),
            }
            Ok(())
        };
        let found = self.stream_manifest(key, got, sink).await?;
        drop(found.sink);
        let collected = std::mem::take(
            &mut *collected
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let mut manifest = found.header.into_manifest();
        (manifest.shards, manifest.files) = (collected.shards, collected.files);
        Ok(manifest)
    }

    /// Streams the dataset manifest (format 2 first, then format 1) into `sink` one entry at
    /// a time, without holding the object: the GET body is parsed on a blocking thread as it
    /// arrives (a few chunks buffered), and the sink runs there. Returns `None` when the
    /// dataset has no manifest, else the header and the sink back. An error (a truncated or
    /// damaged manifest, a failed GET, or the sink's own) means the entries seen were not the
    /// whole manifest: drop them.
    pub async fn read_manifest<S>(&self, sink: S) -> crate::Result<Option<ManifestRead<S>>>
    where
        S: FnMut(bucketload_format::Entry<'_>) -> Result<(), bucketload_format::Error>
            + Send
            + 'static,
    {
        for path in bucketload_format::MANIFEST_PATHS {
            let key = Path::from(path);
            match self.store.get(&key).await {
                Ok(got) => return self.stream_manifest(key, got, sink).await.map(Some),
                Err(bucketload_store::object_store::Error::NotFound { .. }) => continue,
                Err(e) => return Err(self.error(&key, e)),
            }
        }
        Ok(None)
    }

    /// The error of a ranged read of manifest `key`: a failed `If-Match` means the manifest was
    /// replaced while it was read.
    fn manifest_error(&self, key: &Path, e: bucketload_store::object_store::Error) -> Error {
        match e {
            bucketload_store::object_store::Error::Precondition { .. } => Error::Corrupt {
                uri: self.uri_of(key),
                reason: "the manifest was replaced while it was read; open the dataset again"
                    .to_owned(),
            },
            e => self.error(key, e),
        }
    }

    /// Streams the body of a [`Location::manifest_get`] response into `sink` (see
    /// [`Location::read_manifest`]).
    pub async fn stream_manifest<S>(
        &self,
        key: Path,
        got: bucketload_store::object_store::GetResult,
        mut sink: S,
    ) -> crate::Result<ManifestRead<S>>
    where
        S: FnMut(bucketload_format::Entry<'_>) -> Result<(), bucketload_format::Error>
            + Send
            + 'static,
    {
        // A manifest larger than one range is read by ranged GETs, each read whole at the
        // network's pace, a few in flight, all of the version first answered (`If-Match`): read
        // at the parser's pace, one body of GBs would outlive the client's request timeout.
        let size = got.meta.size;
        let ranged = manifest_range().filter(|&r| size > r && got.meta.e_tag.is_some());
        // Chunks in flight between the GETs and the parser: enough to overlap network and
        // parsing, few enough that memory stays bounded (body chunks are KBs, ranges MBs).
        let in_flight = if ranged.is_some() { 2 } else { 16 };
        let (tx, rx) = tokio::sync::mpsc::channel(in_flight);
        let name = self.uri_of(&key);
        let parse = tokio::task::spawn_blocking(move || {
            let reader = ChannelReader {
                rx,
                current: bytes::Bytes::new(),
            };
            let header = bucketload_format::read_manifest(&name, reader, &mut sink);
            (header, sink)
        });
        match ranged {
            None => {
                let mut body = got.into_stream();
                while let Some(chunk) = body.next().await {
                    let chunk = chunk.map_err(|e| std::io::Error::other(self.error(&key, e)));
                    if tx.send(chunk).await.is_err() {
                        break; // the parser stopped (an error it returns below)
                    }
                }
            }
            Some(range) => {
                let etag = got.meta.e_tag.clone();
                drop(got);
                let starts = (0..size).step_by(usize::try_from(range).unwrap_or(usize::MAX));
                let mut ranges = futures::stream::iter(starts)
                    .map(|start| {
                        let options = GetOptions {
                            range: Some((start..size.min(start + range)).into()),
                            if_match: etag.clone(),
                            ..GetOptions::default()
                        };
                        let (store, key) = (&self.store, &key);
                        async move { store.get_opts(key, options).await?.bytes().await }
                    })
                    .buffered(MANIFEST_RANGES_IN_FLIGHT);
                while let Some(chunk) = ranges.next().await {
                    let chunk =
                        chunk.map_err(|e| std::io::Error::other(self.manifest_error(&key, e)));
                    if tx.send(chunk).await.is_err() {
                        break;
                    }
                }
            }
        }
        drop(tx);
        let (header, sink) = parse.await.map_err(|e| Error::Task {
            reason: format!("the parser of {} failed: {e}", self.uri_of(&key)),
        })?;
        Ok(ManifestRead {
            key,
            header: header?,
            sink,
        })
    }

    /// The response of a GET of the dataset manifest (format 2 first, then format 1) with its
    /// key, `None` if there is none: its metadata (ETag, size) names the manifest's version
    /// before its body is read ([`Location::stream_manifest`] reads it).
    pub async fn manifest_get(
        &self,
    ) -> crate::Result<Option<(Path, bucketload_store::object_store::GetResult)>> {
        for path in bucketload_format::MANIFEST_PATHS {
            let key = Path::from(path);
            match self.store.get(&key).await {
                Ok(got) => return Ok(Some((key, got))),
                Err(bucketload_store::object_store::Error::NotFound { .. }) => continue,
                Err(e) => return Err(self.error(&key, e)),
            }
        }
        Ok(None)
    }

    /// The object store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The opened store, when this location wraps one ([`Location::from_store`]).
    pub fn handle(&self) -> Option<&bucketload_store::Store> {
        self.handle.as_ref()
    }

    /// The full URI of `key` as the store holds it (it may end in `/` or hold `//`).
    pub fn uri_of_key(&self, key: &str) -> String {
        match key {
            "" => format!("{}/", self.base),
            key => format!("{}/{key}", self.base),
        }
    }

    /// The full URI of `key`.
    pub fn uri_of(&self, key: &Path) -> String {
        match &self.handle {
            Some(store) => store.object_uri(key),
            None if key.as_ref().is_empty() => self.base.clone(),
            None => format!("{}/{}", self.base, key),
        }
    }

    /// `err`, an object not found, said as "bucket not found" when the bucket itself is
    /// missing: a HEAD or GET of a key cannot tell the two apart (S3 answers a bare 404), a
    /// LIST can. Costs one LIST, on the error path only.
    pub async fn explain_not_found(&self, err: Error) -> Error {
        if err.kind() != crate::ErrorKind::NotFound {
            return err;
        }
        let listed = self.store.list(None).next().await;
        match listed.map(|r| r.map_err(|e| self.error(&Path::default(), e))) {
            Some(Err(
                missing @ Error::Store(bucketload_store::Error::NotFound { what: "bucket", .. }),
            )) => missing,
            _ => err,
        }
    }

    /// Maps a failure of an operation on `key` to an error naming the object.
    pub fn error(&self, key: &Path, err: bucketload_store::object_store::Error) -> Error {
        match &self.handle {
            Some(store) => Error::Store(store.map_error(err, key)),
            None => {
                let uri = self.uri_of(key);
                Error::Store(bucketload_store::Error::from_object_store(
                    err,
                    &uri,
                    &self.endpoint,
                    &self.root,
                ))
            }
        }
    }
}
