//! Sorted directory listings for ListObjectsV2, kept between pages.
//!
//! A page of a listing binary-searches the sorted entries of each directory it walks. Reading
//! and sorting a directory costs O(n); doing it for every page of 1,000 keys makes a listing of
//! n keys in one directory cost O(n²). [`DirCache`] keeps the sorted entries of recently
//! listed directories so that a page costs one `stat` of the directory plus its own keys.
//!
//! A cached listing is keyed by the directory's identity (device, inode) and used only while
//! its change time, modification time (both to the nanosecond) and size are the ones seen
//! when it was read: any entry added, removed or renamed changes them. A file system stamps
//! times from a clock that ticks every few milliseconds (or every second on some), so two
//! changes within one tick leave the same times behind. A listing is therefore cached only
//! when the directory's times were already [`SETTLE`] old before it was read and did not
//! change while it was read: any later change gets a later stamp. A directory being written
//! to is read afresh for every page, as before. Directories holding symbolic links (whose
//! targets may change without their directory) are never cached.
//!
//! Entries are packed ([`Sorted`]): the key segments in one string, an end offset and a
//! directory bit per entry, and the on-disk names only where they differ from the segment
//! (escaped and hashed names), about 8 bytes per entry beyond its name. The cache holds at
//! most [`CACHE_BYTES`], dropping the least recently used listings first.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::keys::{self, Decoded};

/// How old a directory's times must be before its listing may be cached: longer than a tick
/// of any file system clock (1 s on the coarsest Linux file systems; 2 s covers a 1-s stamp
/// truncated down, as the margin is compared with a fine clock).
pub(crate) const SETTLE: Duration = Duration::from_secs(2);
/// Bytes the cached listings may hold in all: a directory of 10⁷ keys of ~20 bytes takes
/// about 300 MB packed; larger directories are read for every page.
const CACHE_BYTES: usize = 512 << 20;
/// Set in an entry's packed end offset when it is a directory.
const DIR_BIT: u64 = 1 << 63;

/// The entries of one directory sorted by key segment, with '/' appended to directory names.
#[derive(Debug, Default)]
pub(crate) struct Sorted {
    /// The sort names, one after another.
    names: String,
    /// Per entry: the end of its sort name in `names`, with [`DIR_BIT`] for directories.
    ends: Vec<u64>,
    /// On-disk names that differ from the key segment, by entry index (sorted).
    disk: Vec<(usize, Box<str>)>,
}

impl Sorted {
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// The key segment of entry `i`, with '/' appended for directories.
    pub(crate) fn sort_name(&self, i: usize) -> &str {
        let start = match i {
            0 => 0,
            _ => (self.ends[i - 1] & !DIR_BIT) as usize,
        };
        &self.names[start..(self.ends[i] & !DIR_BIT) as usize]
    }

    pub(crate) fn is_dir(&self, i: usize) -> bool {
        self.ends[i] & DIR_BIT != 0
    }

    /// The name on disk of entry `i`.
    pub(crate) fn name(&self, i: usize) -> &str {
        match self.disk.binary_search_by_key(&i, |(j, _)| *j) {
            Ok(at) => &self.disk[at].1,
            Err(_) => {
                let name = self.sort_name(i);
                match self.is_dir(i) {
                    true => &name[..name.len() - 1],
                    false => name,
                }
            }
        }
    }

    /// The key segment of a directory whose own object (`.bl%self`) it may hold.
    pub(crate) fn own_segment(&self, i: usize) -> Option<&str> {
        let segment = self.sort_name(i).strip_suffix('/')?;
        (self.is_dir(i) && !segment.is_empty()).then_some(segment)
    }

    /// The index of the first entry for which `pred` is false (`pred` holds for a prefix).
    pub(crate) fn partition_point(&self, pred: impl Fn(usize) -> bool) -> usize {
        self.partition_from(0, pred)
    }

    /// [`Sorted::partition_point`] among the entries from `from` on.
    fn partition_from(&self, from: usize, pred: impl Fn(usize) -> bool) -> usize {
        let (mut lo, mut hi) = (from, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match pred(mid) {
                true => lo = mid + 1,
                false => hi = mid,
            }
        }
        lo
    }

    /// The index of the entry whose sort name is `name`, among the entries from `from` on.
    pub(crate) fn find(&self, from: usize, name: &str) -> Option<usize> {
        let at = self.partition_from(from, |i| self.sort_name(i) < name);
        (at < self.len() && self.sort_name(at) == name).then_some(at)
    }

    /// Heap bytes held.
    fn bytes(&self) -> usize {
        self.names.capacity()
            + self.ends.capacity() * 8
            + self.disk.iter().map(|(_, n)| n.len() + 24).sum::<usize>()
    }
}

