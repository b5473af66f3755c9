//! Making room: eviction candidates and the eviction loop.
//!
//! A process keeps a list of candidates from its last scan of the
//! directory, oldest last use first. Each candidate is checked again
//! (still there, still evictable, not used since the scan) before it is
//! removed, under the exclusive state lock. With [`Policy::Resident`] the
//! set of evictable entries cannot grow within a generation (new entries
//! and hits are newer than its start), so a process scans at most once per
//! generation; with [`Policy::Lru`] it scans again when its list runs out.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::cache::Cache;
use crate::error::{Error, Result};
use crate::policy::{Policy, nanos};
use crate::scan::{self, accounted};
use crate::state::State;
use crate::stats::Counters;

/// Eviction candidates of one process.
#[derive(Debug, Default)]
pub(crate) struct Candidates {
    /// Sorted newest first, so `pop` gives the oldest.
    list: Vec<(u64, PathBuf)>,
    /// The generation of the last scan.
    scanned: Option<u64>,
}

impl Candidates {
    /// Whether a scan now could not find anything new to evict.
    fn exhausted(&self, policy: Policy, state: &State) -> bool {
        self.list.is_empty()
            && matches!(policy, Policy::Resident { .. })
            && self.scanned == Some(state.generation)
    }

    /// Whether a scan now could find more to evict than the list holds.
    fn outdated(&self, policy: Policy, state: &State) -> bool {
        match policy {
            Policy::Lru => self.list.is_empty(),
            Policy::Resident { .. } => self.scanned != Some(state.generation),
        }
    }
}

impl Cache {
    /// Whether an insert of `need` accounted bytes would surely be
    /// rejected: full, and nothing evictable. Spares writing its body.
    pub(crate) fn surely_rejected(&self, need: u64, state: &State) -> bool {
        need > self.capacity
            || (state.total + need > self.capacity
                && self.candidates().exhausted(self.policy, state))
    }

    /// Refreshes the candidates before taking the exclusive lock when an
    /// insert of `need` bytes will have to evict, so that other processes
    /// do not wait on the lock during the scan.
    pub(crate) fn prepare_room(&self, need: u64, state: &State) -> Result<()> {
        if state.total + need > self.capacity && self.candidates().outdated(self.policy, state) {
            self.rescan(state)?;
        }
        Ok(())
    }

    /// Evicts until `need` more bytes fit, never evicting `keep`. Returns
    /// whether they fit. The caller holds the state lock and writes
    /// `state` afterwards; files are removed before the total drops, so the
    /// files on disk never exceed the recorded total.
    pub(crate) fn make_room(&self, state: &mut State, need: u64, keep: &Path) -> Result<bool> {
        let mut scanned = false;
        while state.total + need > self.capacity {
            let next = self.candidates().list.pop();
            let Some((used, path)) = next else {
                if scanned || self.candidates().exhausted(self.policy, state) {
                    return Ok(false);
                }
                self.rescan(state)?;
                scanned = true;
                continue;
            };
            if path != keep {
                self.evict(state, used, &path)?;
            }
        }
        Ok(true)
    }

    fn candidates(&self) -> std::sync::MutexGuard<'_, Candidates> {
        // The list is only a hint: if a thread panicked while holding it,
        // every entry in it is checked again before use anyway.
        self.candidates.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Removes the entry at `path` if it is still evictable and unused
    /// since it was listed (`used`).
    fn evict(&self, state: &mut State, used: u64, path: &Path) -> Result<()> {
        let meta = match fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io("stat", path, e)),
        };
        let mtime = meta.modified().map_err(|e| Error::io("stat", path, e))?;
        if nanos(mtime) != used || !self.policy.evictable(mtime, state) {
            return Ok(());
        }
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io("evict", path, e)),
        }
        state.total = state.total.saturating_sub(accounted(meta.len()));
        state.entries = state.entries.saturating_sub(1);
        Counters::add(&self.counters.evictions, 1);
        tracing::trace!(path = %path.display(), "cache entry evicted");
        Ok(())
    }

    /// Lists the evictable entries afresh, and removes abandoned
    /// temporary files on the way.
    ///
    /// Works with or without the state lock: every candidate is checked
    /// again under the lock before it is removed.
    fn rescan(&self, state: &State) -> Result<()> {
        let found =
            scan::entries(&self.layout).map_err(|e| Error::io("scan", &self.layout.entries, e))?;
        let mut list: Vec<(u64, PathBuf)> = found
            .into_iter()
            .filter(|f| self.policy.evictable(f.mtime, state))
            .map(|f| (nanos(f.mtime), f.path))
            .collect();
        list.sort_unstable_by(|a, b| b.cmp(a));
        tracing::debug!(
            candidates = list.len(),
            generation = state.generation,
            "cache scanned for eviction"
        );
        let mut c = self.candidates();
        c.list = list;
        c.scanned = Some(state.generation);
        drop(c);
        self.sweep_abandoned()
    }
}
