//! [`MeteredStore`]: an `ObjectStore` wrapper that counts requests, bytes,
//! errors, latency and retries into [`Metrics`].
//!
//! Each call is one logical request. Its future (and, for GETs and LISTs,
//! each poll of its stream) runs inside a task-local [`Attempts`] scope so
//! the HTTP layer ([`crate::http`]) can attribute retries to it. A GET's
//! first-byte latency ends when `get_opts` returns; its total latency when
//! the body stream ends. Every HTTP request made while reading a GET body is
//! object_store resuming an interrupted body, so it counts as a retry.

use crate::error::classify;
use crate::http::{ATTEMPTS, Attempts};
use crate::metrics::{Metrics, RequestKind};
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, Stream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
    RenameOptions, Result, UploadPart,
};
use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

/// Wraps `S`, counting everything into a shared [`Metrics`].
#[derive(Debug)]
pub struct MeteredStore<S: ObjectStore> {
    inner: Arc<S>,
    metrics: Metrics,
}

impl<S: ObjectStore> MeteredStore<S> {
    /// Wraps `inner`; counts go to `metrics`.
    pub fn new(inner: S, metrics: Metrics) -> Self {
        MeteredStore {
            inner: Arc::new(inner),
            metrics,
        }
    }

    /// The counters of this store.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

impl<S: ObjectStore> fmt::Display for MeteredStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Metered({})", self.inner)
    }
}

/// Runs one logical request: counts it, scopes its attempts, times it and
/// classifies its error.
async fn metered<T>(
    metrics: &Metrics,
    kind: RequestKind,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    let attempts = Arc::new(Attempts::default());
    let start = Instant::now();
    let result = ATTEMPTS.scope(Arc::clone(&attempts), fut).await;
    // A call the backend does not implement (user metadata on a local folder) sent nothing.
    if let Err(object_store::Error::NotImplemented { .. }) = &result {
        return result;
    }
    metrics.request(kind, 1);
    metrics.retries(attempts.repeats());
    metrics.total(start.elapsed());
    if let Err(e) = &result {
        metrics.error(classify(e));
    }
    result
}

/// Runs one logical request that bucketload sends itself (not through object_store), as
/// [`metered`] does.
pub(crate) async fn metered_raw<T>(
    metrics: &Metrics,
    kind: RequestKind,
    fut: impl Future<Output = std::result::Result<T, crate::Error>>,
) -> std::result::Result<T, crate::Error> {
    use crate::error::ErrorClass;
    let attempts = Arc::new(Attempts::default());
    let start = Instant::now();
    let result = ATTEMPTS.scope(Arc::clone(&attempts), fut).await;
    metrics.request(kind, 1);
    metrics.retries(attempts.repeats());
    metrics.total(start.elapsed());
    if let Err(e) = &result {
        metrics.error(match e {
            crate::Error::NotFound { .. } => ErrorClass::NotFound,
            crate::Error::PermissionDenied { .. } => ErrorClass::Permission,
            crate::Error::Throttled { .. } => ErrorClass::Throttled,
            crate::Error::Unreachable { .. } => ErrorClass::Network,
            _ => ErrorClass::Other,
        });
    }
    result
}

fn get_kind(options: &GetOptions) -> RequestKind {
    match (options.head, &options.range) {
        (true, _) => RequestKind::Head,
        (false, Some(_)) => RequestKind::RangedGet,
        (false, None) => RequestKind::Get,
    }
}

