//! Accept loop, connection tasks and the handle of a running server.
//!
//! Each accepted connection runs on its own task, tracked in a `JoinSet`. Shutdown stops
//! accepting, asks every connection to finish its current request (hyper's graceful
//! shutdown), waits up to [`SHUTDOWN_GRACE`], then aborts what is left, so no task outlives
//! the server.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use s3s::service::S3ServiceBuilder;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::Error;
use crate::config::ServerConfig;
use crate::conn::ConnIo;
use crate::faults::{CounterSet, Counters, FaultControl, RateLimiter, Rng};
use crate::s3::Backend;
use crate::service::{ConnService, ConnState, RequestIds, Shared};
use crate::storage::Storage;

/// How long shutdown waits for requests in flight before closing their connections.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Starts a server on a background task; it stops when the handle is dropped or shut down.
pub async fn start(config: ServerConfig) -> Result<RunningServer, Error> {
    let (listener, shared) = prepare(&config).await?;
    let addr = listener.local_addr().map_err(|source| Error::Bind {
        addr: config.addr,
        source,
    })?;
    let (stop, stopped) = watch::channel(false);
    let bandwidth = config.bandwidth;
    let task = tokio::spawn(accept_loop(
        listener,
        Arc::clone(&shared),
        bandwidth,
        wait_for(stopped),
    ));
    tracing::info!(%addr, "bucketload s3 server started");
    Ok(RunningServer {
        addr,
        shared,
        stop,
        task: Some(task),
        config,
    })
}

/// Runs a server until `shutdown` completes, then stops it gracefully (for `bucketload serve`).
pub async fn serve_forever(
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let (listener, shared) = prepare(&config).await?;
    let addr = listener.local_addr().map_err(|source| Error::Bind {
        addr: config.addr,
        source,
    })?;
    tracing::info!(%addr, %config, "bucketload s3 server listening");
    accept_loop(listener, shared, config.bandwidth, shutdown).await;
    Ok(())
}

async fn wait_for(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}

async fn prepare(config: &ServerConfig) -> Result<(TcpListener, Arc<Shared>), Error> {
    let storage = Storage::open(&config.root, config.fsync).map_err(|source| Error::DataDir {
        path: config.root.clone(),
        source,
    })?;
    let backend = Backend::new(Arc::new(storage), config.min_part_size);
    let mut builder = S3ServiceBuilder::new(backend);
    builder.set_auth(crate::auth::SingleKey::new(
        config.access_key.clone(),
        config.secret_key.clone(),
    ));
    let shared = Shared {
        s3: builder.build(),
        counters: CounterSet::default(),
        faults: FaultControl::default(),
        rng: Rng::new(config.faults.seed()),
        fault_rates: config.faults,
        latency: config.latency,
        limiter: config.rate_limit.map(RateLimiter::new),
        allow_sigv2: config.allow_sigv2,
        request_ids: RequestIds::new(),
    };
    let listener = TcpListener::bind(config.addr)
        .await
        .map_err(|source| Error::Bind {
            addr: config.addr,
            source,
        })?;
    Ok((listener, Arc::new(shared)))
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    bandwidth: Option<u64>,
    shutdown: impl Future<Output = ()>,
) {
    let (closing, _) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
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
    }
    drop(listener);
    let _ = closing.send(true);
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drained).await.is_err() {
        connections.shutdown().await;
    }
    tracing::info!("bucketload s3 server stopped");
}

async fn serve_connection(io: ConnIo, service: ConnService, mut closing: watch::Receiver<bool>) {
    let conn =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            return;
        }
        _ = closing.wait_for(|c| *c) => conn.as_mut().graceful_shutdown(),
    }
    let _ = conn.await;
}

/// A server running on a background task. Dropping it stops the server.
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    config: ServerConfig,
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
