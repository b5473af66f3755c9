//! Accept loop, connection tasks and the handle of a running server.
//!
//! Start raises the open-file limit, locks the root and removes what earlier runs left
//! there (`storage::cleanup`). Each accepted connection runs on its own task, tracked in a
//! `JoinSet`, with a watchdog for its timeouts (`timeouts`); at the connection cap the loop
//! stops accepting (new clients wait in the listen queue) until one closes. Shutdown stops
//! accepting, asks every connection to finish its current request (hyper's graceful
//! shutdown), waits up to [`SHUTDOWN_GRACE`], then aborts what is left, so no task outlives
//! the server.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use s3s::service::S3ServiceBuilder;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::Error;
use crate::config::{ServerConfig, Timeouts};
use crate::conn::ConnIo;
use crate::faults::{CounterSet, Counters, FaultControl, RateLimiter, Rng};
use crate::fdlimit::FdLimit;
use crate::s3::Backend;
use crate::service::{ConnService, ConnState, RequestIds, Shared};
use crate::storage::{LockError, Reclaimed, RootLock, Storage};

/// How long shutdown waits for requests in flight before closing their connections.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Least time between two warnings that the connection cap is reached.
const CAP_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// Starts a server on a background task; it stops when the handle is dropped or shut down.
pub async fn start(config: ServerConfig) -> Result<RunningServer, Error> {
    let prepared = prepare(&config).await?;
    let addr = prepared.addr;
    let (max_connections, reclaimed) = (prepared.max_connections, prepared.reclaimed);
    let shared = Arc::clone(&prepared.shared);
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(prepared.accept_loop(config.bandwidth, wait_for(stopped)));
    tracing::info!(%addr, "bucketload s3 server started");
    Ok(RunningServer {
        addr,
        shared,
        stop,
        task: Some(task),
        config,
        max_connections,
        reclaimed,
    })
}

/// Runs a server until `shutdown` completes, then stops it gracefully (for `bucketload serve`).
pub async fn serve_forever(
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let prepared = prepare(&config).await?;
    tracing::info!(addr = %prepared.addr, %config, "bucketload s3 server listening");
    prepared.accept_loop(config.bandwidth, shutdown).await;
    Ok(())
}

async fn wait_for(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}

/// A server ready to accept: its socket, shared state, and the lock on its root.
struct Prepared {
    listener: TcpListener,
    addr: SocketAddr,
    shared: Arc<Shared>,
    max_connections: usize,
    reclaimed: Reclaimed,
    lock: RootLock,
}

