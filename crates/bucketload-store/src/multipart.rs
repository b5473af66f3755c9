//! [`MultipartWriter`]: a byte stream written as a multipart upload.
//!
//! Writes are buffered (without copying: the buffer holds `Bytes` handles)
//! until one part is full; the part is then uploaded on a Tokio task. At most
//! `concurrency` parts are in flight: `write` waits for one to finish before
//! starting another, so memory stays under `(concurrency + 1) × part_size`.
//! An object smaller than one part is sent as a single PUT by `finish`.
//! Any failure aborts the upload; dropping an unfinished writer aborts it in
//! the background, so a failed or interrupted write never leaves an object.
//!
//! A completion can take effect while its answer is lost (a reset connection):
//! the retry then finds no upload (404 NoSuchUpload). To tell that case from a
//! real failure, each multipart upload carries a random token in its user
//! metadata (`x-amz-meta-bucketloadupload` on S3; one word, because Azure allows only
//! identifiers as metadata names); after a failed completion
//! the writer reads the key's metadata and reports success exactly when the
//! object there carries its token and has the size written. When that check
//! itself cannot be made, the error says the outcome is unknown
//! ([`Error::Unconfirmed`]) rather than that nothing was written. Stores that
//! keep no user metadata (local folders, which never lose an answer) get none.

use crate::Error;
use crate::config::DEFAULT_PART_SIZE;
use crate::error::ErrorContext;
use crate::http::CREATE_ATTEMPTS;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{
    Attribute, AttributeValue, Attributes, GetOptions, MultipartUpload, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutPayloadMut, PutResult,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};
use tokio::task::JoinHandle;
use tokio::task::JoinSet;

/// Default parts in flight per writer: 8 × 8 MiB saturates ~1 GB/s at
/// typical S3 part latencies with a 72 MiB memory ceiling.
pub const DEFAULT_PARALLEL_PARTS: usize = 8;

/// The user-metadata key of the token that marks an object as completed by one writer.
pub const UPLOAD_TOKEN_KEY: &str = "bucketloadupload";

/// How a [`MultipartWriter`] splits and uploads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultipartOptions {
    /// Bytes per part (S3 requires ≥ 5 MiB except the last). Default: 8 MiB.
    pub part_size: u64,
    /// Parts uploaded at once. Default: 8.
    pub concurrency: usize,
}

impl Default for MultipartOptions {
    fn default() -> Self {
        MultipartOptions {
            part_size: DEFAULT_PART_SIZE,
            concurrency: DEFAULT_PARALLEL_PARTS,
        }
    }
}

/// Writes one object from a sequence of `Bytes`; see the module docs.
#[derive(Debug)]
pub struct MultipartWriter {
    store: Arc<dyn ObjectStore>,
    key: Path,
    ctx: ErrorContext,
    part_size: usize,
    concurrency: usize,
    buffer: PutPayloadMut,
    upload: Option<Box<dyn MultipartUpload>>,
    /// The CreateMultipartUpload in flight: a task of its own, so a writer dropped while it
    /// runs (an interrupted command) can still abort the upload once the store has made it.
    creating: Option<JoinHandle<Created>>,
    /// When a retried creation ran (see [`MultipartWriter::with_store`]).
    lost_creates: Option<(SystemTime, SystemTime)>,
    /// The store, to list and abort uploads a retried creation left.
    handle: Option<crate::Store>,
    parts: JoinSet<object_store::Result<()>>,
    done: bool,
    /// Bytes accepted by `write`.
    written: u64,
    /// The token in the upload's metadata; `None` when the store keeps no metadata.
    token: Option<String>,
}

impl MultipartWriter {
    /// A writer of `key` in `store`. Nothing is sent until a part fills.
    pub fn new(store: Arc<dyn ObjectStore>, key: Path, opts: MultipartOptions) -> Self {
        let ctx = ErrorContext::key(key.as_ref());
        MultipartWriter {
            store,
            key,
            ctx,
            part_size: usize::try_from(opts.part_size.max(1)).unwrap_or(usize::MAX),
            concurrency: opts.concurrency.max(1),
            buffer: PutPayloadMut::new(),
            upload: None,
            creating: None,
            lost_creates: None,
            handle: None,
            parts: JoinSet::new(),
            done: false,
            written: 0,
            token: Some(format!("{:032x}", rand::random::<u128>())),
        }
    }

