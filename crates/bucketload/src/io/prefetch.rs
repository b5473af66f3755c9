//! The prefetching range reader: one byte range of one object, read sequentially with ranged
//! GETs that run ahead of the consumer.
//!
//! Architecture (Mountpoint's prefetcher is the model):
//!
//! - **Window.** The reader keeps at most `window` bytes requested but not yet handed to the
//!   consumer. The window starts at [`PrefetchConfig::first_request`] (a small first GET answers
//!   fast) and doubles each time the consumer drains requests totalling the current window (one
//!   request while requests are as large as the window; several once requests are split at
//!   [`PrefetchConfig::part_size`]), up to [`PrefetchConfig::max_window`]. So the window never
//!   exceeds `max(first_request, 2 × bytes consumed)`: a short read over-reads little. Each time
//!   a request is drained, the room left in the window is filled with new requests of at most
//!   `part_size` bytes. With the defaults (1 MiB, 8 MiB, 64 MiB) a 64 MiB range is read as 1,
//!   2, 4, 8, 8, 8, 8, 8, 8, 8 and 1 MiB GETs, up to eight in flight at once.
//!   [`PrefetchConfig::for_streams`] (the loader's shard streams, which read whole shards) starts
//!   with an 8 MiB window — the 1 MiB first request and 7 MiB beside it — and grows it 8× per
//!   window drained, reaching 64 MiB once those first 8 MiB are drained (one growth instead of
//!   the default's six: 1, 2, 4, 8, 16, 32, 64 MiB).
//! - **Tasks.** Each request runs on its own Tokio task and sends its body chunks over an
//!   unbounded channel, so the GETs in flight make progress while the consumer parses; the
//!   channel of one request never holds more than that request's bytes.
//! - **Back-pressure.** Requests are issued only when the consumer polls and drains a request:
//!   a consumer that stops polling stops new requests, and memory stays under `max_window` plus
//!   the chunk being handed over.
//! - **Broken bodies.** A body that fails or ends early, or a connection cut before the answer,
//!   is requested again from the first byte not yet received, after an exponential backoff
//!   with jitter (20 ms doubling, at most 2 s), at most [`PrefetchConfig::max_retries`] times
//!   per request (counted in [`PrefetchCounters`]); then the stream fails with an error naming
//!   the object URI and the byte range. This sits on top of the store's own retries (object_store
//!   retries 5xx, throttling and, for S3, broken bodies too); it catches what they give up on
//!   and works for every backend. A changed ETag between two responses is an error (the object
//!   was overwritten), and so is a range past the object's end (no retry).
//! - **Cancellation.** Dropping the stream aborts every request in flight, except with a disk
//!   cache: then requests in flight finish and fill the cache (the next epoch asks for the
//!   same ranges), and the loader's next epoch waits for them.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bucketload_store::ETag;
use bucketload_store::object_store::path::Path;
use bucketload_store::object_store::{GetOptions, GetRange};
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{FutureExt, StreamExt};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::cache::{Blocks, Fill};
use crate::base::Location;
use crate::error::{Error, Result};

/// 1 MiB: a first GET this small answers within a few milliseconds of the first-byte latency.
const DEFAULT_FIRST_REQUEST: u64 = 1 << 20;
/// 8 MiB: S3's own guidance for ranged GETs; large enough to amortise the first-byte latency.
const DEFAULT_PART_SIZE: u64 = 8 << 20;
/// 64 MiB: eight 8 MiB parts in flight keep ~10 Gb/s busy at 50 ms first-byte latency.
const DEFAULT_MAX_WINDOW: u64 = 64 << 20;
/// Shard streams read whole shards: their window grows 8× per window drained.
const STREAM_GROWTH: u64 = 8;
/// Shard streams start with 8 MiB in flight (a 1 MiB first request and 7 MiB beside it), so
/// their window reaches 64 MiB (8 MiB × [`STREAM_GROWTH`]) once those 8 MiB are drained.
const STREAM_INITIAL_WINDOW: u64 = 8 << 20;
/// The window doubles: it never exceeds twice the bytes consumed.
const DEFAULT_GROWTH: u64 = 2;
/// 5 re-requests: rides out a flaky connection without hiding a server that always fails.
const DEFAULT_MAX_RETRIES: u32 = 5;
/// First pause before requesting a broken body again; doubles per attempt.
const RETRY_BASE_DELAY: Duration = Duration::from_millis(20);
/// Longest pause between two re-requests of one range.
const RETRY_MAX_DELAY: Duration = Duration::from_secs(2);

