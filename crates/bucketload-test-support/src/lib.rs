//! Test fixtures shared by bucketload's crates.
//!
//! - [`EmbeddedServer`]: the in-process bucketload S3 server on a temporary
//!   directory and a free loopback port, with a ready [`StoreConfig`] and
//!   access to its request counters and fault rules.
//! - [`MotoServer`]: moto's independent S3 implementation, spawned from the
//!   workspace virtualenv (`scripts/test.sh` installs it); killed on drop.
//! - [`SeaweedServer`]: SeaweedFS's S3 gateway (`weed server -s3`), a second
//!   independent implementation that checks signatures against an identity
//!   file; one per test binary ([`SeaweedServer::shared`]).
//! - [`Backend`]: `Mem`, `File`, `Embedded`, `Moto`, `Seaweed`, so a test body is
//!   written once and run on each; [`Backend::setup`] returns a fresh bucket
//!   or directory as a [`Fixture`].
//!
//! - [`on_every_backend!`]: one test per backend from one test body.
//! - [`venv_python`], [`venv_bin`]: the workspace virtualenv's tools.
//! - [`pattern`]: deterministic test bytes; [`get_whole`]: one object's bytes, by one GET.
//!
//! Fixtures panic with a message saying what to do when they cannot start:
//! a test that cannot reach its backend or tool must fail, never skip.

use bucketload_server::{
    Counters, DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY, FaultControl, RunningServer, ServerBuilder,
    ServerConfig,
};
use bucketload_store::{Addressing, Store, StoreConfig};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tempfile::TempDir;

mod backends;
mod data;
mod seaweed;
mod venv;
pub use data::{get_whole, pattern};
pub use seaweed::{SEAWEED_COLLEAGUE, SEAWEED_OWNER, SEAWEED_WRITER, SeaweedServer};
pub use venv::{SETUP_HINT, run_python, venv, venv_bin, venv_python};

/// A bucket name no other test of any process uses: `bl-<pid>-<n>-<nanos>`.
pub fn unique_bucket() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("bl-{}-{n}-{nanos}", std::process::id())
}

/// A [`StoreConfig`] for an S3 server at `endpoint` with these credentials,
/// independent of the host's AWS environment.
pub fn s3_config(endpoint: &str, key: &str, secret: &str) -> StoreConfig {
    StoreConfig::default()
        .with_endpoint(endpoint)
        .with_region("us-east-1")
        .with_credentials(key, secret, None)
        .with_addressing(Addressing::Path)
}

/// Creates `bucket` on the S3 server `config` points at.
pub async fn create_bucket(config: &StoreConfig, bucket: &str) {
    let store = Store::open(&format!("s3://{bucket}"), config)
        .unwrap_or_else(|e| panic!("cannot open s3://{bucket}: {e}"));
    store
        .create_bucket()
        .await
        .unwrap_or_else(|e| panic!("cannot create bucket {bucket} at {store}: {e}"));
}

/// The in-process bucketload S3 server on a temporary directory.
#[derive(Debug)]
pub struct EmbeddedServer {
    server: Option<RunningServer>,
    endpoint: String,
    _root: TempDir,
}

impl EmbeddedServer {
    /// Starts a server with default settings (dev credentials, port 0).
    pub async fn start() -> EmbeddedServer {
        EmbeddedServer::start_with(|b| b).await
    }

