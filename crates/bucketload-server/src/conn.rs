//! A connection's socket: sends memory-mapped body slices with `sendfile` (see
//! [`crate::mapped`]), caps what it sends with a token bucket, turns an injected reset
//! into a real TCP RST (zero linger, then close), and tells the connection's
//! [`crate::timeouts::Activity`] when bytes arrive and when the client stops reading.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use rustix::net::SendFlags;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use crate::mapped::{FileRegion, file_region};
use crate::service::ConnState;

/// Token bucket on a connection's writes.
#[derive(Debug)]
struct Throttle {
    rate: f64,
    /// At most 50 ms of rate (bounded to 1 KiB..1 MiB) is sent in one burst, so the cap holds
    /// over short windows without a wakeup per packet.
    burst: f64,
    tokens: f64,
    last: Instant,
    sleep: Pin<Box<Sleep>>,
}

impl Throttle {
    fn new(bytes_per_sec: u64) -> Self {
        let rate = bytes_per_sec as f64;
        let burst = (rate / 20.0).clamp(1024.0, 1024.0 * 1024.0);
        let now = Instant::now();
        Self {
            rate,
            burst,
            tokens: burst,
            last: now,
            sleep: Box::pin(tokio::time::sleep_until(now)),
        }
    }

    /// Waits until at least one burst-sized slice (or what is asked) may be sent.
    fn poll_acquire(&mut self, cx: &mut Context<'_>, wanted: usize) -> Poll<usize> {
        let need = (wanted as f64).min(self.burst);
        loop {
            let now = Instant::now();
            self.tokens = (self.tokens + now.duration_since(self.last).as_secs_f64() * self.rate)
                .min(self.burst);
            self.last = now;
            if self.tokens >= need {
                return Poll::Ready(self.tokens as usize);
            }
            let wait = Duration::from_secs_f64((need - self.tokens) / self.rate);
            self.sleep.as_mut().reset(now + wait);
            ready!(self.sleep.as_mut().poll(cx));
        }
    }

    fn consume(&mut self, n: usize) {
        self.tokens -= n as f64;
    }
}

/// The socket of one accepted connection.
#[derive(Debug)]
pub(crate) struct ConnIo {
    stream: TcpStream,
    state: Arc<ConnState>,
    throttle: Option<Throttle>,
}

impl ConnIo {
    pub(crate) fn new(stream: TcpStream, state: Arc<ConnState>, bandwidth: Option<u64>) -> Self {
        Self {
            stream,
            state,
            throttle: bandwidth.map(Throttle::new),
        }
    }

    /// After an injected reset, arms a RST and fails every further write.
    fn check_reset(&self) -> io::Result<()> {
        if self.state.reset.load(Ordering::Acquire) {
            let _ = self.stream.set_zero_linger();
            return Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "injected connection reset",
            ));
        }
        Ok(())
    }
}

impl ConnIo {
    /// Runs a non-blocking socket call once the socket is writable, retrying on `WouldBlock`.
    fn poll_send(
        &self,
        cx: &mut Context<'_>,
        mut call: impl FnMut(&TcpStream) -> rustix::io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.stream.poll_write_ready(cx))?;
            match self
                .stream
                .try_io(Interest::WRITABLE, || Ok(call(&self.stream)?))
            {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return Poll::Ready(other),
            }
        }
    }

    /// Sends a mapped body slice from the page cache.
    fn poll_sendfile(&self, cx: &mut Context<'_>, region: &FileRegion) -> Poll<io::Result<usize>> {
        self.poll_send(cx, |stream| {
            let mut offset = region.offset;
            rustix::fs::sendfile(stream, &*region.file, Some(&mut offset), region.len)
        })
    }

    /// Writes `bufs` without bandwidth cap: mapped slices with `sendfile`, other bytes (the
    /// response head) with `send(MSG_MORE)` when a mapped slice follows, so head and body
    /// still leave in full packets.
    fn poll_write_direct(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let bufs = match bufs.iter().position(|b| !b.is_empty()) {
            Some(i) => &bufs[i..],
            None => return Poll::Ready(Ok(0)),
        };
        if let Some(region) = file_region(&bufs[0]) {
            return self.poll_sendfile(cx, &region);
        }
        let plain = bufs
            .iter()
            .position(|b| !b.is_empty() && file_region(b).is_some())
            .unwrap_or(bufs.len());
        if plain == 1 && bufs.len() > 1 {
            let head = &*bufs[0];
            return self.poll_send(cx, |stream| {
                rustix::net::send(stream, head, SendFlags::MORE)
            });
        }
        Pin::new(&mut self.stream).poll_write_vectored(cx, &bufs[..plain])
    }

    /// Records whether a socket write went through or found the socket full.
    fn noted(&self, written: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        match &written {
            Poll::Pending => self.state.activity.on_write_blocked(),
            Poll::Ready(_) => self.state.activity.on_write(),
        }
        written
    }
}

impl Drop for ConnIo {
    fn drop(&mut self) {
        let _ = self.check_reset();
    }
}

impl AsyncRead for ConnIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.state.activity.on_read();
        }
        read
    }
}

impl AsyncWrite for ConnIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check_reset()?;
        let this = &mut *self;
        let Some(throttle) = this.throttle.as_mut() else {
            let written = this.poll_write_direct(cx, &[io::IoSlice::new(buf)]);
            return this.noted(written);
        };
        let allowed = ready!(throttle.poll_acquire(cx, buf.len())).max(1);
        let n = allowed.min(buf.len());
        let written = Pin::new(&mut this.stream).poll_write(cx, &buf[..n]);
        let written = ready!(this.noted(written))?;
        if let Some(throttle) = this.throttle.as_mut() {
            throttle.consume(written);
        }
        Poll::Ready(Ok(written))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.throttle.is_some() {
            let buf = bufs
                .iter()
                .find(|b| !b.is_empty())
                .map_or(&[][..], |b| &**b);
            return self.poll_write(cx, buf);
        }
        self.check_reset()?;
        let written = self.poll_write_direct(cx, bufs);
        self.noted(written)
    }

    fn is_write_vectored(&self) -> bool {
        self.throttle.is_none() && self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check_reset()?;
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check_reset()?;
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