/// How far ahead a sequential reader requests bytes (Mountpoint's prefetcher is the model).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefetchConfig {
    /// Size of the first GET, and the initial window. Default: 1 MiB (a fast first byte).
    pub first_request: u64,
    /// The largest single ranged GET. Default: 8 MiB.
    pub part_size: u64,
    /// Bytes requested ahead of the consumer at most. Default: 64 MiB.
    pub max_window: u64,
    /// Re-requests of a range whose body failed mid-way, per request. Default: 5.
    pub max_retries: u32,
    /// The window before anything is consumed; the first request is still `first_request`,
    /// the rest of this window is requested beside it at once. Default: `first_request` (one
    /// small request, then growth).
    pub initial_window: Option<u64>,
    /// Factor the window grows by each time the consumer drains a window's worth. Default: 2
    /// (the window never exceeds twice the bytes consumed, so a short read over-reads little);
    /// the loader's shard streams, which read whole shards, use 8 from an 8 MiB initial window
    /// to reach the 64 MiB window after one growth instead of six.
    pub growth: u64,
}

impl Default for PrefetchConfig {
    fn default() -> Self {
        PrefetchConfig {
            first_request: DEFAULT_FIRST_REQUEST,
            part_size: DEFAULT_PART_SIZE,
            max_window: DEFAULT_MAX_WINDOW,
            max_retries: DEFAULT_MAX_RETRIES,
            initial_window: None,
            growth: DEFAULT_GROWTH,
        }
    }
}

impl PrefetchConfig {
    /// The loader's default for shard streams, which read whole shards front to back: the
    /// defaults with an 8 MiB initial window growing 8× per window drained.
    pub fn for_streams() -> PrefetchConfig {
        PrefetchConfig::default()
            .with_growth(STREAM_GROWTH)
            .with_initial_window(STREAM_INITIAL_WINDOW)
    }

    /// Sets the window before anything is consumed (default: `first_request`).
    pub fn with_initial_window(mut self, bytes: u64) -> Self {
        self.initial_window = Some(bytes);
        self
    }

    /// Sets the size of the first GET (default 1 MiB).
    pub fn with_first_request(mut self, bytes: u64) -> Self {
        self.first_request = bytes;
        self
    }

    /// Sets the largest single GET (default 8 MiB).
    pub fn with_part_size(mut self, bytes: u64) -> Self {
        self.part_size = bytes;
        self
    }

    /// Sets the window's growth factor (default 2, at least 2).
    pub fn with_growth(mut self, factor: u64) -> Self {
        self.growth = factor;
        self
    }

    /// Sets the most bytes requested ahead of the consumer (default 64 MiB).
    pub fn with_max_window(mut self, bytes: u64) -> Self {
        self.max_window = bytes;
        self
    }

    /// Sets the re-requests allowed per broken body (default 5).
    pub fn with_max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// Checks that every size is positive and the first request fits the window; reports every
    /// problem at once.
    pub fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        for (name, value) in [
            ("first_request", self.first_request),
            ("part_size", self.part_size),
            ("max_window", self.max_window),
        ] {
            if value == 0 {
                problems.push(format!("prefetch {name} must be at least 1 byte"));
            }
        }
        if self.first_request > self.max_window {
            problems.push(format!(
                "prefetch first_request ({}) must not exceed max_window ({})",
                self.first_request, self.max_window
            ));
        }
        match problems.is_empty() {
            true => Ok(()),
            false => Err(Error::invalid_input(problems.join("; "))),
        }
    }
}

/// Counters that readers update (atomics, shared by every reader given the same `Arc`).
#[derive(Debug, Default)]
pub struct PrefetchCounters {
    requests: AtomicU64,
    bytes: AtomicU64,
    retries: AtomicU64,
    in_flight: AtomicU64,
    window: AtomicU64,
    ahead: AtomicU64,
}