/// Reads the entries of a directory, sorted by key segment; names that are not UTF-8,
/// internal names and hashed segments whose name cannot be read are skipped. Also says
/// whether the directory holds a symbolic link.
fn read_sorted(dir: &Path) -> std::io::Result<(Sorted, bool)> {
    // (sort name, disk name when it differs, is_dir)
    let mut entries: Vec<(String, Option<Box<str>>, bool)> = Vec::new();
    let mut symlinks = false;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let file_type = entry.file_type()?;
        let is_dir = if file_type.is_symlink() {
            symlinks = true;
            fs::metadata(dir.join(&name))
                .map(|m| m.is_dir())
                .unwrap_or(false)
        } else {
            file_type.is_dir()
        };
        let segment = match keys::decode_name(&name) {
            Decoded::Segment(segment) => segment.into_owned(),
            Decoded::Hashed if is_dir => {
                match fs::read(dir.join(&name).join(keys::NAME)).map(String::from_utf8) {
                    Ok(Ok(segment)) if !segment.contains('/') => segment,
                    _ => continue,
                }
            }
            Decoded::Hashed | Decoded::Internal => continue,
        };
        let disk = (segment != name).then(|| name.into_boxed_str());
        let sort_name = match is_dir {
            true => format!("{segment}/"),
            false => segment,
        };
        entries.push((sort_name, disk, is_dir));
    }
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut sorted = Sorted {
        names: String::with_capacity(entries.iter().map(|e| e.0.len()).sum()),
        ends: Vec::with_capacity(entries.len()),
        disk: Vec::new(),
    };
    for (i, (sort_name, disk, is_dir)) in entries.into_iter().enumerate() {
        sorted.names.push_str(&sort_name);
        let dir_bit = if is_dir { DIR_BIT } else { 0 };
        sorted.ends.push(sorted.names.len() as u64 | dir_bit);
        if let Some(disk) = disk {
            sorted.disk.push((i, disk));
        }
    }
    Ok((sorted, symlinks))
}

/// What identifies a directory and its contents as of one `stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ctime_ns: i128,
    mtime_ns: i128,
    size: u64,
}

impl Stamp {
    fn of(stat: &fs::Metadata) -> Stamp {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Stamp {
            ctime_ns: ns(stat.ctime(), stat.ctime_nsec()),
            mtime_ns: ns(stat.mtime(), stat.mtime_nsec()),
            size: stat.size(),
        }
    }

    /// True if both times are at least [`SETTLE`] before now.
    fn settled(&self) -> bool {
        let Ok(now) = SystemTime::now().duration_since(UNIX_EPOCH) else {
            return false;
        };
        let limit = now.as_nanos() as i128 - SETTLE.as_nanos() as i128;
        self.ctime_ns <= limit && self.mtime_ns <= limit
    }
}

struct Cached {
    stamp: Stamp,
    sorted: Arc<Sorted>,
    bytes: usize,
    used: u64,
}

/// Sorted listings of directories by (device, inode), bounded in bytes.
#[derive(Default)]
pub(crate) struct DirCache {
    inner: Mutex<Inner>,
    /// Listings answered from the cache (for tests and logs).
    hits: AtomicU64,
}

#[derive(Default)]
struct Inner {
    map: HashMap<(u64, u64), Cached>,
    bytes: usize,
    tick: u64,
}

impl std::fmt::Debug for DirCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("DirCache")
            .field("listings", &inner.map.len())
            .field("bytes", &inner.bytes)
            .finish()
    }
}

impl DirCache {
    /// The sorted entries of `dir`: from the cache when the directory has not changed since
    /// they were read, else read now (and kept if the directory has settled).
    pub(crate) fn sorted(&self, dir: &Path) -> std::io::Result<Arc<Sorted>> {
        let before = fs::metadata(dir)?;
        let id = (before.dev(), before.ino());
        let stamp = Stamp::of(&before);
        if let Some(sorted) = self.get(id, stamp) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(sorted);
        }
        let (sorted, symlinks) = read_sorted(dir)?;
        let sorted = Arc::new(sorted);
        if !symlinks && stamp.settled() {
            let after = fs::metadata(dir)?;
            if (after.dev(), after.ino()) == id && Stamp::of(&after) == stamp {
                self.put(id, stamp, Arc::clone(&sorted));
            }
        }
        Ok(sorted)
    }

    /// Listings answered from the cache so far.
    #[cfg(test)]
    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, id: (u64, u64), stamp: Stamp) -> Option<Arc<Sorted>> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let cached = inner.map.get_mut(&id)?;
        if cached.stamp != stamp {
            let bytes = cached.bytes;
            inner.map.remove(&id);
            inner.bytes -= bytes;
            return None;
        }
        cached.used = tick;
        Some(Arc::clone(&cached.sorted))
    }

    fn put(&self, id: (u64, u64), stamp: Stamp, sorted: Arc<Sorted>) {
        // The record's own bytes beside the listing's.
        let bytes = sorted.bytes() + 64;
        if bytes > CACHE_BYTES {
            return;
        }
        let mut inner = self.lock();
        if let Some(old) = inner.map.remove(&id) {
            inner.bytes -= old.bytes;
        }
        while inner.bytes + bytes > CACHE_BYTES {
            let Some((&lru, _)) = inner.map.iter().min_by_key(|(_, c)| c.used) else {
                break;
            };
            if let Some(old) = inner.map.remove(&lru) {
                inner.bytes -= old.bytes;
            }
        }
        inner.tick += 1;
        let used = inner.tick;
        inner.bytes += bytes;
        let cached = Cached {
            stamp,
            sorted,
            bytes,
            used,
        };
        inner.map.insert(id, cached);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_settled_directory_is_read_once() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..2000 {
            fs::write(dir.path().join(format!("s{i:08}.jpg")), b"x").unwrap();
        }
        std::thread::sleep(SETTLE + Duration::from_millis(50));
        let cache = DirCache::default();
        let first = cache.sorted(dir.path()).unwrap();
        let again = cache.sorted(dir.path()).unwrap();
        assert_eq!(cache.hits(), 1, "{cache:?}");
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(first.len(), 2000);
        assert_eq!(first.sort_name(1999), "s00001999.jpg");
        assert_eq!(first.name(5), "s00000005.jpg");
    }
}
