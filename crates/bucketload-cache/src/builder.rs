//! [`CacheBuilder`]: configuration, validation, and opening a cache
//! directory (with crash recovery when no other process has it open).

use std::fs::{self, File, OpenOptions, TryLockError};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use crate::cache::Cache;
use crate::error::{Error, Result};
use crate::evict::Candidates;
use crate::policy::Policy;
use crate::scan::{self, Layout, Sweep};
use crate::state::{RING, SharedState};
use crate::stats::Counters;

/// Smallest capacity accepted: a cache smaller than this holds almost
/// nothing once entries are rounded up to 4 KiB blocks.
const MIN_CAPACITY: u64 = 1 << 20;
/// Default grace period before an unlocked temporary file counts as
/// abandoned: far longer than the instant between a writer creating its
/// file and locking it.
const DEFAULT_TEMP_GRACE: Duration = Duration::from_secs(10);

/// Configures and opens a [`Cache`]. Setters never fail; [`build`](Self::build)
/// validates and reports every problem.
#[derive(Debug, Clone)]
pub struct CacheBuilder {
    dir: PathBuf,
    capacity: u64,
    policy: Policy,
    fsync: bool,
    temp_grace: Duration,
}

impl CacheBuilder {
    /// A cache in `dir` (created if missing) holding at most `capacity`
    /// bytes (`--cache DIR --cache-size 20GiB`). Every process sharing the
    /// directory should give the same capacity.
    pub fn new(dir: impl Into<PathBuf>, capacity: u64) -> Self {
        Self {
            dir: dir.into(),
            capacity,
            policy: Policy::default(),
            fsync: false,
            temp_grace: DEFAULT_TEMP_GRACE,
        }
    }

    /// The eviction policy (default: [`Policy::Resident`] with
    /// `idle_epochs: 1`).
    #[must_use]
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Whether to `fsync` each entry and its directory before it becomes
    /// visible (default: `false`). Without it, a power failure can lose
    /// recent entries or leave damaged ones, which checksums turn into
    /// misses; with it, inserts cost a disk flush each.
    #[must_use]
    pub fn with_fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }

    /// How old an unlocked temporary file must be before another process
    /// removes it as abandoned (default: 10 s).
    #[must_use]
    pub fn with_temp_grace(mut self, grace: Duration) -> Self {
        self.temp_grace = grace;
        self
    }

    /// Validates the configuration, creates the directory if needed and
    /// opens the cache. If no other process has the directory open, the
    /// cache is repaired first: every temporary file is removed and the
    /// accounting is rebuilt from the entries on disk.
    pub fn build(self) -> Result<Cache> {
        self.validate()?;
        let layout = Layout::new(self.dir.clone());
        for dir in [&layout.root, &layout.entries, &layout.tmp] {
            fs::create_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
        }
        for sub in 0..=255u8 {
            let dir = layout.entries.join(format!("{sub:02x}"));
            fs::create_dir_all(&dir).map_err(|e| Error::io("create directory", &dir, e))?;
        }
        let users = open_users(&layout)?;
        let cache = Cache {
            state: SharedState::open(layout.root.join("state"))?,
            layout,
            capacity: self.capacity,
            policy: self.policy,
            fsync: self.fsync,
            temp_grace: self.temp_grace,
            counters: Counters::default(),
            candidates: Mutex::new(Candidates::default()),
            checked: Mutex::default(),
            _users: users.file,
        };
        cache.recover(users.alone)?;
        Ok(cache)
    }

    fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        if self.capacity < MIN_CAPACITY {
            problems.push(format!(
                "cache size {} bytes is below the minimum of 1 MiB; give a larger --cache-size",
                self.capacity
            ));
        }
        if let Policy::Resident { idle_epochs } = self.policy
            && !(1..RING as u32).contains(&idle_epochs)
        {
            problems.push(format!(
                "idle_epochs {idle_epochs} is out of range; give 1 to {}",
                RING - 1
            ));
        }
        if self.dir.as_os_str().is_empty() {
            problems.push("cache directory is empty; give --cache DIR".to_owned());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::InvalidConfig { problems })
        }
    }
}

/// The `users` file, held with a shared lock for the handle's lifetime.
struct Users {
    file: File,
    /// Whether this handle was alone when it opened the cache.
    alone: bool,
}

/// Opens `DIR/users`: an exclusive lock succeeds only if no other handle
/// has the cache open. The lock is then turned into a shared one, which
/// recovering handles wait for.
fn open_users(layout: &Layout) -> Result<Users> {
    let path = layout.root.join("users");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| Error::io("open", &path, e))?;
    let alone = match file.try_lock() {
        Ok(()) => true,
        Err(TryLockError::WouldBlock) => false,
        Err(TryLockError::Error(e)) => return Err(Error::io("lock", &path, e)),
    };
    Ok(Users { file, alone })
}

impl Cache {
    /// Repairs after crashes: alone, removes every temporary file and
    /// rebuilds the accounting; otherwise removes abandoned temporary
    /// files only. Ends holding a shared lock on `users`.
    fn recover(&self, alone: bool) -> Result<()> {
        if alone {
            let locked = self.state.lock()?;
            let sweep = scan::sweep_temp(&self.layout, Sweep::All)
                .map_err(|e| Error::io("clean", &self.layout.tmp, e))?;
            Counters::add(&self.counters.temp_removed, sweep);
            self.rebuild(&locked)?;
        }
        self._users
            .lock_shared()
            .map_err(|e| Error::io("lock", self.layout.root.join("users"), e))?;
        if !alone {
            self.sweep_abandoned()?;
        }
        Ok(())
    }
}
