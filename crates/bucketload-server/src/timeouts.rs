//! Connection timeouts, so that clients that stop talking cannot hold connections (and file
//! descriptors) forever.
//!
//! Parts: the socket wrapper ([`crate::conn::ConnIo`]) records in an [`Activity`] when bytes
//! arrive and when a write finds the socket full; the service marks each request from its
//! start to the end of its response body ([`Activity::begin_request`]). A watchdog per
//! connection ([`watch`]) sleeps until the deadline of the phase the connection is in —
//! idle (no byte of the next request yet), reading a request head, or sending a response the
//! client does not read — re-reading the phase when it wakes or when a request ends, and
//! returns when a deadline passes; the connection task then drops the connection. A request
//! body that brings no bytes for the body timeout fails on its own ([`ProgressBody`]): the
//! request answers 400 `RequestTimeout` and the connection closes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

use crate::config::Timeouts;
use crate::service::BoxError;

/// "Not set" for the timestamps of [`Activity`].
const NONE: u64 = u64::MAX;

/// What a connection was waiting for when its watchdog closed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expired {
    /// No request arrived within the idle timeout.
    Idle,
    /// A request head was not complete within the header timeout.
    Header,
    /// The client did not read a response within the body timeout.
    Body,
}

/// What a connection is doing, as timestamps in nanoseconds since it was accepted.
#[derive(Debug)]
pub(crate) struct Activity {
    opened: Instant,
    /// Requests between the service call and the end of their response body.
    active: AtomicU32,
    /// When the connection last became idle: accepted, or a response ended.
    idle_since: AtomicU64,
    /// When the first byte of the next request head arrived while idle, or [`NONE`].
    head_since: AtomicU64,
    /// When a write found the socket full, or [`NONE`] once a write succeeds.
    write_blocked_since: AtomicU64,
    /// Set when a request body timed out: the request answers 400 `RequestTimeout`.
    pub(crate) body_timed_out: AtomicBool,
    /// Woken when the phase changes in a way that can bring a deadline closer.
    changed: Notify,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            opened: Instant::now(),
            active: AtomicU32::new(0),
            idle_since: AtomicU64::new(0),
            head_since: AtomicU64::new(NONE),
            write_blocked_since: AtomicU64::new(NONE),
            body_timed_out: AtomicBool::new(false),
            changed: Notify::new(),
        }
    }
}

impl Activity {
    fn now(&self) -> u64 {
        self.opened.elapsed().as_nanos() as u64
    }

    /// Bytes arrived from the client.
    pub(crate) fn on_read(&self) {
        if self.active.load(Ordering::Acquire) == 0
            && self.head_since.load(Ordering::Acquire) == NONE
        {
            let _ = self.head_since.compare_exchange(
                NONE,
                self.now(),
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            self.changed.notify_one();
        }
    }

    /// A write found the socket full.
    pub(crate) fn on_write_blocked(&self) {
        if self.write_blocked_since.load(Ordering::Acquire) == NONE {
            self.write_blocked_since
                .store(self.now(), Ordering::Release);
            self.changed.notify_one();
        }
    }

    /// A write went through.
    pub(crate) fn on_write(&self) {
        if self.write_blocked_since.load(Ordering::Relaxed) != NONE {
            self.write_blocked_since.store(NONE, Ordering::Release);
        }
    }

    /// Marks a request as in progress until the guard (moved into its response body) drops.
    pub(crate) fn begin_request(self: &Arc<Self>) -> RequestGuard {
        self.active.fetch_add(1, Ordering::AcqRel);
        self.head_since.store(NONE, Ordering::Release);
        RequestGuard(Arc::clone(self))
    }

    /// The deadline of the current phase (nanoseconds since accepted) and what expires then.
    fn deadline(&self, timeouts: &Timeouts) -> Option<(u64, Expired)> {
        let after = |since: u64, timeout: Option<Duration>, what| {
            timeout.map(|t| (since.saturating_add(t.as_nanos() as u64), what))
        };
        let blocked = self.write_blocked_since.load(Ordering::Acquire);
        if self.active.load(Ordering::Acquire) > 0 {
            return (blocked != NONE)
                .then(|| after(blocked, timeouts.body, Expired::Body))
                .flatten();
        }
        let head = self.head_since.load(Ordering::Acquire);
        if head != NONE {
            return after(head, timeouts.header, Expired::Header);
        }
        after(
            self.idle_since.load(Ordering::Acquire),
            timeouts.idle,
            Expired::Idle,
        )
    }
}

/// Ends a request's activity when dropped.
#[derive(Debug)]
pub(crate) struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let activity = &self.0;
        if activity.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            activity.head_since.store(NONE, Ordering::Release);
            activity.idle_since.store(activity.now(), Ordering::Release);
            activity.changed.notify_one();
        }
    }
}