/// A copy of [`PrefetchCounters`] at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PrefetchSnapshot {
    /// Ranged GETs issued, re-requests included.
    pub requests: u64,
    /// Body bytes received.
    pub bytes: u64,
    /// Re-requests of bodies that broke mid-way or came back short.
    pub retries: u64,
    /// GETs running now.
    pub in_flight: u64,
    /// Sum of the current windows of the live readers, in bytes.
    pub window: u64,
    /// Bytes requested but not yet handed to consumers, summed over the live readers.
    pub ahead: u64,
}

impl PrefetchCounters {
    /// The counters now.
    pub fn snapshot(&self) -> PrefetchSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PrefetchSnapshot {
            requests: get(&self.requests),
            bytes: get(&self.bytes),
            retries: get(&self.retries),
            in_flight: get(&self.in_flight),
            window: get(&self.window),
            ahead: get(&self.ahead),
        }
    }
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

fn sub(counter: &AtomicU64, n: u64) {
    counter.fetch_sub(n, Ordering::Relaxed);
}

/// The bytes of `range` of `key`, in order.
///
/// Ranged GETs run ahead of the consumer: the window starts at `first_request` and doubles each
/// time the consumer drains requests totalling the window (a request, until requests are split
/// at `part_size`), up to `max_window`; requests are at most `part_size`. A
/// body that breaks mid-way is requested again from the first byte not yet received. Memory: at
/// most `max_window` + one part. An empty range yields nothing and sends no request. The stream
/// ends after its first error. Must be polled inside a Tokio runtime.
pub fn read_range(
    location: Location,
    key: Path,
    range: Range<u64>,
    config: PrefetchConfig,
    counters: Arc<PrefetchCounters>,
) -> BoxStream<'static, Result<Bytes>> {
    read_range_with(location, key, range, config, counters, None)
}

/// [`read_range`] whose requests go through a disk cache when `blocks` is given.
pub(crate) fn read_range_with(
    location: Location,
    key: Path,
    range: Range<u64>,
    config: PrefetchConfig,
    counters: Arc<PrefetchCounters>,
    blocks: Option<Blocks>,
) -> BoxStream<'static, Result<Bytes>> {
    if let Err(e) = config.validate() {
        return stream::once(async move { Err(e) }).boxed();
    }
    let reader = Reader::new(location, key, range, config, counters, blocks);
    stream::unfold(reader, |mut reader| async move {
        let item = reader.next().await?;
        Some((item, reader))
    })
    .boxed()
}

/// What every request of one reader shares.
#[derive(Debug)]
struct Object {
    location: Location,
    key: Path,
    uri: String,
    max_retries: u32,
    counters: Arc<PrefetchCounters>,
    /// The loader's cache of this object's requests, if any.
    blocks: Option<Blocks>,
    /// The ETag of the first response, compared with every later one.
    etag: Mutex<Option<ETag>>,
}

/// A request in flight: its range, the channel its chunks arrive on and its task.
#[derive(Debug)]
struct Part {
    start: u64,
    end: u64,
    chunks: mpsc::UnboundedReceiver<Result<Bytes>>,
    task: JoinHandle<()>,
    /// Whether the request goes on when the part is dropped: it fills the disk cache.
    caches: bool,
}

impl Drop for Part {
    fn drop(&mut self) {
        if !self.caches {
            self.task.abort();
        }
    }
}

/// Where the reader stands in its range and how far ahead it may request: pure arithmetic,
/// separate from the I/O so the request sequence can be checked on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Window {
    /// The next byte to request.
    next: u64,
    /// The next byte to hand to the consumer.
    consumed: u64,
    end: u64,
    /// Bytes that may be requested ahead of `consumed`.
    size: u64,
    /// Bytes of drained requests since the window last grew.
    drained: u64,
    part_size: u64,
    max: u64,
    growth: u64,
    /// The first request's size, until it is issued.
    first: Option<u64>,
}

impl Window {
    fn new(range: Range<u64>, config: &PrefetchConfig) -> Window {
        Window {
            next: range.start,
            consumed: range.start,
            end: range.end.max(range.start),
            size: config
                .initial_window
                .unwrap_or(config.first_request)
                .max(config.first_request)
                .min(config.max_window),
            drained: 0,
            part_size: config.part_size,
            max: config.max_window,
            growth: config.growth.max(2),
            first: Some(config.first_request),
        }
    }

