//! Writing shards: fetch source objects with many GETs in flight, in plan order, under a byte
//! budget; stream each shard out as a multipart upload; PUT its index once the shard is
//! complete.
//!
//! Budget permits are taken in plan order before each GET starts and given back when the
//! object's bytes have been written, so the objects in memory never exceed the budget (one
//! larger object may take the whole budget alone) and the earliest object can always finish.
//! A shard's upload completes (and its index is PUT) on a background task while the next shard
//! fills; at most two shards finish at a time.

use std::sync::Arc;

use bucketload_format::{ShardEntry, ShardIndexBuilder, TarWriter};
use bucketload_store::object_store::{ObjectStoreExt, PutPayload, path::Path};
use bucketload_store::{MultipartWriter, Store, key_path};
use bytes::{Bytes, BytesMut};
use futures::{StreamExt, TryStreamExt};
use md5::{Digest, Md5};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use super::{Plan, PlannedSample, ShardOptions, SourceObject};
use crate::base::{DataKey, Location, Progress};
use crate::error::{Error, Result};
use crate::io::checked::{Change, Promise, compare};
use crate::shards::index_key;
use bucketload_cache::ObjectVersion;
use bucketload_store::ETag;

/// Bytes gathered before they are handed to the multipart writer.
const FLUSH_BYTES: usize = 1 << 20;
/// Shards whose upload may complete in the background while the next one fills.
const FINISHING: usize = 2;

/// A finished shard: its manifest entry and the planned samples it does not hold (positions in
/// the plan; an earlier `--skip-missing` run may have left some out).
#[derive(Debug, Clone)]
pub(super) struct Finished {
    pub entry: ShardEntry,
    pub left_out: Vec<usize>,
}

/// A shard written by this run.
#[derive(Debug)]
pub(super) struct Written {
    pub shard: usize,
    pub finished: Finished,
    pub objects: u64,
    pub object_bytes: u64,
    pub missing: Vec<String>,
    pub changed: Vec<String>,
}

/// One source object to fetch: where it goes.
#[derive(Debug, Clone)]
struct Slot {
    shard: usize,
    /// The sample's position in the plan.
    position: usize,
    sample: Arc<PlannedSample>,
    member: usize,
}

impl Slot {
    fn object(&self) -> &SourceObject {
        &self.sample.members[self.member]
    }
}

/// A fetched object (`None`: gone, and `--skip-missing` was given, or changed, and
/// `--skip-changed` was: then `changed` says how).
struct Fetched {
    slot: Slot,
    data: Option<Bytes>,
    changed: Option<String>,
    _permit: OwnedSemaphorePermit,
}

