//! [`Cache`]: lookups, inserts and the epoch clock.
//!
//! A lookup reads the whole entry file with plain reads, checks its header,
//! key, object version and body checksum, and hands out the body as
//! [`Bytes`] without copying. An insert writes a locked temporary file and
//! renames it into place under the exclusive state lock, after counting it
//! and making room; an entry is therefore either absent or complete.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::entry::{self, Damage};
use crate::error::{Error, Result};
use crate::evict::Candidates;
use crate::key::{CacheKey, ObjectVersion};
use crate::policy::{Policy, nanos};
use crate::scan::{self, Layout, Sweep, accounted};
use crate::state::{Locked, SharedState, State};
use crate::stats::{CacheStats, Counters};

/// A local disk cache of object bytes, shared safely by every process and
/// thread that opens the same directory. Open one with
/// [`CacheBuilder`](crate::CacheBuilder); share it with an `Arc`. Every
/// method does blocking file I/O: from async code, call it inside
/// `tokio::task::spawn_blocking`.
#[derive(Debug)]
pub struct Cache {
    pub(crate) layout: Layout,
    pub(crate) state: SharedState,
    pub(crate) capacity: u64,
    pub(crate) policy: Policy,
    pub(crate) fsync: bool,
    pub(crate) temp_grace: Duration,
    pub(crate) counters: Counters,
    pub(crate) candidates: Mutex<Candidates>,
    /// Held with a shared `flock` while this handle is open.
    pub(crate) _users: File,
    /// Entry files checked or written by this handle, as they were (see [`Identity`]).
    pub(crate) checked: Mutex<std::collections::HashMap<PathBuf, Identity>>,
}

/// The outcome of [`Cache::get`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lookup {
    /// The cached body, checked against its checksum and the version asked.
    Hit(Bytes),
    /// Nothing served; read the object from the store.
    Miss(Miss),
}

impl Lookup {
    /// The body on a hit.
    pub fn hit(self) -> Option<Bytes> {
        match self {
            Self::Hit(b) => Some(b),
            Self::Miss(_) => None,
        }
    }
}

/// Why a lookup missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Miss {
    /// No entry.
    Absent,
    /// The entry held another version of the object; it was removed.
    Stale,
    /// The entry was damaged (checksum, truncation); it was removed.
    Corrupt,
}

/// The outcome of [`Cache::insert`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Inserted {
    /// The entry is stored and visible to every process.
    Stored,
    /// The entry was not stored, by design rather than by failure.
    Rejected(Rejection),
}

/// Why an insert was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// The cache is full and the policy found no entry it may evict.
    Full,
    /// The entry alone is larger than the cache.
    TooLarge,
}

/// Distinguishes temporary files of one process.
static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

impl Cache {
    /// Looks up the bytes of `key`, expecting `version` of the object.
    ///
    /// A damaged entry or one from another version is removed and reported
    /// as a miss, never served. An error means the cache directory itself
    /// failed (permissions, I/O); the object is still in the store.
    ///
    /// The body's CRC32C is checked on the entry's first hit in this handle; later hits of the
    /// same file, unchanged (same inode, size and modification time), and hits of an entry this
    /// handle wrote itself check the header only (see [`Identity`]).
    pub fn get(&self, key: &CacheKey, version: &ObjectVersion) -> Result<Lookup> {
        let path = self.layout.entry(&key.file_name());
        let Some((file, buf, meta)) = read_entry(&path)? else {
            return Ok(self.miss(Miss::Absent));
        };
        let buf = buf.into_bytes();
        let known = self.checked_before(&path, Identity::of(&meta));
        let decoded = match known {
            true => entry::decode_known(&buf),
            false => entry::decode(&buf),
        };
        let header = match decoded {
            Ok(h) => h,
            Err(Damage(why)) => {
                tracing::warn!(%key, path = %path.display(), why, "corrupt cache entry removed");
                self.discard(&path, &file);
                return Ok(self.miss(Miss::Corrupt));
            }
        };
        if !header.is_for(key) || !header.version.serves(version, header.body_crc) {
            tracing::debug!(%key, cached = ?header.version, wanted = ?version, "stale cache entry removed");
            self.discard(&path, &file);
            return Ok(self.miss(Miss::Stale));
        }
        // Remembered when first checked, and again when the touch changed the file's time.
        match self.record_use(&file, &path) {
            Some(touched) => self.note_checked(&path, touched),
            None if !known => self.note_checked(&path, Identity::of(&meta)),
            None => {}
        }
        let body = buf.slice(header.header_len..);
        Counters::add(&self.counters.hits, 1);
        Counters::add(&self.counters.bytes_read, body.len() as u64);
        Ok(Lookup::Hit(body))
    }