    /// Bytes requested but not yet consumed.
    fn ahead(&self) -> u64 {
        self.next - self.consumed
    }

    /// The next request that fits in the window, if any; marks it requested.
    fn next_request(&mut self) -> Option<Range<u64>> {
        let room = self.size.saturating_sub(self.ahead());
        let limit = self.first.unwrap_or(self.part_size).min(self.part_size);
        let size = room.min(limit).min(self.end - self.next);
        if size == 0 {
            return None;
        }
        self.first = None;
        let range = self.next..self.next + size;
        self.next = range.end;
        Some(range)
    }

    /// A request of `len` bytes was drained: once drained requests add up to the window, the
    /// window grows by its factor (doubles by default), up to its cap. Returns the growth.
    fn drained(&mut self, len: u64) -> u64 {
        self.drained += len;
        if self.drained < self.size {
            return 0;
        }
        self.drained = 0;
        let grown = self.size.saturating_mul(self.growth).min(self.max);
        let delta = grown - self.size;
        self.size = grown;
        delta
    }
}

/// The state of one [`read_range`] stream.
#[derive(Debug)]
struct Reader {
    object: Arc<Object>,
    window: Window,
    parts: VecDeque<Part>,
    failed: bool,
}

impl Reader {
    fn new(
        location: Location,
        key: Path,
        range: Range<u64>,
        config: PrefetchConfig,
        counters: Arc<PrefetchCounters>,
        blocks: Option<Blocks>,
    ) -> Reader {
        let window = Window::new(range, &config);
        add(&counters.window, window.size);
        // Cached blocks are filed under a version known up front: every response must be it.
        let etag = blocks.as_ref().and_then(|b| b.version.etag.clone());
        let object = Object {
            uri: location.uri_of(&key),
            location,
            key,
            max_retries: config.max_retries,
            counters,
            blocks,
            etag: Mutex::new(etag),
        };
        Reader {
            object: Arc::new(object),
            window,
            parts: VecDeque::new(),
            failed: false,
        }
    }

    /// The next chunk; issues requests as the window allows.
    async fn next(&mut self) -> Option<Result<Bytes>> {
        if self.failed {
            return None;
        }
        if self.parts.is_empty() {
            self.top_up();
        }
        loop {
            let part = self.parts.front_mut()?;
            match part.chunks.recv().await {
                Some(Ok(chunk)) => {
                    self.window.consumed += chunk.len() as u64;
                    sub(&self.object.counters.ahead, chunk.len() as u64);
                    return Some(Ok(chunk));
                }
                Some(Err(e)) => return Some(Err(self.fail(e))),
                None if self.window.consumed < part.end => {
                    let e = Error::Task {
                        reason: format!("a request for {} stopped early", self.object.uri),
                    };
                    return Some(Err(self.fail(e)));
                }
                None => {
                    let len = part.end - part.start;
                    self.parts.pop_front();
                    add(&self.object.counters.window, self.window.drained(len));
                    self.top_up();
                }
            }
        }
    }

    fn fail(&mut self, e: Error) -> Error {
        self.failed = true;
        self.parts.clear();
        e
    }

    /// Issues requests until the window is full or the range is fully requested.
    fn top_up(&mut self) {
        while let Some(range) = self.window.next_request() {
            add(&self.object.counters.ahead, range.end - range.start);
            self.parts.push_back(spawn_part(&self.object, range));
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let counters = &self.object.counters;
        sub(&counters.window, self.window.size);
        sub(&counters.ahead, self.window.ahead());
    }
}

fn spawn_part(object: &Arc<Object>, range: Range<u64>) -> Part {
    tracing::trace!(uri = %object.uri, start = range.start, end = range.end, "ranged GET");
    let (tx, rx) = mpsc::unbounded_channel();
    let (start, end) = (range.start, range.end);
    // Counted from now, so that an epoch starting next waits for it.
    let fill = object.blocks.as_ref().map(Blocks::fill);
    let task = tokio::spawn(fetch_part(Arc::clone(object), range, tx, fill));
    Part {
        start,
        end,
        chunks: rx,
        task,
        caches: object.blocks.is_some(),
    }
}

/// Decrements the in-flight gauge when a request ends, even when its task is aborted.
struct InFlight<'a>(&'a AtomicU64);