/// Writes the shards numbered `todo`, in order.
pub(super) async fn write_shards(
    src: &Store,
    dst: &Store,
    plan: &Plan,
    todo: &[usize],
    options: &ShardOptions,
    progress: &dyn Progress,
) -> Result<Vec<Written>> {
    // Samples are decoded from the plan as their GETs are started, not before.
    let slots = todo.iter().flat_map(|&shard| {
        plan.shards[shard].clone().flat_map(move |position| {
            let sample = Arc::new(plan.sample(position));
            (0..sample.members.len()).map(move |member| Slot {
                shard,
                position,
                sample: sample.clone(),
                member,
            })
        })
    });
    let budget_kib = options
        .buffer_bytes
        .div_ceil(1024)
        .min(u64::from(u32::MAX >> 3));
    let budget = Arc::new(Semaphore::new(budget_kib as usize));
    let source = Location::from_store(src);
    let fetched = futures::stream::iter(slots)
        .then(|slot| {
            let budget = budget.clone();
            async move {
                let size = slot.object().size;
                let kib = size.div_ceil(1024).clamp(1, budget_kib) as u32;
                let permit = budget.acquire_many_owned(kib).await;
                permit.map(|p| (slot, p)).map_err(|e| Error::Task {
                    reason: e.to_string(),
                })
            }
        })
        .map_ok(|(slot, permit)| {
            // A task per GET: bodies are collected on the runtime's workers while this task
            // writes tar; the guard cancels the GET if the run stops first.
            let object = slot.object().clone();
            let skip = (options.skip_missing, options.skip_changed);
            let task = tokio::spawn(fetch(source.clone(), object, slot, permit, skip));
            let guard = AbortOnDrop(task.abort_handle());
            async move {
                let fetched = task.await.map_err(|e| Error::Task {
                    reason: format!("fetching a source object: {e}"),
                });
                drop(guard);
                fetched?
            }
        })
        .try_buffered(options.gets_in_flight);
    let fetched = std::pin::pin!(fetched);
    let mut sink = Sink::new(dst, plan, options, source.clone());
    let result = sink.consume(fetched, progress).await;
    let finished = sink.drain().await;
    result?;
    finished
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn fetch(
    source: Location,
    object: SourceObject,
    slot: Slot,
    permit: OwnedSemaphorePermit,
    (skip_missing, skip_changed): (bool, bool),
) -> Result<Fetched> {
    // A key object_store cannot spell (`a//b`, from a files manifest) is read as written.
    let key = DataKey::new(&object.key);
    let got = match source.address(&key) {
        Ok((store, location)) => match store.get(&location).await {
            Ok(get) => {
                let etag = ETag::from_store(get.meta.e_tag.as_deref());
                let version = ObjectVersion::with_etag(etag, get.meta.size);
                get.bytes().await.map(|b| (b, version))
            }
            Err(e) => Err(e),
        },
        Err(e) => return Err(e),
    };
    let data = match got {
        Ok((bytes, version)) => Some(checked(&source, &object, &version, bytes).await?),
        Err(bucketload_store::object_store::Error::NotFound { .. }) if skip_missing => None,
        Err(bucketload_store::object_store::Error::NotFound { .. }) => {
            return Err(Error::Store(bucketload_store::Error::NotFound {
                uri: source.uri_of_data_key(&key),
                what: "object",
                hint: "it was listed but is gone (deleted while sharding?); restore it and run \
                       again to resume, or pass --skip-missing to leave such objects out (they \
                       are counted and reported)"
                    .into(),
            }));
        }
        Err(e) => return Err(source.error_of_key(&key, e)),
    };
    let (data, changed) = match data {
        Some(Err(change)) if skip_changed => (None, Some(change.to_string())),
        Some(Err(change)) => return Err(changed_error(&source, &key, &change)),
        Some(Ok(bytes)) => (Some(bytes), None),
        None => (None, None),
    };
    Ok(Fetched {
        slot,
        data,
        changed,
        _permit: permit,
    })
}

/// `bytes`, returned as `version`, or how they differ from what the source's manifest or
/// listing says of `object`: a changed object is never packaged.
async fn checked(
    source: &Location,
    object: &SourceObject,
    version: &ObjectVersion,
    bytes: Bytes,
) -> Result<std::result::Result<Bytes, Change>> {
    if bytes.len() as u64 != version.size {
        return Err(Error::Corrupt {
            uri: source.uri_of_data_key(&DataKey::new(&object.key)),
            reason: format!(
                "the store said {} bytes and sent {}; run again",
                version.size,
                bytes.len()
            ),
        });
    }
    let promise = Promise {
        size: object.size,
        etag: object.etag.clone(),
        etag_fingerprint: None,
        crc32c: object.crc32c,
    };
    Ok(match compare(&promise, version, &bytes).await {
        None => Ok(bytes),
        Some(change) => Err(change),
    })
}

fn changed_error(source: &Location, key: &DataKey, change: &Change) -> Error {
    Error::Corrupt {
        uri: source.uri_of_data_key(key),
        reason: format!(
            "{change}: the object changed since the source's manifest or listing was read, and \
             is not packaged; rebuild the manifest (`bucketload manifest`) or restore the \
             object, or pass --skip-changed to leave such objects out (they are counted and \
             reported)"
        ),
    }
}

/// The shard being filled.
struct Open {
    shard: usize,
    name: String,
    tar: TarWriter,
    index: ShardIndexBuilder,
    out: Out,
    /// Sample being written and whether any of its members was written.
    sample: Option<(Slot, bool)>,
    samples: u64,
    left_out: Vec<usize>,
    objects: u64,
    object_bytes: u64,
    missing: Vec<String>,
    changed: Vec<String>,
}

/// Turns fetched objects into shards.
struct Sink<'a> {
    dst: &'a Store,
    source: Location,
    plan: &'a Plan,
    options: &'a ShardOptions,
    open: Option<Open>,
    finishing: JoinSet<Result<Written>>,
    done: Vec<Written>,
}