    /// Whether the cache surely holds no entry of `key`: one `stat`, cheap enough to call before
    /// handing a [`Cache::get`] to another thread. `true` counts a miss, as [`Cache::get`]
    /// would; `false` (an entry exists, or the `stat` failed) says nothing of the entry.
    pub fn absent(&self, key: &CacheKey) -> bool {
        let path = self.layout.entry(&key.file_name());
        let absent =
            matches!(fs::symlink_metadata(&path), Err(e) if e.kind() == io::ErrorKind::NotFound);
        if absent {
            self.miss(Miss::Absent);
        }
        absent
    }

    /// Stores `body` as the bytes of `key`, from `version` of the object,
    /// replacing any entry of the key. Other processes see either no entry
    /// or the whole of it. When the cache is full, the [`Policy`] decides
    /// whether to evict or to reject the entry.
    pub fn insert(&self, key: &CacheKey, version: &ObjectVersion, body: Bytes) -> Result<Inserted> {
        self.insert_chunks(key, version, &[body])
    }

    /// [`Cache::insert`] of a body that arrived in pieces (a response's chunks): the entry is
    /// written from the pieces, without joining them into one buffer first.
    pub fn insert_chunks(
        &self,
        key: &CacheKey,
        version: &ObjectVersion,
        body: &[Bytes],
    ) -> Result<Inserted> {
        let len: usize = body.iter().map(Bytes::len).sum();
        check_body(key, version, len as u64)?;
        let name = key.file_name();
        let crc = body
            .iter()
            .fold(0, |crc, chunk| crc32c::crc32c_append(crc, chunk));
        let header = entry::encode_header(key, version, len as u64, crc);
        let need = accounted((header.len() + len) as u64);
        let state = self.read_state()?;
        if self.surely_rejected(need, &state) {
            return Ok(self.reject(need));
        }
        self.prepare_room(need, &state)?;
        let temp = self.write_temp(&name, &header, body)?;
        let written = temp.file.metadata().map(|m| Identity::of(&m)).ok();
        let path = self.layout.entry(&name);
        if !self.commit(temp, &path, need)? {
            return Ok(self.reject(need));
        }
        // Renamed, not copied: the entry is the file this handle just wrote.
        if let Some(written) = written {
            self.note_checked(&path, written);
        }
        Counters::add(&self.counters.inserts, 1);
        Counters::add(&self.counters.bytes_written, len as u64);
        Ok(Inserted::Stored)
    }

    /// Removes the entry of `key`, if any; returns whether there was one.
    pub fn remove(&self, key: &CacheKey) -> Result<bool> {
        let path = self.layout.entry(&key.file_name());
        let (locked, mut state) = self.locked()?;
        let removed = self.remove_locked(&mut state, &path, None)?;
        locked.write(&state)?;
        Ok(removed)
    }

    /// Starts epoch `epoch` of `dataset` (its URI) on the shared epoch
    /// clock that [`Policy::Resident`] judges idleness by. Every worker and
    /// rank may call it: naming an epoch already started (or an earlier one)
    /// changes nothing. A later epoch starts one generation; a different
    /// dataset makes every entry cached before it idle at once.
    pub fn begin_epoch(&self, dataset: &str, epoch: u64) -> Result<()> {
        let digest = Sha256::digest(dataset.as_bytes());
        let mut id = [0; 8];
        id.copy_from_slice(&digest[..8]);
        // 0 means "no dataset yet" in the shared state.
        let id = u64::from_le_bytes(id).max(1);
        let (locked, mut state) = self.locked()?;
        if state.begin_epoch(id, epoch, nanos(SystemTime::now())) {
            locked.write(&state)?;
            tracing::debug!(
                dataset,
                epoch,
                generation = state.generation,
                "cache epoch started"
            );
        }
        Ok(())
    }