    /// Lets the writer list and abort uploads through `store` (whose object store it writes
    /// to): after a creation that was retried it aborts the uploads the lost answers left.
    pub fn with_store(mut self, store: &crate::Store) -> Self {
        self.handle = Some(store.clone());
        self
    }

    /// Sets the URI used in error messages (default: the key).
    pub fn with_uri(mut self, uri: impl Into<String>) -> Self {
        self.ctx.uri = uri.into();
        self
    }

    pub(crate) fn with_context(mut self, ctx: ErrorContext) -> Self {
        self.ctx = ctx;
        self
    }

    /// Appends `data`, uploading every part it completes.
    pub async fn write(&mut self, mut data: Bytes) -> Result<(), Error> {
        self.written += data.len() as u64;
        while !data.is_empty() {
            let room = self.part_size - self.buffer.content_length();
            let chunk = data.split_to(room.min(data.len()));
            self.buffer.push(chunk);
            if self.buffer.content_length() == self.part_size
                && let Err(e) = self.send_part().await
            {
                return Err(self.fail(e).await);
            }
        }
        Ok(())
    }

    /// Uploads what is left and completes the object.
    pub async fn finish(mut self) -> Result<PutResult, Error> {
        // `done` stays false until the completion answers: a writer dropped while its last
        // parts or the completion are in flight (an interrupted command) aborts the upload.
        let Some(_) = &self.upload else {
            self.done = true;
            let payload = std::mem::take(&mut self.buffer).freeze();
            return self
                .store
                .put(&self.key, payload)
                .await
                .map_err(|e| self.map(e));
        };
        if let Err(e) = self.send_parts().await {
            return Err(self.fail(e).await);
        }
        let completed = match self.upload.as_mut() {
            Some(upload) => upload.complete().await,
            None => unreachable_upload(),
        };
        match completed {
            Ok(r) => {
                self.done = true;
                self.sweep_lost_creates().await;
                Ok(r)
            }
            Err(e) => self.confirm(e).await,
        }
    }

    /// Abandons the object: cancels parts in flight and aborts the upload.
    pub async fn abort(mut self) -> Result<(), Error> {
        self.done = true;
        self.parts.abort_all();
        match self.upload.take() {
            Some(mut upload) => upload.abort().await.map_err(|e| self.map(e)),
            None => Ok(()),
        }
    }

    /// Uploads the last part and waits for every part in flight.
    async fn send_parts(&mut self) -> object_store::Result<()> {
        if self.buffer.content_length() > 0 {
            self.send_part().await?;
        }
        while !self.parts.is_empty() {
            self.join_one().await?;
        }
        Ok(())
    }

    /// After a failed completion: the object is ours when it carries this writer's token and
    /// the size written (the completion took effect and only its answer was lost).
    async fn confirm(&mut self, err: object_store::Error) -> Result<PutResult, Error> {
        let Some(token) = self.token.clone() else {
            return Err(self.fail(err).await);
        };
        let head = GetOptions {
            head: true,
            ..GetOptions::default()
        };
        match self.store.get_opts(&self.key, head).await {
            Ok(found) if carries(&found.attributes, &token) && found.meta.size == self.written => {
                tracing::info!(uri = %self.ctx.uri, error = %err,
                    "the upload's completion was answered with an error but took effect");
                self.done = true;
                self.upload = None;
                Ok(PutResult {
                    e_tag: found.meta.e_tag,
                    version: found.meta.version,
                    extensions: Default::default(),
                })
            }
            Ok(_) | Err(object_store::Error::NotFound { .. }) => Err(self.fail(err).await),
            Err(check) => {
                let failed = self.fail(err).await;
                Err(Error::Unconfirmed {
                    uri: self.ctx.uri.clone(),
                    failure: Box::new(failed),
                    check: Box::new(self.map(check)),
                })
            }
        }
    }

    /// Starts the upload if needed, waits for room, and spawns the part.
    async fn send_part(&mut self) -> object_store::Result<()> {
        if self.upload.is_none() {
            let (store, key, token) = (
                Arc::clone(&self.store),
                self.key.clone(),
                self.token.clone(),
            );
            let creating = self
                .creating
                .get_or_insert_with(|| tokio::spawn(create(store, key, token)));
            let joined = creating.await;
            self.creating = None;
            let created = joined.map_err(|join| object_store::Error::Generic {
                store: "bucketload",
                source: Box::new(join),
            })?;
            self.token = created.token;
            self.lost_creates = created.retried;
            self.upload = Some(created.upload?);
        }
        while self.parts.len() >= self.concurrency {
            self.join_one().await?;
        }
        let payload = std::mem::take(&mut self.buffer).freeze();
        if let Some(upload) = self.upload.as_mut() {
            self.parts.spawn(upload.put_part(payload));
        }
        Ok(())
    }