#[async_trait]
impl<S: ObjectStore> ObjectStore for MeteredStore<S> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let len = payload.content_length() as u64;
        let fut = self.inner.put_opts(location, payload, opts);
        let result = metered(&self.metrics, RequestKind::Put, fut).await;
        if result.is_ok() {
            self.metrics.bytes_out(len);
        }
        result
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let fut = self.inner.put_multipart_opts(location, opts);
        let upload = metered(&self.metrics, RequestKind::MultipartCreate, fut).await?;
        Ok(Box::new(MeteredUpload {
            inner: upload,
            metrics: self.metrics.clone(),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let kind = get_kind(&options);
        self.metrics.request(kind, 1);
        let attempts = Arc::new(Attempts::default());
        let start = Instant::now();
        let fut = self.inner.get_opts(location, options);
        let result = ATTEMPTS.scope(Arc::clone(&attempts), fut).await;
        self.metrics.retries(attempts.repeats());
        let r = match result {
            Ok(r) => r,
            Err(e) => {
                self.metrics.error(classify(&e));
                self.metrics.total(start.elapsed());
                return Err(e);
            }
        };
        if kind == RequestKind::Head {
            self.metrics.total(start.elapsed());
            return Ok(r);
        }
        self.metrics.first_byte(start.elapsed());
        Ok(self.meter_body(r, location, start))
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        object_store::coalesce_ranges(
            ranges,
            |range| self.get_range(location, range),
            object_store::OBJECT_STORE_COALESCE_DEFAULT,
        )
        .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let metrics = self.metrics.clone();
        let stream = self.inner.delete_stream(locations);
        MeteredStream::new(
            stream,
            self.metrics.clone(),
            Phase::Paged {
                start: Instant::now(),
            },
            move |item: &Result<Path>| {
                if item.is_ok() {
                    metrics.request(RequestKind::Delete, 1);
                }
            },
        )
        .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.metrics.request(RequestKind::List, 1);
        let stream = self.inner.list(prefix);
        MeteredStream::new(
            stream,
            self.metrics.clone(),
            Phase::Paged {
                start: Instant::now(),
            },
            |_: &Result<ObjectMeta>| {},
        )
        .boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.metrics.request(RequestKind::List, 1);
        let stream = self.inner.list_with_offset(prefix, offset);
        MeteredStream::new(
            stream,
            self.metrics.clone(),
            Phase::Paged {
                start: Instant::now(),
            },
            |_: &Result<ObjectMeta>| {},
        )
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let fut = self.inner.list_with_delimiter(prefix);
        metered(&self.metrics, RequestKind::List, fut).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let fut = self.inner.copy_opts(from, to, options);
        metered(&self.metrics, RequestKind::Copy, fut).await
    }

    /// Counted as one COPY and one DELETE, which is what S3 does.
    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.metrics.request(RequestKind::Delete, 1);
        let fut = self.inner.rename_opts(from, to, options);
        metered(&self.metrics, RequestKind::Copy, fut).await
    }
}

impl<S: ObjectStore> MeteredStore<S> {
    /// Replaces the body of `r` with a stream that counts bytes, body-phase
    /// retries and total latency.
    /// A body that fails is checked against the version it was reading
    /// ([`crate::resume`]).
    fn meter_body(&self, r: GetResult, location: &Path, start: Instant) -> GetResult {
        let meta = r.meta.clone();
        let range = r.range.clone();
        let attributes = r.attributes.clone();
        let extensions = r.extensions.clone();
        let metrics = self.metrics.clone();
        let etag = meta.e_tag.clone();
        let body = crate::resume::explain_cut(
            r.into_stream(),
            Arc::clone(&self.inner),
            location.clone(),
            etag,
        );
        let body = MeteredStream::new(
            body,
            self.metrics.clone(),
            Phase::Body { start },
            move |item: &Result<Bytes>| {
                if let Ok(b) = item {
                    metrics.bytes_in(b.len() as u64);
                }
            },
        );
        GetResult {
            payload: GetResultPayload::Stream(body.boxed()),
            meta,
            range,
            attributes,
            extensions,
        }
    }
}

/// How a metered stream turns attempts into retries.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// LIST pages or DELETE batches: repeats of a request are retries;
    /// records total latency from `start` when the stream ends.
    Paged { start: Instant },
    /// A GET body: every attempt is a resume, i.e. a retry; records total
    /// latency from `start` when the body ends.
    Body { start: Instant },
}