    /// This handle's counters and the shared size of the cache.
    pub fn stats(&self) -> Result<CacheStats> {
        let state = self.read_state()?;
        Ok(CacheStats {
            size_bytes: state.total,
            entries: state.entries,
            capacity_bytes: self.capacity,
            generation: state.generation,
            ..self.counters.snapshot()
        })
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.layout.root
    }

    /// The capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The eviction policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    fn miss(&self, why: Miss) -> Lookup {
        Counters::add(&self.counters.misses, 1);
        match why {
            Miss::Stale => Counters::add(&self.counters.stale, 1),
            Miss::Corrupt => Counters::add(&self.counters.corrupt, 1),
            Miss::Absent => {}
        }
        Lookup::Miss(why)
    }

    fn reject(&self, need: u64) -> Inserted {
        Counters::add(&self.counters.rejected, 1);
        Inserted::Rejected(if need > self.capacity {
            Rejection::TooLarge
        } else {
            Rejection::Full
        })
    }

    /// Records a hit as a use (the entry's modification time) when the
    /// policy needs it. A failure only makes the entry look older, so it
    /// is logged and the hit served.
    /// Returns the file's identity after a touch (its modification time changed).
    fn record_use(&self, file: &File, path: &Path) -> Option<Identity> {
        let touched = file
            .metadata()
            .and_then(|m| m.modified())
            .map_err(|e| Error::io("stat", path, e));
        let result = touched.and_then(|mtime| {
            if !self.policy.touch_on_hit(mtime, &self.read_state()?) {
                return Ok(None);
            }
            file.set_modified(SystemTime::now())
                .map_err(|e| Error::io("touch", path, e))?;
            let meta = file.metadata().map_err(|e| Error::io("stat", path, e))?;
            Ok(Some(Identity::of(&meta)))
        });
        result.unwrap_or_else(|e| {
            tracing::debug!(error = %e, "cache entry use not recorded");
            None
        })
    }

    /// Whether this handle checked (or wrote) the file at `path` as it is now.
    fn checked_before(&self, path: &Path, now: Identity) -> bool {
        let checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        checked.get(path) == Some(&now)
    }

    /// Records that the file at `path` is whole as it is now.
    fn note_checked(&self, path: &Path, now: Identity) {
        let mut checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        if checked.len() >= CHECKED_MAX && !checked.contains_key(path) {
            checked.clear();
        }
        checked.insert(path.to_path_buf(), now);
    }

    /// The shared state under a shared lock, rebuilt first if damaged.
    pub(crate) fn read_state(&self) -> Result<State> {
        match self.state.read()? {
            Some(s) => Ok(s),
            None => Ok(self.locked()?.1),
        }
    }

    /// The exclusive lock and the state, rebuilt first if damaged.
    pub(crate) fn locked(&self) -> Result<(Locked<'_>, State)> {
        let locked = self.state.lock()?;
        let state = match locked.state.clone() {
            Some(s) => s,
            None => self.rebuild(&locked)?,
        };
        Ok((locked, state))
    }

    /// Recomputes size and entry count from the entries on disk, keeping
    /// the epoch clock. The caller holds the exclusive lock, so no entry
    /// appears or disappears meanwhile.
    pub(crate) fn rebuild(&self, locked: &Locked<'_>) -> Result<State> {
        let found =
            scan::entries(&self.layout).map_err(|e| Error::io("scan", &self.layout.entries, e))?;
        let mut state = locked.state.clone().unwrap_or_default();
        let before = (state.total, state.entries);
        state.total = found.iter().map(|f| accounted(f.len)).sum();
        state.entries = found.len() as u64;
        locked.write(&state)?;
        if before != (state.total, state.entries) {
            tracing::info!(
                dir = %self.layout.root.display(),
                bytes = state.total,
                entries = state.entries,
                "cache accounting rebuilt from the entries on disk"
            );
        }
        Ok(state)
    }

    /// Removes abandoned temporary files of crashed writers.
    pub(crate) fn sweep_abandoned(&self) -> Result<()> {
        let grace = self.temp_grace;
        let n = scan::sweep_temp(&self.layout, Sweep::Abandoned { grace })
            .map_err(|e| Error::io("clean", &self.layout.tmp, e))?;
        if n > 0 {
            tracing::info!(removed = n, "abandoned cache temporary files removed");
        }
        Counters::add(&self.counters.temp_removed, n);
        Ok(())
    }

    /// Removes the entry at `path` if it is still the file `read` (another
    /// process may have replaced it with a good entry since). A failure is
    /// logged: the lookup is a miss either way.
    fn discard(&self, path: &Path, read: &File) {
        let result = read
            .metadata()
            .map_err(|e| Error::io("stat", path, e))
            .and_then(|meta| {
                let (locked, mut state) = self.locked()?;
                if self.remove_locked(&mut state, path, Some((meta.dev(), meta.ino())))? {
                    locked.write(&state)?;
                }
                Ok(())
            });
        if let Err(e) = result {
            tracing::warn!(error = %e, "damaged or stale cache entry not removed");
        }
    }

    /// Removes the entry at `path` (only if it is the inode `only`, when
    /// given) and uncounts it. The caller holds the lock and writes `state`.
    fn remove_locked(
        &self,
        state: &mut State,
        path: &Path,
        only: Option<(u64, u64)>,
    ) -> Result<bool> {
        let meta = match fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(Error::io("stat", path, e)),
        };
        if only.is_some_and(|id| id != (meta.dev(), meta.ino())) {
            return Ok(false);
        }
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(Error::io("remove", path, e)),
        }
        state.total = state.total.saturating_sub(accounted(meta.len()));
        state.entries = state.entries.saturating_sub(1);
        Ok(true)
    }

    /// Writes header and body to a new, locked temporary file.
    fn write_temp(&self, name: &str, header: &[u8], body: &[Bytes]) -> Result<TempFile> {
        let seq = TEMP_SEQ.fetch_add(1, Ordering::Relaxed);
        let path = self
            .layout
            .tmp
            .join(format!("{name}.{}.{seq}.tmp", std::process::id()));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io("create", &path, e))?;
        let temp = TempFile {
            file,
            path,
            armed: true,
        };
        let io = |op, e| Error::io(op, &temp.path, e);
        temp.file.lock().map_err(|e| io("lock", e))?;
        let mut pieces: Vec<IoSlice<'_>> = std::iter::once(header)
            .chain(body.iter().map(|b| &b[..]))
            .map(IoSlice::new)
            .collect();
        write_all_vectored(&temp.file, &mut pieces).map_err(|e| io("write", e))?;
        temp.file
            .set_modified(SystemTime::now())
            .map_err(|e| io("write", e))?;
        if self.fsync {
            temp.file.sync_data().map_err(|e| io("fsync", e))?;
        }
        Ok(temp)
    }

    /// Makes room, counts the entry and renames it into place, all under
    /// the exclusive lock. Returns whether it was stored.
    fn commit(&self, temp: TempFile, path: &Path, need: u64) -> Result<bool> {
        let (locked, mut state) = self.locked()?;
        let old = match fs::metadata(path) {
            Ok(m) => Some(accounted(m.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io("stat", path, e)),
        };
        let fits = self.make_room(&mut state, need, path)?;
        if fits {
            // Counted before it is visible: a crash now over-counts, which
            // the next lone open repairs, and never breaks the bound.
            state.total += need;
            state.entries += 1;
        }
        locked.write(&state)?;
        if !fits {
            return Ok(false);
        }
        if let Err(e) = rename_into(&temp.path, path) {
            state.total -= need;
            state.entries -= 1;
            locked.write(&state)?;
            return Err(Error::io("rename", path, e));
        }
        if self.fsync {
            sync_dir(path.parent().unwrap_or(&self.layout.entries))?;
        }
        if let Some(old) = old {
            state.total = state.total.saturating_sub(old);
            state.entries = state.entries.saturating_sub(1);
            locked.write(&state)?;
        }
        temp.renamed();
        Ok(true)
    }
}