    async fn join_one(&mut self) -> object_store::Result<()> {
        match self.parts.join_next().await {
            Some(Ok(result)) => result,
            Some(Err(join)) => Err(object_store::Error::Generic {
                store: "bucketload",
                source: Box::new(join),
            }),
            None => Ok(()),
        }
    }

    /// Aborts after a failure and returns the mapped error.
    async fn fail(&mut self, err: object_store::Error) -> Error {
        self.done = true;
        self.parts.abort_all();
        if let Some(mut upload) = self.upload.take()
            && let Err(abort) = upload.abort().await
        {
            tracing::warn!(uri = %self.ctx.uri, error = %abort, "multipart abort failed");
        }
        self.sweep_lost_creates().await;
        self.map(err)
    }

    /// After a creation that was retried, and once this writer's own upload is completed or
    /// aborted: aborts the other uploads of this key the store made while the creation ran
    /// (an attempt whose answer was lost made one that nobody would ever finish). Needs the
    /// [`Store`](crate::Store) (see [`MultipartWriter::with_store`]); best effort, with a
    /// warning when the store cannot list or abort uploads.
    async fn sweep_lost_creates(&mut self) {
        let (Some(store), Some((from, to))) = (self.handle.clone(), self.lost_creates.take())
        else {
            return;
        };
        // Slack for the store's clock and for the time between sending and recording.
        let slack = Duration::from_secs(2);
        let window = (from - slack)..=(to + slack);
        let key = self.key.as_ref();
        let uploads = match store.list_uploads(key).await {
            Ok(uploads) => uploads,
            Err(e) => {
                tracing::warn!(uri = %self.ctx.uri, error = %e,
                    "cannot look for uploads a retried creation may have left");
                return;
            }
        };
        let lost = uploads.into_iter().filter(|u| {
            u.key == key
                && u.initiated
                    .is_some_and(|t| window.contains(&SystemTime::from(t)))
        });
        for upload in lost {
            match store.abort_upload(&upload.key, &upload.upload_id).await {
                Ok(()) => tracing::info!(uri = %self.ctx.uri,
                    "aborted an upload made by a creation attempt whose answer was lost"),
                Err(e) => tracing::warn!(uri = %self.ctx.uri, error = %e,
                    "cannot abort an upload a retried creation left"),
            }
        }
    }

    fn map(&self, err: object_store::Error) -> Error {
        self.ctx.map(err)
    }
}

/// Whether `attributes` hold `token` under [`UPLOAD_TOKEN_KEY`].
fn carries(attributes: &Attributes, token: &str) -> bool {
    attributes
        .get(&Attribute::Metadata(UPLOAD_TOKEN_KEY.into()))
        .is_some_and(|v| v.as_ref() == token)
}

/// A created upload (or why not).
#[derive(Debug)]
struct Created {
    upload: object_store::Result<Box<dyn MultipartUpload>>,
    /// The token it carries; `None` when the store keeps no metadata.
    token: Option<String>,
    /// When the creation was retried: from when to when it ran (an earlier attempt may have
    /// made an upload whose answer was lost).
    retried: Option<(SystemTime, SystemTime)>,
}

/// Creates the upload of `key`, with `token` in its metadata when the store keeps metadata.
async fn create(store: Arc<dyn ObjectStore>, key: Path, token: Option<String>) -> Created {
    let attempts = Arc::new(AtomicU64::new(0));
    let started = SystemTime::now();
    let (upload, token) = CREATE_ATTEMPTS
        .scope(Arc::clone(&attempts), create_once(store, key, token))
        .await;
    let retried = (attempts.load(Ordering::Relaxed) > 1).then(|| (started, SystemTime::now()));
    Created {
        upload,
        token,
        retried,
    }
}

async fn create_once(
    store: Arc<dyn ObjectStore>,
    key: Path,
    token: Option<String>,
) -> (
    object_store::Result<Box<dyn MultipartUpload>>,
    Option<String>,
) {
    if let Some(token) = token {
        let attributes = Attributes::from_iter([(
            Attribute::Metadata(UPLOAD_TOKEN_KEY.into()),
            AttributeValue::from(token.clone()),
        )]);
        let opts = PutMultipartOptions {
            attributes,
            ..PutMultipartOptions::default()
        };
        match store.put_multipart_opts(&key, opts).await {
            Err(object_store::Error::NotImplemented { .. }) => {}
            created => return (created, Some(token)),
        }
    }
    (store.put_multipart(&key).await, None)
}