/// Resolves when the connection has waited for its client longer than the timeout of the
/// phase it is in; never when every timeout is off.
pub(crate) async fn watch(activity: &Activity, timeouts: Timeouts) -> Expired {
    loop {
        match activity.deadline(&timeouts) {
            Some((at, what)) if at <= activity.now() => return what,
            Some((at, _)) => {
                let wake = activity.opened + Duration::from_nanos(at);
                tokio::select! {
                    () = tokio::time::sleep_until(wake) => {}
                    () = activity.changed.notified() => {}
                }
            }
            None => activity.changed.notified().await,
        }
    }
}

pin_project_lite::pin_project! {
    /// A request body that fails when no bytes arrive for `timeout` (and marks the
    /// connection's [`Activity::body_timed_out`]).
    pub(crate) struct ProgressBody<B> {
        #[pin]
        inner: B,
        timeout: Option<Duration>,
        // When bytes last came, or the body was first asked for (hyper sends `100 Continue`
        // then, and a handler may start reading late, e.g. after emulated latency).
        last: Option<Instant>,
        sleep: Option<Pin<Box<Sleep>>>,
        activity: Arc<Activity>,
    }
}

impl<B> ProgressBody<B> {
    pub(crate) fn new(inner: B, timeout: Option<Duration>, activity: Arc<Activity>) -> Self {
        Self {
            inner,
            timeout,
            last: None,
            sleep: None,
            activity,
        }
    }
}

/// The message of S3's 400 `RequestTimeout`.
pub(crate) const REQUEST_TIMEOUT_MESSAGE: &str = "Your socket connection to the server was not read from or written to within the timeout period. Idle connections will be closed.";

impl<B> Body for ProgressBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let last = *this.last.get_or_insert_with(Instant::now);
        match this.inner.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                *this.last = Some(Instant::now());
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let Some(timeout) = *this.timeout else {
                    return Poll::Pending;
                };
                let deadline = last + timeout;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if sleep.deadline() != deadline {
                    sleep.as_mut().reset(deadline);
                }
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.activity.body_timed_out.store(true, Ordering::Release);
                Poll::Ready(Some(Err(format!(
                    "no bytes of the request body for {timeout:?}"
                )
                .into())))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

pin_project_lite::pin_project! {
    /// A response body holding its request's [`RequestGuard`] until hyper drops it.
    pub(crate) struct GuardedBody<B> {
        #[pin]
        inner: B,
        guard: RequestGuard,
    }
}

impl<B> GuardedBody<B> {
    pub(crate) fn new(inner: B, guard: RequestGuard) -> Self {
        Self { inner, guard }
    }
}

impl<B: Body> Body for GuardedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeouts(secs: u64) -> Timeouts {
        let t = Some(Duration::from_secs(secs));
        Timeouts {
            header: t,
            idle: t,
            body: t,
        }
    }

    #[test]
    fn phases_pick_their_deadline() {
        let a = Arc::new(Activity::default());
        let t = Timeouts {
            header: Some(Duration::from_secs(2)),
            idle: Some(Duration::from_secs(1)),
            body: Some(Duration::from_secs(3)),
        };
        assert_eq!(a.deadline(&t).unwrap().1, Expired::Idle);
        a.on_read();
        assert_eq!(a.deadline(&t).unwrap().1, Expired::Header);
        let guard = a.begin_request();
        assert!(
            a.deadline(&t).is_none(),
            "a request in progress has no deadline"
        );
        a.on_write_blocked();
        assert_eq!(a.deadline(&t).unwrap().1, Expired::Body);
        a.on_write();
        assert!(a.deadline(&t).is_none());
        drop(guard);
        assert_eq!(a.deadline(&t).unwrap().1, Expired::Idle);
    }

    #[test]
    fn turned_off_timeouts_have_no_deadline() {
        let a = Activity::default();
        let off = Timeouts {
            header: None,
            idle: None,
            body: None,
        };
        assert!(a.deadline(&off).is_none());
        assert!(a.deadline(&timeouts(5)).is_some());
    }
}