impl fmt::Display for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cache {} ({} bytes)",
            self.layout.root.display(),
            self.capacity
        )
    }
}

/// Opens a whole entry file, read or mapped (see [`mapped`]), with its metadata; `None` if
/// there is none.
fn read_entry(path: &Path) -> Result<Option<(File, EntryBytes, fs::Metadata)>> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open", path, e)),
    };
    let meta = file.metadata().map_err(|e| Error::io("stat", path, e))?;
    let len = meta.len();
    if len >= crate::mapped::MAP_AT_LEAST {
        let map = crate::mapped::map(&file).map_err(|e| Error::io("map", path, e))?;
        return Ok(Some((file, EntryBytes::Mapped(map), meta)));
    }
    let mut buf = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.read_to_end(&mut buf)
        .map_err(|e| Error::io("read", path, e))?;
    Ok(Some((file, EntryBytes::Read(buf), meta)))
}

/// Entries whose check a handle remembers; past it, it forgets them all and checks again.
const CHECKED_MAX: usize = 1 << 20;

/// An entry file as it is: the same inode, size and modification time (to the nanosecond) mean
/// the same bytes, since the cache never writes a file after renaming it into place; a file
/// replaced or rewritten has another identity. A handle remembers the identity of each entry
/// it checked or wrote and skips the body's CRC32C when it meets that identity again: each
/// process checks every entry once (the first hit after it opened the cache), and a crash or
/// a power failure, which is what damages entries, ends the process and with it the memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
}