/// Aborts of dropped writers still running, so a process can wait for them before it exits.
fn pending_aborts() -> std::sync::MutexGuard<'static, Vec<tokio::task::JoinHandle<()>>> {
    static PENDING: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>> =
        std::sync::Mutex::new(Vec::new());
    let mut pending = PENDING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    pending.retain(|task| !task.is_finished());
    pending
}

/// Waits, at most `timeout`, for the aborts of multipart uploads whose writers were dropped
/// unfinished (an interrupted command drops them); returns how many did not finish in time.
/// A process about to exit calls this so its unfinished uploads do not stay stored (and
/// billed) on the store.
pub async fn settle_aborts(timeout: std::time::Duration) -> usize {
    let tasks: Vec<_> = pending_aborts().drain(..).collect();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut unfinished = 0;
    // The tasks run concurrently already; waiting for them in turn costs nothing.
    for task in tasks {
        if tokio::time::timeout_at(deadline, task).await.is_err() {
            unfinished += 1;
        }
    }
    unfinished
}

/// `complete` only runs once `send_part` created the upload.
fn unreachable_upload() -> object_store::Result<PutResult> {
    Err(object_store::Error::Generic {
        store: "bucketload",
        source: "multipart upload completed before it was started".into(),
    })
}

impl Drop for MultipartWriter {
    fn drop(&mut self) {
        self.parts.abort_all();
        if let Some(creating) = self.creating.take() {
            // Dropped while the store was creating the upload: abort it once it exists.
            let uri = self.ctx.uri.clone();
            let task = async move {
                if let Ok(Created {
                    upload: Ok(mut upload),
                    ..
                }) = creating.await
                {
                    tracing::debug!(%uri, "aborting a multipart upload created after its writer was dropped");
                    if let Err(e) = upload.abort().await {
                        tracing::warn!(%uri, error = %e, "multipart abort failed");
                    }
                }
            };
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                pending_aborts().push(handle.spawn(task));
            }
        }
        let Some(mut upload) = self.upload.take() else {
            return;
        };
        if self.done {
            return;
        }
        let uri = self.ctx.uri.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                tracing::debug!(%uri, "aborting unfinished multipart upload");
                let task = handle.spawn(async move {
                    if let Err(e) = upload.abort().await {
                        tracing::warn!(%uri, error = %e, "multipart abort failed");
                    }
                });
                pending_aborts().push(task);
            }
            Err(_) => {
                tracing::warn!(%uri, "unfinished multipart upload dropped outside a Tokio runtime; not aborted");
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn opts(part: u64) -> MultipartOptions {
        MultipartOptions {
            part_size: part,
            concurrency: 2,
        }
    }

    #[tokio::test]
    async fn splits_writes_across_parts() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let key = Path::from("big");
        let mut w = MultipartWriter::new(Arc::clone(&store), key.clone(), opts(10));
        let data: Vec<u8> = (0..95u8).collect();
        for chunk in data.chunks(7) {
            w.write(Bytes::copy_from_slice(chunk)).await.unwrap();
        }
        w.finish().await.unwrap();
        let got = store.get(&key).await.unwrap().bytes().await.unwrap();
        assert_eq!(got, data);
    }

    #[tokio::test]
    async fn small_and_empty_objects_are_single_puts() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let mut w = MultipartWriter::new(Arc::clone(&store), Path::from("s"), opts(10));
        w.write(Bytes::from_static(b"abc")).await.unwrap();
        w.finish().await.unwrap();
        let w = MultipartWriter::new(Arc::clone(&store), Path::from("e"), opts(10));
        w.finish().await.unwrap();
        let e = store
            .get(&Path::from("e"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert!(e.is_empty());
    }

    #[tokio::test]
    async fn dropped_writer_leaves_no_object() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let key = Path::from("dropped");
        let mut w = MultipartWriter::new(Arc::clone(&store), key.clone(), opts(4));
        w.write(Bytes::from_static(b"0123456789")).await.unwrap();
        drop(w);
        tokio::task::yield_now().await;
        assert!(store.head(&key).await.is_err());
    }
}