/// A stream polled inside an [`Attempts`] scope, settling its metrics when it
/// ends, fails or is dropped.
struct MeteredStream<T, F> {
    inner: BoxStream<'static, Result<T>>,
    attempts: Arc<Attempts>,
    metrics: Metrics,
    phase: Phase,
    on_item: F,
    done: bool,
}

impl<T, F> MeteredStream<T, F> {
    fn new(
        inner: BoxStream<'static, Result<T>>,
        metrics: Metrics,
        phase: Phase,
        on_item: F,
    ) -> Self {
        MeteredStream {
            inner,
            attempts: Arc::new(Attempts::default()),
            metrics,
            phase,
            on_item,
            done: false,
        }
    }

    fn settle(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        match self.phase {
            Phase::Paged { start } => {
                self.metrics.retries(self.attempts.repeats());
                self.metrics.total(start.elapsed());
            }
            Phase::Body { start } => {
                self.metrics.retries(self.attempts.total());
                self.metrics.total(start.elapsed());
            }
        }
    }
}

impl<T, F> Stream for MeteredStream<T, F>
where
    F: FnMut(&Result<T>) + Unpin,
{
    type Item = Result<T>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let attempts = Arc::clone(&this.attempts);
        let polled = ATTEMPTS.sync_scope(attempts, || this.inner.poll_next_unpin(cx));
        match &polled {
            Poll::Ready(Some(item)) => {
                (this.on_item)(item);
                if let Err(e) = item {
                    this.metrics.error(classify(e));
                }
            }
            Poll::Ready(None) => this.settle(),
            Poll::Pending => {}
        }
        polled
    }
}

impl<T, F> Drop for MeteredStream<T, F> {
    fn drop(&mut self) {
        self.settle();
    }
}

/// A [`MultipartUpload`] whose parts, completion and abort are metered.
#[derive(Debug)]
struct MeteredUpload {
    inner: Box<dyn MultipartUpload>,
    metrics: Metrics,
}

#[async_trait]
impl MultipartUpload for MeteredUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let len = data.content_length() as u64;
        let fut = self.inner.put_part(data);
        let metrics = self.metrics.clone();
        Box::pin(async move {
            let result = metered(&metrics, RequestKind::MultipartPart, fut).await;
            if result.is_ok() {
                metrics.bytes_out(len);
            }
            result
        })
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let fut = self.inner.complete();
        metered(&self.metrics, RequestKind::MultipartComplete, fut).await
    }

    async fn abort(&mut self) -> Result<()> {
        let fut = self.inner.abort();
        metered(&self.metrics, RequestKind::MultipartAbort, fut).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn counts_requests_and_bytes_on_memory() {
        let metrics = Metrics::new();
        let store = MeteredStore::new(InMemory::new(), metrics.clone());
        let k = Path::from("a/b");
        store
            .put(&k, Bytes::from_static(b"hello").into())
            .await
            .unwrap();
        assert_eq!(store.get(&k).await.unwrap().bytes().await.unwrap(), "hello");
        assert_eq!(store.get_range(&k, 1..3).await.unwrap(), "el");
        store.head(&k).await.unwrap();
        let listed: Vec<_> = store.list(None).collect().await;
        assert_eq!(listed.len(), 1);
        store.delete(&k).await.unwrap();
        assert!(store.head(&k).await.is_err());
        let s = metrics.snapshot();
        assert_eq!(s.requests.put, 1);
        assert_eq!(s.requests.get, 1);
        assert_eq!(s.requests.ranged_get, 1);
        assert_eq!(s.requests.head, 2);
        assert_eq!(s.requests.list, 1);
        assert_eq!(s.requests.delete, 1);
        assert_eq!((s.bytes_out, s.bytes_in), (5, 7));
        assert_eq!(s.errors.not_found, 1);
        assert_eq!(s.latency.first_byte_ms.count, 2);
        assert_eq!(s.retries, 0);
    }
}