impl Identity {
    fn of(meta: &fs::Metadata) -> Identity {
        Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
        }
    }
}

/// An entry file's bytes: read into memory, or mapped.
enum EntryBytes {
    Read(Vec<u8>),
    Mapped(memmap2::Mmap),
}

impl std::ops::Deref for EntryBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            EntryBytes::Read(b) => b,
            EntryBytes::Mapped(m) => m,
        }
    }
}

impl EntryBytes {
    /// The bytes, without a copy: a mapping lives as long as the last slice of it.
    fn into_bytes(self) -> Bytes {
        match self {
            EntryBytes::Read(b) => Bytes::from(b),
            EntryBytes::Mapped(m) => Bytes::from_owner(m),
        }
    }
}

/// Writes every piece, in order, with as few `writev` calls as the kernel allows.
fn write_all_vectored(mut file: &File, mut pieces: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut pieces, 0);
    while !pieces.is_empty() {
        // At most IOV_MAX (1024 on Linux) pieces per call.
        let upto = pieces.len().min(1024);
        match file.write_vectored(&pieces[..upto]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut pieces, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Checks that a body of `len` bytes is what `key` and `version` say it is.
fn check_body(key: &CacheKey, version: &ObjectVersion, len: u64) -> Result<()> {
    let problem = match key.range() {
        None if len != version.size => Some(format!(
            "body has {len} bytes but the object has {}",
            version.size
        )),
        Some(r) if r.start > r.end || r.end > version.size => Some(format!(
            "range {}..{} is not inside an object of {} bytes",
            r.start, r.end, version.size
        )),
        Some(r) if len != r.end - r.start => Some(format!(
            "body has {len} bytes but the range {}..{} has {}",
            r.start,
            r.end,
            r.end - r.start
        )),
        _ => None,
    };
    match problem {
        None => Ok(()),
        Some(reason) => Err(Error::InvalidInput {
            store: key.store().to_owned(),
            key: key.key().to_owned(),
            reason,
        }),
    }
}

/// Renames `from` to `to`, creating `to`'s directory if it went missing
/// (the subdirectories are made when the cache opens).
fn rename_into(from: &Path, to: &Path) -> io::Result<()> {
    match fs::rename(from, to) {
        Err(e) if e.kind() == io::ErrorKind::NotFound && from.exists() => {
            if let Some(dir) = to.parent() {
                fs::create_dir_all(dir)?;
            }
            fs::rename(from, to)
        }
        other => other,
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("fsync", dir, e))
}

/// A temporary entry file, removed when dropped unless renamed into place.
#[derive(Debug)]
struct TempFile {
    file: File,
    path: PathBuf,
    /// Whether dropping removes the file.
    armed: bool,
}

impl TempFile {
    /// The file is an entry now: keep it. Closing it releases its lock.
    fn renamed(mut self) {
        self.armed = false;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Err(e) = fs::remove_file(&self.path) {
            tracing::debug!(path = %self.path.display(), error = %e, "cache temporary file not removed");
        }
    }
}
