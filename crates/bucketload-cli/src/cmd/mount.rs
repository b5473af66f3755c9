//! `bucketload mount URI DIR`: the bucket as a file system (FUSE), with the loader's cache.
//!
//! Without `--foreground` the command starts itself again with `--foreground` in a new process
//! group, waits until the mount appears in `/proc/self/mounts`, and returns: the mount then
//! lives until `umount DIR` (or `fusermount3 -u DIR`). In the foreground, SIGINT and SIGTERM
//! unmount cleanly and the command exits 0. Semantics: docs/SEMANTICS.md.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bucketload::loader::CacheBuilder;
use bucketload_cache::Policy;
use bucketload_fuse::{DEFAULT_MAX_THREADS, Fs, MountConfig};
use bucketload_store::Store;
use clap::Args;
use futures::StreamExt;

/// `ECONNABORTED` on Linux: how a FUSE session can end when its connection is aborted.
const ECONNABORTED: i32 = 103;

use crate::args::store::{StoreArgs, parse_size};

/// How long the command waits for the background mount to appear.
const MOUNT_WAIT: Duration = Duration::from_secs(30);
/// How long the watchdog waits, once the mount process is gone, for its dead mount to be
/// unmounted or to report a lost connection.
const WATCHDOG_WAIT: Duration = Duration::from_secs(20);

/// `bucketload mount` arguments; the global `--part-size` sets the upload part size and the
/// largest prefetch GET, `--concurrency` the requests in flight.
#[derive(Debug, Args)]
pub struct MountArgs {
    /// Store URI to mount, e.g. s3://bucket/prefix
    pub uri: String,
    /// Directory to mount it on (must exist)
    pub dir: PathBuf,
    /// Refuse every change with EROFS
    #[arg(long)]
    pub read_only: bool,
    /// Let unlink (rm) delete objects; without it unlink fails with EPERM
    #[arg(long)]
    pub allow_delete: bool,
    /// Let open(O_TRUNC) and rename replace existing objects; without it they fail with EPERM
    #[arg(long)]
    pub allow_overwrite: bool,
    /// Local disk cache of object bytes, the same as the loader's (shared by processes)
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// Cache capacity, e.g. 20GiB [default: 20GiB]
    #[arg(long, value_parser = parse_size, value_name = "SIZE", requires = "cache")]
    pub cache_size: Option<u64>,
    /// How long listings and attributes are trusted: e.g. 1s, 10m, or `indefinite` [default: 1s]
    #[arg(long, value_parser = crate::args::parse_ttl, value_name = "TTL")]
    pub metadata_ttl: Option<Duration>,
    /// FUSE requests served at once
    #[arg(long, default_value_t = DEFAULT_MAX_THREADS, value_name = "N")]
    pub max_threads: usize,
    /// Memory for read-ahead and upload buffers across all open files, e.g. 2GiB [default: 1GiB]
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub memory_limit: Option<u64>,
    /// List with LIST even when the prefix has a dataset manifest
    #[arg(long)]
    pub no_manifest: bool,
    /// Stay in the foreground until unmounted (logs on stderr)
    #[arg(long)]
    pub foreground: bool,
    /// In the background, append logs to this file (default: discarded once mounted)
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
}

/// Runs `mount`: in the foreground, or by starting itself in the background.
pub fn main(store: &StoreArgs, args: MountArgs) -> ExitCode {
    let result = match args.foreground {
        true => foreground(store, &args),
        false => background(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => crate::exit::report(&e),
    }
}

fn check_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    let meta = std::fs::metadata(dir).with_context(|| {
        format!(
            "cannot mount on {}: create the directory first",
            dir.display()
        )
    })?;
    if !meta.is_dir() {
        return Err(bucketload::Error::invalid_input(format!(
            "cannot mount on {}: not a directory",
            dir.display()
        ))
        .into());
    }
    std::fs::canonicalize(dir).with_context(|| format!("cannot resolve {}", dir.display()))
}

/// Whether `dir` is a bucketload mount point now.
pub fn is_mounted(dir: &Path) -> bool {
    let escaped = dir
        .to_string_lossy()
        .replace('\\', "\\134")
        .replace(' ', "\\040")
        .replace('\t', "\\011")
        .replace('\n', "\\012");
    std::fs::read_to_string("/proc/self/mounts").is_ok_and(|mounts| {
        mounts.lines().any(|line| {
            let mut fields = line.split(' ');
            let (_, point, kind) = (fields.next(), fields.next(), fields.next());
            point == Some(escaped.as_str()) && kind.is_some_and(|k| k.ends_with("bucketload"))
        })
    })
}

