//! Shared fixture of the CLI tests: an embedded S3 server on loopback and a runner for the
//! built `bucketload` binary with a clean AWS environment pointing at it.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use bucketload_server::{DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY, RunningServer};
use bucketload_test_support::EmbeddedServer;

/// A running embedded server and a scratch folder; dropping it stops the server.
pub struct Fixture {
    server: Option<EmbeddedServer>,
    runtime: tokio::runtime::Runtime,
    work: tempfile::TempDir,
}

impl Fixture {
    pub fn start() -> Fixture {
        Fixture::start_with(|b| b)
    }

    /// A fixture whose server `configure` adjusted (latency, faults, ...).
    pub fn start_with(
        configure: impl FnOnce(bucketload_server::ServerBuilder) -> bucketload_server::ServerBuilder,
    ) -> Fixture {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let server = runtime.block_on(EmbeddedServer::start_with(configure));
        Fixture {
            server: Some(server),
            runtime,
            work: tempfile::tempdir().unwrap(),
        }
    }

    pub fn endpoint(&self) -> String {
        self.server.as_ref().unwrap().endpoint().to_string()
    }

    pub fn server(&self) -> &RunningServer {
        self.server.as_ref().unwrap().server()
    }

    /// A scratch folder for local files.
    pub fn work(&self) -> &Path {
        self.work.path()
    }

    pub fn work_path(&self, name: &str) -> PathBuf {
        self.work.path().join(name)
    }

    /// The binary with the dev credentials and the endpoint in the environment, nothing else.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bucketload"));
        for (key, _) in std::env::vars() {
            if key.starts_with("AWS_") || key == "RUST_LOG" {
                cmd.env_remove(key);
            }
        }
        cmd.env("HOME", self.work.path())
            .env("AWS_ENDPOINT_URL", self.endpoint())
            .env("AWS_ACCESS_KEY_ID", DEFAULT_ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", DEFAULT_SECRET_KEY)
            .env("AWS_REGION", "us-east-1")
            .current_dir(self.work.path());
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Run {
        Run::from(self.command().args(args).output().unwrap())
    }

    /// `bucketload gen URI --samples N --classes K --size SIZE`, which must succeed.
    #[allow(dead_code)] // not every test binary generates a dataset
    pub fn generate(&self, uri: &str, samples: u32, classes: u32, size: &str) -> Run {
        let (samples, classes) = (samples.to_string(), classes.to_string());
        let args = [
            "gen",
            uri,
            "--samples",
            &samples,
            "--classes",
            &classes,
            "--size",
            size,
        ];
        self.run(&args).ok()
    }

    /// The store at `uri` on the embedded server, with the dev credentials; its bucket is
    /// created if needed.
    pub fn store(&self, uri: &str) -> bucketload_store::Store {
        let config = bucketload_test_support::s3_config(
            &self.endpoint(),
            DEFAULT_ACCESS_KEY,
            DEFAULT_SECRET_KEY,
        );
        let store = bucketload_store::Store::open(uri, &config).unwrap();
        self.block_on(store.create_bucket()).unwrap();
        store
    }

    /// Runs an async block on the fixture's runtime (for checks through the store crate).
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // The server's tasks run on this runtime: drop the server inside it.
        let server = self.server.take();
        self.runtime.block_on(async move { drop(server) });
    }
}

/// What a run of the binary did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Run {
    /// Panics with the output unless the run succeeded.
    pub fn ok(self) -> Run {
        assert_eq!(self.code, 0, "failed: {self:#?}");
        self
    }

    /// The first line of stderr, which must be `error: ...`.
    pub fn error_line(&self) -> &str {
        let line = self.stderr.lines().next().unwrap_or("");
        assert!(line.starts_with("error: "), "no error line: {self:#?}");
        assert!(!self.stderr.contains("panicked"), "panic: {self:#?}");
        assert!(
            !self.stderr.contains("RUST_BACKTRACE"),
            "backtrace hint: {self:#?}"
        );
        line
    }
}

/// PUTs `data` at `key` of `store`, which must succeed.
pub fn put(fx: &Fixture, store: &bucketload_store::Store, key: &str, data: &[u8]) {
    use bucketload_store::object_store::{ObjectStoreExt, PutPayload, path::Path as Key};
    let payload = PutPayload::from(data.to_vec());
    fx.block_on(store.object_store().put(&Key::from(key), payload))
        .unwrap_or_else(|e| panic!("PUT {key}: {e}"));
}

/// The bytes of `key` in `store`, or `None` when there is no such object.
pub fn try_get(fx: &Fixture, store: &bucketload_store::Store, key: &str) -> Option<Vec<u8>> {
    use bucketload_store::object_store::{Error, ObjectStoreExt, path::Path as Key};
    let os = store.object_store();
    let result = fx.block_on(async { os.get(&Key::from(key)).await?.bytes().await });
    match result {
        Ok(bytes) => Some(bytes.to_vec()),
        Err(Error::NotFound { .. }) => None,
        Err(e) => panic!("GET {key}: {e}"),
    }
}

/// The bytes of `key` in `store`, which must exist.
pub fn get(fx: &Fixture, store: &bucketload_store::Store, key: &str) -> Vec<u8> {
    try_get(fx, store, key).unwrap_or_else(|| panic!("{key} is not in {store}"))
}

/// The stdout of a `--json` run, parsed.
pub fn json(run: &Run) -> serde_json::Value {
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {run:#?}"))
}

/// Writes `out` with Python's `tarfile` (the workspace virtualenv's), holding `dir/<name>` as
/// `<name>` for each name, in order.
pub fn python_tar(dir: &Path, out: &Path, names: &[impl AsRef<std::ffi::OsStr>]) {
    let script = "import sys, tarfile\n\
                  with tarfile.open(sys.argv[1], 'w') as t:\n    \
                      for n in sys.argv[3:]: t.add(sys.argv[2] + '/' + n, arcname=n)\n";
    let status = Command::new(bucketload_test_support::venv_python())
        .arg("-c")
        .arg(script)
        .arg(out)
        .arg(dir)
        .args(names)
        .status()
        .unwrap();
    assert!(status.success(), "python tarfile failed");
}

/// Polls `done` every 10 ms until it holds; panics naming `what` after 30 s.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A free port on loopback (bound and released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `bucketload serve` as a process of its own on `port` over `root` (with `extra` flags),
/// killed on drop; for tests that kill and restart the server.
pub struct ServeProcess(std::process::Child);

impl ServeProcess {
    pub fn start(root: &Path, port: u16, extra: &[&str]) -> ServeProcess {
        let child = Command::new(env!("CARGO_BIN_EXE_bucketload"))
            .args(["serve", "--root", root.to_str().unwrap()])
            .args(["--addr", &format!("127.0.0.1:{port}")])
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        wait_until("the server listens", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        ServeProcess(child)
    }

    pub fn kill(&mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