impl<'a> Sink<'a> {
    fn new(
        dst: &'a Store,
        plan: &'a Plan,
        options: &'a ShardOptions,
        source: Location,
    ) -> Sink<'a> {
        Sink {
            dst,
            source,
            plan,
            options,
            open: None,
            finishing: JoinSet::new(),
            done: Vec::new(),
        }
    }

    async fn consume(
        &mut self,
        mut fetched: impl futures::Stream<Item = Result<Fetched>> + Unpin,
        progress: &dyn Progress,
    ) -> Result<()> {
        while let Some(item) = fetched.next().await {
            let item = item?;
            if self
                .open
                .as_ref()
                .is_none_or(|o| o.shard != item.slot.shard)
            {
                self.close_shard().await?;
                self.open = Some(self.start(item.slot.shard));
            }
            let size = item.data.as_ref().map_or(0, |d| d.len() as u64);
            self.add(item.slot, item.data, item.changed).await?;
            progress.advance(1, size);
        }
        self.close_shard().await
    }

    fn start(&self, shard: usize) -> Open {
        let name = self.plan.shard_name(shard);
        let path = Path::from(name.as_str());
        Open {
            shard,
            tar: TarWriter::new(self.dst.object_uri(&path)).with_md5(false),
            index: ShardIndexBuilder::new(),
            out: Out {
                upload: self.dst.writer(&path, self.options.parts_per_shard),
                md5: self.options.md5.then(Md5Thread::start),
                buf: BytesMut::with_capacity(FLUSH_BYTES * 2),
            },
            name,
            sample: None,
            samples: 0,
            left_out: Vec::new(),
            objects: 0,
            object_bytes: 0,
            missing: Vec::new(),
            changed: Vec::new(),
        }
    }

    /// Appends one member (or notes it missing or `changed`), closing the previous sample
    /// first.
    async fn add(
        &mut self,
        slot: Slot,
        data: Option<Bytes>,
        changed: Option<String>,
    ) -> Result<()> {
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        if open
            .sample
            .as_ref()
            .is_some_and(|(s, _)| s.position != slot.position)
        {
            close_sample(open)?;
        }
        let written = open.sample.as_ref().is_some_and(|(_, w)| *w);
        let object = slot.object().clone();
        let Some(data) = data else {
            let uri = self.source.uri_of(&key_path(&object.key));
            match changed {
                Some(change) => {
                    tracing::warn!(%uri, %change, "changed since listed; left out");
                    open.changed.push(format!("{uri}: {change}"));
                }
                None => {
                    tracing::warn!(object = %object.key, "gone since listed; left out");
                    open.missing.push(uri);
                }
            }
            open.sample = Some((slot, written));
            return Ok(());
        };
        let location = open.tar.append(&mut open.out.buf, &object.key, &data)?;
        open.index.add(&object.key, location, &data);
        open.objects += 1;
        open.object_bytes += data.len() as u64;
        open.sample = Some((slot, true));
        if open.out.buf.len() >= FLUSH_BYTES {
            open.out.flush().await?;
        }
        Ok(())
    }

    /// Completes the open shard on a background task (at most [`FINISHING`] at a time).
    async fn close_shard(&mut self) -> Result<()> {
        let Some(mut open) = self.open.take() else {
            return Ok(());
        };
        close_sample(&mut open)?;
        while self.finishing.len() >= FINISHING {
            self.join_one().await?;
        }
        let dst = self.dst.clone();
        self.finishing.spawn(finish(dst, open));
        Ok(())
    }

    async fn join_one(&mut self) -> Result<()> {
        match self.finishing.join_next().await {
            Some(Ok(written)) => {
                self.done.push(written?);
                Ok(())
            }
            Some(Err(e)) => Err(Error::Task {
                reason: format!("finishing a shard: {e}"),
            }),
            None => Ok(()),
        }
    }

    /// Waits for every shard still finishing (also after a failure: those shards are good).
    async fn drain(mut self) -> Result<Vec<Written>> {
        let mut first_error = None;
        while !self.finishing.is_empty() {
            if let Err(e) = self.join_one().await {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(self.done),
        }
    }
}