impl<'a> InFlight<'a> {
    fn start(gauge: &'a AtomicU64) -> Self {
        add(gauge, 1);
        InFlight(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        sub(self.0, 1);
    }
}

/// How one attempt at a range ended.
enum Attempt {
    /// Every byte arrived (or the consumer went away).
    Done,
    /// The body broke or ended early; the cause, for the final error.
    Broken(String),
}

/// Reads `range`, sending chunks on `tx`; re-requests from the first missing byte when the body
/// breaks.
async fn fetch_part(
    object: Arc<Object>,
    range: Range<u64>,
    tx: mpsc::UnboundedSender<Result<Bytes>>,
    _fill: Option<Fill>,
) {
    if let Some(blocks) = &object.blocks {
        if let Some(bytes) = blocks.get(range.clone()).await {
            let _ = tx.send(Ok(bytes));
            return;
        }
        // Sent on to the consumer and kept, to be cached once the range is whole. A consumer
        // that stops early (a tar reader done before the archive's trailing padding) does not
        // stop the range from being cached: the next epoch requests the same range. The
        // consumer sees the range end as soon as its last byte arrives, before the cache write
        // (which this task goes on with, counted as a fill).
        let (tee, mut kept) = mpsc::unbounded_channel::<Result<Bytes>>();
        let forward = async move {
            let mut body = Vec::new();
            let mut ok = true;
            while let Some(item) = kept.recv().await {
                match &item {
                    Ok(chunk) => body.push(chunk.clone()),
                    Err(_) => ok = false,
                }
                let _ = tx.send(item);
            }
            drop(tx);
            (ok, body)
        };
        let ((ok, body), ()) = tokio::join!(forward, fetch_caught(&object, &range, tee));
        let len: usize = body.iter().map(Bytes::len).sum();
        if ok && len as u64 == range.end - range.start {
            blocks.put(range, body).await;
        }
        return;
    }
    fetch_caught(&object, &range, tx).await;
}

/// [`fetch_uncached`], whose panic is sent as the range's error (not a body that stops early).
async fn fetch_caught(
    object: &Arc<Object>,
    range: &Range<u64>,
    tx: mpsc::UnboundedSender<Result<Bytes>>,
) {
    let what = format!(
        "reading bytes {}..{} of {}",
        range.start, range.end, object.uri
    );
    let fetch = fetch_uncached(object, range, tx.clone()).map(Ok);
    if let Err(e) = crate::panics::catch(what, fetch).await {
        let _ = tx.send(Err(e));
    }
}

/// [`fetch_part`] from the store.
async fn fetch_uncached(
    object: &Arc<Object>,
    range: &Range<u64>,
    tx: mpsc::UnboundedSender<Result<Bytes>>,
) {
    let object = Arc::clone(object);
    let range = range.clone();
    let mut pos = range.start;
    let mut attempts = 0u32;
    loop {
        let result = attempt(&object, &mut pos, range.end, &tx).await;
        let cause = match result {
            Ok(Attempt::Done) => return,
            Ok(Attempt::Broken(cause)) => cause,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        if attempts >= object.max_retries {
            let _ = tx.send(Err(broken(&object, &range, pos, attempts, &cause)));
            return;
        }
        attempts += 1;
        add(&object.counters.retries, 1);
        tracing::debug!(
            uri = %object.uri, start = pos, end = range.end, attempt = attempts, %cause,
            "body broke mid-way; requesting the rest again"
        );
        // Half to all of the backoff, at random, so readers cut at once do not retry in step.
        let pause = backoff(attempts).mul_f64(rand::random_range(0.5..=1.0));
        tokio::time::sleep(pause).await;
    }
}

/// The longest pause before re-request number `attempt` (1-based): exponential, capped.
fn backoff(attempt: u32) -> Duration {
    RETRY_BASE_DELAY
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(RETRY_MAX_DELAY)
}

/// The error once a range broke more often than allowed.
fn broken(object: &Object, range: &Range<u64>, pos: u64, retries: u32, cause: &str) -> Error {
    Error::Store(bucketload_store::Error::Corrupt {
        uri: format!("{} (bytes {}-{})", object.uri, range.start, range.end - 1),
        detail: format!(
            "the response body broke at byte {pos} after {retries} re-requests ({cause}); \
             check the network or the server, or raise max_retries"
        ),
    })
}

/// One GET of `*pos..end`; advances `*pos` by the bytes received.
async fn attempt(
    object: &Object,
    pos: &mut u64,
    end: u64,
    tx: &mpsc::UnboundedSender<Result<Bytes>>,
) -> Result<Attempt> {
    let counters = &object.counters;
    let _in_flight = InFlight::start(&counters.in_flight);
    add(&counters.requests, 1);
    let options = GetOptions {
        range: Some(GetRange::Bounded(*pos..end)),
        ..GetOptions::default()
    };
    let store = object.location.store();
    let response = match store.get_opts(&object.key, options).await {
        Ok(response) => response,
        Err(e) => {
            let e = object.location.error(&object.key, e);
            // A connection cut before the answer (after the store's own retries) is retried
            // like a body cut; every other failure is final.
            return match e {
                Error::Store(bucketload_store::Error::Unreachable { .. }) => {
                    Ok(Attempt::Broken(error_chain(&e)))
                }
                e => Err(e),
            };
        }
    };
    check_etag(object, ETag::from_store(response.meta.e_tag.as_deref()))?;
    if response.range.end < end {
        return Err(past_the_end(object, *pos..end, response.meta.size));
    }
    let mut body = response.into_stream();
    while *pos < end {
        let chunk = match body.next().await {
            Some(Ok(chunk)) => chunk,
            Some(Err(e)) => return Ok(Attempt::Broken(error_chain(&e))),
            None => return Ok(Attempt::Broken("the body ended early".to_owned())),
        };
        // A server that sends more than asked must not shift the bytes that follow.
        let chunk = chunk.slice(..chunk.len().min((end - *pos) as usize));
        *pos += chunk.len() as u64;
        add(&counters.bytes, chunk.len() as u64);
        if tx.send(Ok(chunk)).is_err() {
            break;
        }
    }
    Ok(Attempt::Done)
}

/// The error for a range that ends past the object: the object disagrees with the size its
/// manifest or index recorded (corrupt data, not a transient failure or a bad setting).
fn past_the_end(object: &Object, range: Range<u64>, size: u64) -> Error {
    Error::Corrupt {
        uri: object.uri.clone(),
        reason: format!(
            "bytes {}-{} were asked but the object has only {size} bytes; the manifest or index \
             that recorded its size is stale: re-create it",
            range.start,
            range.end - 1
        ),
    }
}

/// An error and its causes on one line, for the final error's message.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Fails if `etag` differs from the first response's: the object changed while being read.
fn check_etag(object: &Object, etag: Option<ETag>) -> Result<()> {
    let Some(etag) = etag else { return Ok(()) };
    let mut first = object.etag.lock().unwrap_or_else(PoisonError::into_inner);
    match first.as_ref() {
        None => {
            *first = Some(etag);
            Ok(())
        }
        Some(seen) if *seen == etag => Ok(()),
        Some(seen) => Err(Error::Corrupt {
            uri: object.uri.clone(),
            reason: format!(
                "the object changed while being read (ETag {seen} then {etag}); read it again \
                 (a loader given a metadata TTL reads the new version once opened again)"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_documentation() {
        let c = PrefetchConfig::default();
        assert_eq!(c.first_request, 1 << 20);
        assert_eq!(c.part_size, 8 << 20);
        assert_eq!(c.max_window, 64 << 20);
        assert_eq!(c.max_retries, 5);
        c.validate().unwrap();
    }

    #[test]
    fn validate_reports_every_problem() {
        let c = PrefetchConfig::default()
            .with_first_request(0)
            .with_part_size(0)
            .with_max_window(0);
        let msg = c.validate().unwrap_err().to_string();
        assert!(msg.contains("first_request must"), "{msg}");
        assert!(msg.contains("part_size must"), "{msg}");
        assert!(msg.contains("max_window must"), "{msg}");
        let c = PrefetchConfig::default()
            .with_first_request(2 << 20)
            .with_max_window(1 << 20);
        let msg = c.validate().unwrap_err().to_string();
        assert!(msg.contains("must not exceed max_window"), "{msg}");
    }

    /// The requests a fully sequential consumer of `range` causes, checking the window's
    /// invariants after every drained request.
    fn simulate(config: PrefetchConfig, range: Range<u64>) -> Vec<Range<u64>> {
        let mut w = Window::new(range.clone(), &config);
        let mut in_flight = VecDeque::new();
        let mut issued = Vec::new();
        loop {
            while let Some(r) = w.next_request() {
                assert!(
                    r.end - r.start <= config.part_size,
                    "{r:?} is larger than a part"
                );
                issued.push(r.clone());
                in_flight.push_back(r);
            }
            let Some(drained) = in_flight.pop_front() else {
                return issued;
            };
            w.consumed = drained.end;
            w.drained(drained.end - drained.start);
            assert!(w.ahead() <= w.size, "never more than the window ahead");
            assert!(w.size <= config.max_window);
            let consumed = w.consumed - range.start;
            let start_window = config.initial_window.unwrap_or(0).max(config.first_request);
            assert!(
                w.size <= start_window.max(config.growth.max(2) * consumed),
                "{w:?}"
            );
        }
    }

    /// The sizes of the requests a fully sequential consumer causes, in MiB.
    fn sequence(config: PrefetchConfig, len: u64) -> Vec<u64> {
        let issued = simulate(config, 0..len);
        issued.iter().map(|r| (r.end - r.start) >> 20).collect()
    }

    proptest::proptest! {
        #[test]
        fn requests_cover_the_range_in_order_within_the_window(
            first in 1u64..4 << 20,
            part in 4096u64..16 << 20,
            extra in 0u64..64 << 20,
            start in 0u64..1 << 20,
            len in 0u64..256 << 20,
            growth in 2u64..9,
            initial in 0u64..16 << 20,
        ) {
            let config = PrefetchConfig::default()
                .with_first_request(first)
                .with_part_size(part.max(first / 64))
                .with_max_window(first + extra)
                .with_growth(growth)
                .with_initial_window(initial);
            let issued = simulate(config, start..start + len);
            let mut next = start;
            for r in &issued {
                proptest::prop_assert_eq!(r.start, next);
                next = r.end;
            }
            proptest::prop_assert_eq!(next, start + len);
        }
    }

    #[test]
    fn window_starts_small_doubles_and_splits_at_the_part_size() {
        let mib = 1 << 20;
        let seq = sequence(PrefetchConfig::default(), 64 * mib);
        assert_eq!(seq, [1, 2, 4, 8, 8, 8, 8, 8, 8, 8, 1]);
        let c = PrefetchConfig::default()
            .with_part_size(2 * mib)
            .with_max_window(4 * mib);
        assert_eq!(sequence(c, 13 * mib), [1, 2, 2, 2, 2, 2, 2]);
        let flat = PrefetchConfig::default()
            .with_first_request(4 * mib)
            .with_part_size(4 * mib)
            .with_max_window(4 * mib);
        assert_eq!(sequence(flat, 10 * mib), [4, 4, 2]);
        // Shard streams: a 1 MiB first request with 7 MiB beside it (the first one drained
        // refills the 8 MiB window), then the 64 MiB window once 8 MiB are drained.
        let streams = sequence(PrefetchConfig::for_streams(), 64 * mib);
        assert_eq!(streams, [1, 7, 1, 8, 8, 8, 8, 8, 8, 7]);
    }

    #[test]
    fn an_empty_or_inverted_range_requests_nothing() {
        let mut w = Window::new(5..5, &PrefetchConfig::default());
        assert_eq!(w.next_request(), None);
        #[allow(clippy::reversed_empty_ranges)]
        let mut w = Window::new(9..3, &PrefetchConfig::default());
        assert_eq!(w.next_request(), None);
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        assert_eq!(backoff(1), RETRY_BASE_DELAY);
        assert_eq!(backoff(2), RETRY_BASE_DELAY * 2);
        assert_eq!(backoff(3), RETRY_BASE_DELAY * 4);
        assert_eq!(backoff(40), RETRY_MAX_DELAY);
    }
}