fn background(args: &MountArgs) -> anyhow::Result<()> {
    let dir = check_dir(&args.dir)?;
    let exe = std::env::current_exe().context("cannot find the bucketload executable")?;
    // Early failures are read back from this file; once mounted it is removed (the process
    // goes on writing to it unseen) unless it is the user's --log-file. Not a pipe: writing to
    // a pipe nobody reads any more would fail.
    let (log_path, keep_log) = match &args.log_file {
        Some(path) => (path.clone(), true),
        None => (
            std::env::temp_dir().join(format!("bucketload-mount-{}.log", std::process::id())),
            false,
        ),
    };
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("cannot open the log file {}", log_path.display()))?;
    let start = log.metadata().map(|m| m.len()).unwrap_or(0);
    let result = spawn_and_wait(&dir, exe, log, &log_path, start);
    if !keep_log {
        let _ = std::fs::remove_file(&log_path);
    }
    result
}

fn spawn_and_wait(
    dir: &Path,
    exe: PathBuf,
    log: std::fs::File,
    log_path: &Path,
    start: u64,
) -> anyhow::Result<()> {
    let mut child = Command::new(exe)
        .args(std::env::args_os().skip(1))
        .arg("--foreground")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        // Its own process group: Ctrl-C in this terminal does not reach the mount.
        .process_group(0)
        .spawn()
        .context("cannot start the mount process")?;
    let deadline = Instant::now() + MOUNT_WAIT;
    while Instant::now() < deadline {
        if is_mounted(dir) {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            let mut log = String::new();
            if let Ok(mut file) = std::fs::File::open(log_path) {
                use std::io::{Seek, SeekFrom};
                let _ = file.seek(SeekFrom::Start(start));
                let _ = file.read_to_string(&mut log);
            }
            // The process's own error report, without the warnings logged before it.
            let log = match log.find("error: ") {
                Some(at) => log[at + "error: ".len()..].trim().to_owned(),
                None => log.trim().to_owned(),
            };
            match log.is_empty() {
                true => bail!("the mount process exited with {status} before mounting"),
                false => bail!("{log}"),
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!(
        "{} was not mounted within {} s; run with --foreground to see why",
        dir.display(),
        MOUNT_WAIT.as_secs()
    )
}

fn mount_config(store: &Store, args: &MountArgs) -> anyhow::Result<MountConfig> {
    let (uid, gid) = bucketload_fuse::fuse::current_owner();
    let mut config = MountConfig::default()
        .with_read_only(args.read_only)
        .with_allow_delete(args.allow_delete)
        .with_allow_overwrite(args.allow_overwrite)
        .with_max_threads(args.max_threads)
        .with_part_size(store.config().part_size())
        .with_manifest(!args.no_manifest)
        .with_owner(uid, gid);
    if let Some(ttl) = args.metadata_ttl {
        config = config.with_metadata_ttl(ttl);
    }
    if let Some(limit) = args.memory_limit {
        config = config.with_memory_limit(limit);
    }
    if let Some(dir) = &args.cache {
        let size = args
            .cache_size
            .unwrap_or(bucketload_cache::DEFAULT_CAPACITY);
        // No epochs here: least recently used is the policy that fits a file system.
        let cache = CacheBuilder::new(dir, size)
            .with_policy(Policy::Lru)
            .build()
            .with_context(|| format!("cannot open the cache at {}", dir.display()))?;
        config = config.with_cache(Arc::new(cache));
    }
    Ok(config)
}

/// One LIST request, so that a wrong bucket, endpoint or credentials fail now rather than on
/// the first `ls` (keys as stored: a key with `//` in the first page is no error).
async fn check_reachable(store: &Store) -> anyhow::Result<()> {
    match store.list_pages("", false).next().await {
        Some(Err(e)) => Err(e.into()),
        _ => Ok(()),
    }
}

fn foreground(store_args: &StoreArgs, args: &MountArgs) -> anyhow::Result<()> {
    let dir = check_dir(&args.dir)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let store = Store::open(&args.uri, &store_args.config())?;
    let config = mount_config(&store, args)?;
    let fs = runtime.block_on(async {
        check_reachable(&store).await?;
        anyhow::Ok(Fs::new(store, config).await?)
    })?;
    // Listen for SIGINT and SIGTERM before mounting: a signal that arrives once the mount is
    // visible must unmount, not kill the process with the mount still in place.
    let signals = {
        let _runtime = runtime.enter();
        Signals::listen().context("cannot listen for SIGINT and SIGTERM")?
    };
    let uri = fs.store().to_string();
    let mut mounted = bucketload_fuse::fuse::mount(fs, &dir, runtime.handle().clone())
        .with_context(|| {
            format!(
                "cannot mount {uri} on {}: is /dev/fuse there and fusermount3 installed \
                 (Debian package fuse3)?",
                dir.display()
            )
        })?;
    // Held until this process ends, however it ends; the watchdog then unmounts if need be.
    let _watchdog = match bucketload_fuse::fuse::current_owner().0 {
        0 => Some(spawn_watchdog(&dir)?),
        _ => None,
    };
    let mut unmounter = mounted.unmounter();
    let point = dir.clone();
    let asked = Arc::new(AtomicBool::new(false));
    let asked_by_signal = Arc::clone(&asked);
    let signals = runtime.spawn(async move {
        signals.wait().await;
        asked_by_signal.store(true, Ordering::SeqCst);
        tracing::info!("mount: signal received, unmounting");
        if let Err(e) = unmounter.unmount() {
            tracing::warn!(error = %e, "mount: unmount failed");
        }
        // With auto_unmount the session hands the unmount to fusermount3's watcher, which acts
        // only once every copy of its socket is closed; unmount here so that the session ends.
        if is_mounted(&point) {
            let done = tokio::process::Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(&point)
                .status()
                .await;
            if let Err(e) = done {
                tracing::warn!(error = %e, "mount: fusermount3 -u failed");
            }
        }
    });
    tracing::info!(%uri, dir = %dir.display(), "mounted");
    let served = match mounted.run() {
        // Unmounting on a signal can end the session with the connection aborted instead of
        // the device gone (a lazy unmount racing the last read): the end we asked for.
        Err(e) if e.raw_os_error() == Some(ECONNABORTED) && asked.load(Ordering::SeqCst) => {
            tracing::debug!(error = %e, "mount: the session ended with the unmount we asked for");
            Ok(())
        }
        other => other,
    };
    signals.abort();
    runtime.shutdown_timeout(Duration::from_secs(2));
    served.with_context(|| format!("serving {} failed", dir.display()))
}

/// `bucketload mount-watchdog DIR`, which a root mount starts.
#[derive(Debug, Args)]
pub struct WatchdogArgs {
    /// The mount point to look after
    pub dir: PathBuf,
}

/// Starts the watchdog of the mount on `dir`, in its own process group (a Ctrl-C meant for the
/// mount does not reach it); returns the write end of its stdin, which only this process holds:
/// when this process ends, however it ends, the watchdog reads end-of-file.
fn spawn_watchdog(dir: &Path) -> anyhow::Result<std::process::ChildStdin> {
    let exe = std::env::current_exe().context("cannot find the bucketload executable")?;
    let mut child = Command::new(exe)
        .arg("mount-watchdog")
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .context("cannot start the mount's watchdog")?;
    child
        .stdin
        .take()
        .context("the mount's watchdog has no stdin")
}

/// Unmounts `dir` if the mount process (the only writer of this process's stdin) dies and
/// leaves its mount behind.
///
/// As root the mount is `auto_unmount`: `fusermount3` waits for the mount process to close its
/// socket, then unmounts if opening the mount point fails with "transport endpoint is not
/// connected". That check races with the kernel aborting the connection: when `fusermount3`
/// opens the directory before the last `/dev/fuse` descriptor of the killed process is
/// released, the request is aborted instead ("connection aborted") and the dead mount stays
/// (seen under load in `tests/cli_mount.rs`, about one SIGKILL in four). The watchdog makes
/// the same check without the race: it takes either error as the connection's loss, and waits
/// while opening blocks.
pub fn watchdog(args: &WatchdogArgs) -> ExitCode {
    let mut stdin = std::io::stdin().lock();
    let mut sink = [0u8; 64];
    loop {
        match stdin.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let deadline = Instant::now() + WATCHDOG_WAIT;
    while is_mounted(&args.dir) && Instant::now() < deadline {
        // Opening a directory asks the file system (unlike `stat`, which may be cached): on a
        // live mount it succeeds, on a dead one it fails once the kernel has noticed.
        match std::fs::read_dir(&args.dir) {
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotConnected | std::io::ErrorKind::ConnectionAborted
                ) =>
            {
                let _ = Command::new("fusermount3")
                    .arg("-u")
                    .arg("-z")
                    .arg(&args.dir)
                    .status();
                break;
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    ExitCode::SUCCESS
}

/// SIGTERM and SIGINT, listened for from creation on.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Must run inside the runtime.
    fn listen() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn wait(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}