    /// Starts a server after `configure` adjusted its builder (latency,
    /// faults, minimum part size, ...).
    pub async fn start_with(
        configure: impl FnOnce(ServerBuilder) -> ServerBuilder,
    ) -> EmbeddedServer {
        let root = tempfile::tempdir().expect("a temporary directory for the embedded server");
        let config: ServerConfig = configure(ServerConfig::builder(root.path()))
            .build()
            .unwrap_or_else(|e| panic!("invalid embedded server configuration: {e}"));
        let server = bucketload_server::start(config)
            .await
            .unwrap_or_else(|e| panic!("cannot start the embedded S3 server: {e}"));
        let endpoint = server.endpoint();
        EmbeddedServer {
            server: Some(server),
            endpoint,
            _root: root,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A config with the endpoint and dev credentials, path-style.
    pub fn store_config(&self) -> StoreConfig {
        s3_config(&self.endpoint, DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY)
    }

    /// The running server.
    pub fn server(&self) -> &RunningServer {
        self.server
            .as_ref()
            .expect("the server lives until EmbeddedServer is dropped")
    }

    /// Per-operation request counts so far.
    pub fn counters(&self) -> Counters {
        self.server().counters()
    }

    /// Runtime fault rules.
    pub fn faults(&self) -> FaultControl {
        self.server().faults()
    }

    /// Creates a fresh bucket and returns its name.
    pub async fn bucket(&self) -> String {
        let bucket = unique_bucket();
        create_bucket(&self.store_config(), &bucket).await;
        bucket
    }
}

/// moto's S3 server in a child process, killed on drop.
#[derive(Debug)]
pub struct MotoServer {
    child: Child,
    endpoint: String,
}

/// How long moto may take to answer after spawning (it imports a lot of Python).
const MOTO_START_TIMEOUT: Duration = Duration::from_secs(60);

impl MotoServer {
    /// Spawns `$BUCKETLOAD_MOTO_SERVER` or `bin/moto_server` of the [`venv`]
    /// on a free loopback port and waits until it accepts connections.
    pub fn start() -> MotoServer {
        MotoServer::start_binary(&moto_binary())
    }

    fn start_binary(binary: &std::path::Path) -> MotoServer {
        if !binary.exists() {
            panic!(
                "moto_server not found at {}; run `scripts/test.sh` (it creates .venv with moto[server]) \
                 or set BUCKETLOAD_MOTO_SERVER",
                binary.display()
            );
        }
        let port = free_port();
        let child = Command::new(binary)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", binary.display()));
        let mut server = MotoServer {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        server.wait_ready(port);
        server
    }

    fn wait_ready(&mut self, port: u16) {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + MOTO_START_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("moto_server exited with {status} before answering on port {port}");
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("moto_server did not answer on {addr} within {MOTO_START_TIMEOUT:?}");
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A config with the endpoint and moto's test credentials, path-style.
    pub fn store_config(&self) -> StoreConfig {
        s3_config(&self.endpoint, "testing", "testing")
    }

    /// Creates a fresh bucket and returns its name.
    pub async fn bucket(&self) -> String {
        let bucket = unique_bucket();
        create_bucket(&self.store_config(), &bucket).await;
        bucket
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn moto_binary() -> PathBuf {
    match std::env::var_os("BUCKETLOAD_MOTO_SERVER") {
        Some(p) => PathBuf::from(p),
        None => venv().join("bin/moto_server"),
    }
}

/// The workspace root: two levels above this crate's manifest.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    listener
        .local_addr()
        .expect("a bound listener has an address")
        .port()
}

/// A backend a store test can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A fresh named `mem://` store.
    Mem,
    /// A fresh temporary directory.
    File,
    /// A fresh bucket on an [`EmbeddedServer`].
    Embedded,
    /// A fresh bucket on a [`MotoServer`].
    Moto,
    /// A fresh bucket on the test binary's shared [`SeaweedServer`].
    Seaweed,
}

/// What keeps a [`Fixture`]'s backend alive.
#[derive(Debug)]
enum Guard {
    None,
    Dir(TempDir),
    Embedded(Box<EmbeddedServer>),
    Moto(MotoServer),
    Seaweed(&'static SeaweedServer),
}

/// An opened store on a fresh bucket or directory; dropping it stops the
/// server or removes the directory.
#[derive(Debug)]
pub struct Fixture {
    /// The backend kind.
    pub backend: Backend,
    /// URI of the fresh bucket or directory.
    pub uri: String,
    /// Config used to open `store` (reuse it to open more stores).
    pub config: StoreConfig,
    /// The store on `uri`.
    pub store: Store,
    guard: Guard,
}

impl Fixture {
    /// The embedded server, for `Backend::Embedded`.
    pub fn embedded(&self) -> Option<&EmbeddedServer> {
        match &self.guard {
            Guard::Embedded(s) => Some(s),
            _ => None,
        }
    }

    /// The moto server, for `Backend::Moto`.
    pub fn moto(&self) -> Option<&MotoServer> {
        match &self.guard {
            Guard::Moto(s) => Some(s),
            _ => None,
        }
    }

    /// The SeaweedFS server, for `Backend::Seaweed`.
    pub fn seaweed(&self) -> Option<&SeaweedServer> {
        match &self.guard {
            Guard::Seaweed(s) => Some(s),
            _ => None,
        }
    }

    /// The directory, for `Backend::File`.
    pub fn dir(&self) -> Option<&std::path::Path> {
        match &self.guard {
            Guard::Dir(d) => Some(d.path()),
            _ => None,
        }
    }

    /// True for the S3 backends (embedded, moto and SeaweedFS).
    pub fn is_s3(&self) -> bool {
        matches!(
            self.backend,
            Backend::Embedded | Backend::Moto | Backend::Seaweed
        )
    }

    /// Opens another store on `uri` + `/` + `suffix` with the same config.
    pub fn open(&self, suffix: &str) -> Store {
        let uri = format!("{}/{}", self.uri, suffix.trim_start_matches('/'));
        Store::open(&uri, &self.config).unwrap_or_else(|e| panic!("cannot open {uri}: {e}"))
    }
}

impl Backend {
    /// Every backend.
    pub const ALL: [Backend; 5] = [
        Backend::Mem,
        Backend::File,
        Backend::Embedded,
        Backend::Moto,
        Backend::Seaweed,
    ];

    /// Sets up a fresh, empty store on this backend.
    pub async fn setup(self) -> Fixture {
        self.setup_with(|b| b).await
    }

    /// Like [`Backend::setup`], adjusting the embedded server's builder
    /// (ignored by other backends).
    pub async fn setup_with(
        self,
        configure: impl FnOnce(ServerBuilder) -> ServerBuilder,
    ) -> Fixture {
        let (uri, config, guard) = match self {
            Backend::Mem => (
                format!("mem://{}", unique_bucket()),
                StoreConfig::default(),
                Guard::None,
            ),
            Backend::File => {
                let dir = tempfile::tempdir().expect("a temporary directory");
                let uri = format!("file://{}", dir.path().display());
                (uri, StoreConfig::default(), Guard::Dir(dir))
            }
            Backend::Embedded => {
                let server = EmbeddedServer::start_with(configure).await;
                let uri = format!("s3://{}", server.bucket().await);
                (
                    uri,
                    server.store_config(),
                    Guard::Embedded(Box::new(server)),
                )
            }
            Backend::Moto => {
                let server = MotoServer::start();
                let uri = format!("s3://{}", server.bucket().await);
                (uri, server.store_config(), Guard::Moto(server))
            }
            Backend::Seaweed => {
                let server = SeaweedServer::shared();
                let uri = format!("s3://{}", server.bucket().await);
                (uri, server.store_config(), Guard::Seaweed(server))
            }
        };
        let store = Store::open(&uri, &config).unwrap_or_else(|e| panic!("cannot open {uri}: {e}"));
        Fixture {
            backend: self,
            uri,
            config,
            store,
            guard,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names_are_valid_and_unique() {
        let a = unique_bucket();
        let b = unique_bucket();
        assert_ne!(a, b);
        for name in [a, b] {
            assert!((3..=63).contains(&name.len()), "{name}");
            let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
            assert!(name.chars().all(allowed), "{name}");
        }
    }

    #[test]
    #[should_panic(expected = "run `scripts/test.sh`")]
    fn missing_moto_fails_with_instructions() {
        MotoServer::start_binary(std::path::Path::new("/nonexistent/moto_server"));
    }

    #[tokio::test]
    async fn embedded_server_serves_a_fresh_bucket() {
        let server = EmbeddedServer::start().await;
        let bucket = server.bucket().await;
        let store = Store::open(&format!("s3://{bucket}"), &server.store_config()).unwrap();
        let listed = store
            .object_store()
            .list_with_delimiter(None)
            .await
            .unwrap();
        assert!(listed.objects.is_empty());
        assert_eq!(server.counters().get("CreateBucket"), 1);
    }
}
