//! The cache directory's layout, and walks over it: the entries (for
//! accounting and eviction candidates) and the temporary files (for
//! cleaning up after crashed writers).
//!
//! ```text
//! DIR/state          shared accounting and epoch clock (flock)
//! DIR/users          held with a shared flock by every open handle
//! DIR/entries/ab/ab…  one file per entry, named by the key's hash
//! DIR/tmp/*.tmp      entries being written, flock-ed by their writer
//! ```

use std::fs::{self, File, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Entry files are accounted in blocks of this size: file systems allocate
/// whole blocks, so a 100 KB entry occupies 25 blocks of 4 KiB on disk.
pub const BLOCK: u64 = 4096;

/// Bytes an entry file of `len` bytes counts against the capacity.
pub(crate) fn accounted(len: u64) -> u64 {
    len.div_ceil(BLOCK).max(1) * BLOCK
}

/// Paths inside one cache directory.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub root: PathBuf,
    pub entries: PathBuf,
    pub tmp: PathBuf,
}

impl Layout {
    pub fn new(root: PathBuf) -> Self {
        Self {
            entries: root.join("entries"),
            tmp: root.join("tmp"),
            root,
        }
    }

    /// Where the entry named `name` (32 hex digits) lives.
    pub fn entry(&self, name: &str) -> PathBuf {
        self.entries.join(&name[..2]).join(name)
    }
}

/// An entry file seen by a scan.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub path: PathBuf,
    pub len: u64,
    /// Last use (the entry's modification time).
    pub mtime: SystemTime,
}

/// Every entry file under `entries/`. Files that vanish during the walk
/// (evicted by another process) are skipped.
pub(crate) fn entries(layout: &Layout) -> io::Result<Vec<Found>> {
    let mut found = Vec::new();
    for sub in read_dir_or_empty(&layout.entries)? {
        let sub = sub?;
        if !sub.file_type()?.is_dir() {
            continue;
        }
        for e in read_dir_or_empty(&sub.path())? {
            let e = e?;
            let meta = match e.metadata() {
                Ok(m) if m.is_file() => m,
                Ok(_) => continue,
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => return Err(err),
            };
            found.push(Found {
                path: e.path(),
                len: meta.len(),
                mtime: meta.modified()?,
            });
        }
    }
    Ok(found)
}

fn read_dir_or_empty(dir: &Path) -> io::Result<Box<dyn Iterator<Item = io::Result<fs::DirEntry>>>> {
    match fs::read_dir(dir) {
        Ok(rd) => Ok(Box::new(rd)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Box::new(std::iter::empty())),
        Err(e) => Err(e),
    }
}

/// Which temporary files to remove.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Sweep {
    /// Every one: no other process has the cache open.
    All,
    /// Those whose writer is gone: not locked, and older than the grace
    /// period (a writer creates its file, then locks it; the grace covers
    /// that instant).
    Abandoned { grace: Duration },
}

/// Removes temporary files per `sweep`; returns how many were removed.
pub(crate) fn sweep_temp(layout: &Layout, sweep: Sweep) -> io::Result<u64> {
    let mut removed = 0;
    for e in read_dir_or_empty(&layout.tmp)? {
        let path = e?.path();
        if matches!(sweep, Sweep::All) || abandoned(&path, sweep)? {
            match fs::remove_file(&path) {
                Ok(()) => removed += 1,
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => return Err(err),
            }
        }
    }
    Ok(removed)
}

fn abandoned(path: &Path, sweep: Sweep) -> io::Result<bool> {
    let Sweep::Abandoned { grace } = sweep else {
        return Ok(true);
    };
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let age = file.metadata()?.modified()?.elapsed().unwrap_or_default();
    if age < grace {
        return Ok(false);
    }
    match file.try_lock() {
        Ok(()) => Ok(true),
        Err(TryLockError::WouldBlock) => Ok(false),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounting_rounds_up_to_blocks() {
        assert_eq!(accounted(0), BLOCK);
        assert_eq!(accounted(1), BLOCK);
        assert_eq!(accounted(BLOCK), BLOCK);
        assert_eq!(accounted(BLOCK + 1), 2 * BLOCK);
    }

    #[test]
    fn sweep_spares_locked_and_young_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = Layout::new(dir.path().to_path_buf());
        fs::create_dir_all(&layout.tmp).expect("mkdir");
        let locked = File::create(layout.tmp.join("a.tmp")).expect("create");
        locked.lock().expect("lock");
        File::create(layout.tmp.join("b.tmp")).expect("create");
        let young = Sweep::Abandoned {
            grace: Duration::from_secs(3600),
        };
        assert_eq!(sweep_temp(&layout, young).expect("sweep"), 0);
        let old = Sweep::Abandoned {
            grace: Duration::ZERO,
        };
        assert_eq!(sweep_temp(&layout, old).expect("sweep"), 1);
        assert!(layout.tmp.join("a.tmp").exists());
        assert_eq!(sweep_temp(&layout, Sweep::All).expect("sweep"), 1);
        assert!(entries(&layout).expect("scan").is_empty());
    }
}