async fn prepare(config: &ServerConfig) -> Result<Prepared, Error> {
    let fd_limit = crate::fdlimit::raise();
    let data_dir = |source: std::io::Error| Error::DataDir {
        path: config.root.clone(),
        source,
    };
    let storage = Storage::open(&config.root, config.fsync)
        .map_err(data_dir)?
        .shared(config.shared_root);
    let lock =
        crate::storage::lock_root(&config.root, config.shared_root).map_err(|e| match e {
            LockError::InUse(lock) => Error::RootInUse {
                path: config.root.clone(),
                lock,
            },
            LockError::Io(source) => data_dir(source),
        })?;
    // A server sharing the root leaves it as it is: another may be writing into it.
    let reclaimed = match config.shared_root {
        true => Reclaimed::default(),
        false => reclaim(config).await.map_err(data_dir)?,
    };
    let max_connections = config
        .max_connections
        .unwrap_or_else(|| fd_limit.connections());
    let listener = TcpListener::bind(config.addr)
        .await
        .map_err(|source| Error::Bind {
            addr: config.addr,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| Error::Bind {
        addr: config.addr,
        source,
    })?;
    log_start(addr, &fd_limit, max_connections, &reclaimed);
    Ok(Prepared {
        listener,
        addr,
        shared: Arc::new(shared_state(config, storage)),
        max_connections,
        reclaimed,
        lock,
    })
}

fn shared_state(config: &ServerConfig, storage: Storage) -> Shared {
    let backend = Backend::new(Arc::new(storage), config.min_part_size);
    let mut builder = S3ServiceBuilder::new(backend);
    builder.set_auth(crate::auth::SingleKey::new(
        config.access_key.clone(),
        config.secret_key.clone(),
    ));
    Shared {
        s3: builder.build(),
        counters: CounterSet::default(),
        faults: FaultControl::default(),
        rng: Rng::new(config.faults.seed()),
        fault_rates: config.faults,
        latency: config.latency,
        directory_latency: config.directory_latency,
        limiter: config.rate_limit.map(RateLimiter::new),
        allow_sigv2: config.allow_sigv2,
        request_ids: RequestIds::new(),
        timeouts: config.timeouts,
        open_connections: Default::default(),
        sessions: crate::express::Sessions::new(
            config.access_key.clone(),
            config.secret_key.clone(),
            config.session_ttl,
        ),
    }
}

/// Removes what earlier runs left in the root (see `storage::cleanup`).
async fn reclaim(config: &ServerConfig) -> std::io::Result<Reclaimed> {
    let root = config.root.clone();
    let expiry = (!config.upload_expiry.is_zero()).then_some(config.upload_expiry);
    tokio::task::spawn_blocking(move || crate::storage::reclaim(&root, expiry))
        .await
        .map_err(std::io::Error::other)?
}

fn log_start(addr: SocketAddr, fd_limit: &FdLimit, max_connections: usize, reclaimed: &Reclaimed) {
    tracing::info!(
        %addr,
        "{}; at most {max_connections} connections at once",
        fd_limit.describe()
    );
    if !reclaimed.is_empty() {
        tracing::info!(%addr, "removed what earlier runs left: {reclaimed}");
    }
}

impl Prepared {
    /// Accepts connections (at most `max_connections` open at once) until `shutdown`, then
    /// drains them; the root's lock is released when it returns.
    async fn accept_loop(self, bandwidth: Option<u64>, shutdown: impl Future<Output = ()>) {
        let Prepared {
            listener,
            shared,
            max_connections,
            lock,
            ..
        } = self;
        let (closing, _) = watch::channel(false);
        let mut connections = JoinSet::new();
        let mut shutdown = std::pin::pin!(shutdown);
        let mut warned: Option<Instant> = None;
        loop {
            tokio::select! {
                accepted = listener.accept(), if connections.len() < max_connections => match accepted {
                    Ok((stream, _)) => {
                        let _ = stream.set_nodelay(true);
                        let conn = Arc::new(ConnState::default());
                        let io = ConnIo::new(stream, Arc::clone(&conn), bandwidth);
                        let service = ConnService { shared: Arc::clone(&shared), conn };
                        connections.spawn(serve_connection(io, service, closing.subscribe()));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                () = &mut shutdown => break,
            }
            shared
                .open_connections
                .store(connections.len(), Ordering::Relaxed);
            if connections.len() >= max_connections
                && warned.is_none_or(|at| at.elapsed() >= CAP_WARNING_INTERVAL)
            {
                warned = Some(Instant::now());
                tracing::warn!(
                    max_connections,
                    "connection limit reached; new connections wait until one closes"
                );
            }
        }
        drop(listener);
        let _ = closing.send(true);
        let drained = async { while connections.join_next().await.is_some() {} };
        if tokio::time::timeout(SHUTDOWN_GRACE, drained).await.is_err() {
            connections.shutdown().await;
        }
        shared.open_connections.store(0, Ordering::Relaxed);
        drop(lock);
        tracing::info!("bucketload s3 server stopped");
    }
}

/// Serves one connection until it ends, its watchdog finds it waited too long for its
/// client, or the server closes (then the request in flight may finish).
async fn serve_connection(io: ConnIo, service: ConnService, mut closing: watch::Receiver<bool>) {
    let activity = Arc::clone(&service.conn.activity);
    let timeouts: Timeouts = service.shared.timeouts;
    let conn = hyper::server::conn::http1::Builder::new()
        // The watchdog below times request heads (hyper's timer would also cut idle
        // keep-alive connections at the header timeout).
        .header_read_timeout(None::<Duration>)
        .serve_connection(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    let watchdog = crate::timeouts::watch(&activity, timeouts);
    let mut watchdog = std::pin::pin!(watchdog);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            return;
        }
        expired = watchdog.as_mut() => {
            tracing::debug!(?expired, "closing a connection that waited too long for its client");
            return;
        }
        _ = closing.wait_for(|c| *c) => conn.as_mut().graceful_shutdown(),
    }
    tokio::select! {
        _ = conn => {}
        _ = watchdog => {}
    }
}

/// A server running on a background task. Dropping it stops the server.
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    config: ServerConfig,
    max_connections: usize,
    reclaimed: Reclaimed,
}

impl RunningServer {
    /// The bound address (with the actual port when port 0 was asked).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The endpoint URL clients use, e.g. `http://127.0.0.1:40123`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Per-operation request counts so far, faulted and refused requests included.
    pub fn counters(&self) -> Counters {
        self.shared.counters.snapshot()
    }

    /// Runtime fault rules of this server.
    pub fn faults(&self) -> FaultControl {
        self.shared.faults.clone()
    }

    /// The configuration the server runs with.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// Most connections open at once: as configured, or derived from the open-file limit.
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.shared.open_connections.load(Ordering::Relaxed)
    }

    /// What the server removed from its root at start: temporary files of writes that never
    /// finished, and expired multipart uploads.
    pub fn reclaimed(&self) -> &Reclaimed {
        &self.reclaimed
    }

    /// Stops accepting, lets requests in flight finish (up to 5 s), and waits for every task.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}