/// Ends the sample being written: its label member, if it has one and any member was written
/// (a sample none of whose members was written is left out).
fn close_sample(open: &mut Open) -> Result<()> {
    let Some((slot, written)) = open.sample.take() else {
        return Ok(());
    };
    if !written {
        open.left_out.push(slot.position);
        return Ok(());
    }
    let sample = &slot.sample;
    if let Some(label) = sample.label_bytes() {
        let name = sample.label_name();
        let location = open.tar.append(&mut open.out.buf, &name, &label)?;
        open.index.add(&name, location, &label);
    }
    open.samples += 1;
    Ok(())
}

/// Where a shard's bytes go: gathered in `buf`, then uploaded (and hashed with `--md5`).
struct Out {
    upload: MultipartWriter,
    md5: Option<Md5Thread>,
    buf: BytesMut,
}

impl Out {
    /// Hands the bytes gathered so far to the upload and the MD5 thread.
    async fn flush(&mut self) -> Result<()> {
        let chunk = self.buf.split().freeze();
        if let Some(md5) = self.md5.as_mut() {
            md5.update(chunk.clone()).await?;
        }
        self.upload.write(chunk).await?;
        Ok(())
    }
}

/// Hashes a shard's bytes with MD5 on a blocking thread, so the hash (the slowest step per
/// byte, about 600 MB/s) runs beside the tar writing instead of after it.
struct Md5Thread {
    tx: Option<tokio::sync::mpsc::Sender<Bytes>>,
    done: tokio::task::JoinHandle<[u8; 16]>,
}

impl Md5Thread {
    fn start() -> Md5Thread {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(16);
        let done = tokio::task::spawn_blocking(move || {
            let mut md5 = Md5::new();
            while let Some(chunk) = rx.blocking_recv() {
                md5.update(&chunk);
            }
            md5.finalize().into()
        });
        Md5Thread { tx: Some(tx), done }
    }

    async fn update(&mut self, chunk: Bytes) -> Result<()> {
        let sent = match &self.tx {
            Some(tx) => tx.send(chunk).await.is_ok(),
            None => false,
        };
        sent.then_some(()).ok_or_else(|| Error::Task {
            reason: "the MD5 thread stopped".to_owned(),
        })
    }

    async fn finish(mut self) -> Result<[u8; 16]> {
        self.tx = None;
        self.done.await.map_err(|e| Error::Task {
            reason: format!("hashing a shard: {e}"),
        })
    }
}

/// Writes the end of the tar, completes the upload, then PUTs the index.
async fn finish(dst: Store, open: Open) -> Result<Written> {
    let mut out = open.out;
    let mut summary = open.tar.finish(&mut out.buf)?;
    out.flush().await?;
    if let Some(md5) = out.md5 {
        summary.md5 = md5.finish().await?;
    }
    out.upload.finish().await?;
    let shard_path = Path::from(open.name.as_str());
    let index_path = index_key(&shard_path);
    let index_uri = dst.object_uri(&index_path);
    let index = open.index.finish(&summary);
    let bytes = index.to_bytes(&index_uri)?;
    dst.object_store()
        .put(&index_path, PutPayload::from(bytes))
        .await
        .map_err(|e| Location::from_store(&dst).error(&index_path, e))?;
    tracing::info!(shard = %dst.object_uri(&shard_path), samples = open.samples, "shard written");
    let entry = ShardEntry::from_summary(open.name, index_path.to_string(), open.samples, &summary);
    Ok(Written {
        shard: open.shard,
        finished: Finished {
            entry,
            left_out: open.left_out,
        },
        objects: open.objects,
        object_bytes: open.object_bytes,
        missing: open.missing,
        changed: open.changed,
    })
}
