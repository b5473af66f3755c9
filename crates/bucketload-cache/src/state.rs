//! The state shared by every process using one cache directory: the
//! accounted size, the entry count and the epoch clock, in one small file
//! (`state`) read and written under `flock`.
//!
//! `flock` locks belong to the open file and die with the process, so a
//! crashed process never leaves the cache locked. They do not exclude
//! threads sharing one open file, so each [`SharedState`] also holds a
//! mutex: the mutex orders this process's threads, the `flock` orders
//! processes.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result};

/// Number of epoch start times remembered; bounds `idle_epochs`.
pub(crate) const RING: usize = 16;
const MAGIC: [u8; 8] = *b"BLCSTATE";
const VERSION: u32 = 1;
const WORDS: usize = 5 + RING;
const SIZE: usize = 16 + 8 * WORDS;

/// The shared counters and the epoch clock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct State {
    /// Accounted bytes of committed entries (see `scan::accounted`).
    pub total: u64,
    /// Committed entries.
    pub entries: u64,
    /// The epoch clock: advanced by `begin_epoch`.
    pub generation: u64,
    /// Hash of the dataset named by the last `begin_epoch` (0: none yet).
    pub dataset: u64,
    /// Epoch number named by the last `begin_epoch`.
    pub epoch: u64,
    /// Start of generation `g` (ns since the Unix epoch) at `g % RING`.
    pub starts: [u64; RING],
}

impl State {
    fn encode(&self) -> [u8; SIZE] {
        let mut b = [0; SIZE];
        b[..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        let words = [
            self.total,
            self.entries,
            self.generation,
            self.dataset,
            self.epoch,
        ];
        for (i, w) in words.iter().chain(self.starts.iter()).enumerate() {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b[16..]);
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// `None` when the bytes are not a whole, intact state record.
    fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != SIZE || b[..8] != MAGIC || b[8..12] != VERSION.to_le_bytes() {
            return None;
        }
        if b[12..16] != crc32c::crc32c(&b[16..]).to_le_bytes() {
            return None;
        }
        let word = |i: usize| {
            let mut a = [0; 8];
            a.copy_from_slice(&b[16 + 8 * i..24 + 8 * i]);
            u64::from_le_bytes(a)
        };
        Some(Self {
            total: word(0),
            entries: word(1),
            generation: word(2),
            dataset: word(3),
            epoch: word(4),
            starts: std::array::from_fn(|i| word(5 + i)),
        })
    }

    /// When generation `g` started (0 if `g` is in the future or forgotten).
    pub fn start_of(&self, g: u64) -> u64 {
        if g > self.generation || self.generation - g >= RING as u64 {
            return 0;
        }
        self.starts[(g % RING as u64) as usize]
    }

    /// Advances the epoch clock for epoch `epoch` of `dataset`; returns
    /// whether it moved. A new dataset makes every older entry idle at once;
    /// a later epoch of the same dataset starts one generation; an epoch
    /// already started (named again by another worker or rank, or by a
    /// straggler or a restarted run) changes nothing.
    pub fn begin_epoch(&mut self, dataset: u64, epoch: u64, now_ns: u64) -> bool {
        if dataset != self.dataset {
            self.generation += 1;
            self.starts = [now_ns; RING];
        } else if epoch > self.epoch {
            self.generation += 1;
            self.starts[(self.generation % RING as u64) as usize] = now_ns;
        } else {
            return false;
        }
        self.dataset = dataset;
        self.epoch = epoch;
        true
    }
}

/// The `state` file of one cache directory, opened by this process.
#[derive(Debug)]
pub(crate) struct SharedState {
    file: Mutex<File>,
    path: PathBuf,
}

/// Exclusive access to the shared state until dropped.
#[derive(Debug)]
pub(crate) struct Locked<'a> {
    file: MutexGuard<'a, File>,
    path: &'a Path,
    /// The state as read; `None` when the file is new or damaged and must
    /// be rebuilt from a scan before use.
    pub state: Option<State>,
}

impl SharedState {
    pub fn open(path: PathBuf) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io("open", &path, e))?;
        Ok(Self {
            file: Mutex::new(file),
            path,
        })
    }

    fn guard(&self) -> MutexGuard<'_, File> {
        // A thread that panicked while holding the mutex left the file
        // unlocked (the flock is released by `Locked::drop` or was never
        // taken), so the file is still usable.
        self.file.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the exclusive lock (waiting for other processes) and reads.
    pub fn lock(&self) -> Result<Locked<'_>> {
        let file = self.guard();
        file.lock().map_err(|e| Error::io("lock", &self.path, e))?;
        let mut locked = Locked {
            file,
            path: &self.path,
            state: None,
        };
        locked.state = locked.read()?;
        Ok(locked)
    }

    /// Reads under a shared lock; `None` when the state must be rebuilt.
    pub fn read(&self) -> Result<Option<State>> {
        let file = self.guard();
        file.lock_shared()
            .map_err(|e| Error::io("lock", &self.path, e))?;
        let state = read_state(&file, &self.path);
        let _ = file.unlock();
        state
    }
}

fn read_state(file: &File, path: &Path) -> Result<Option<State>> {
    let mut b = [0; SIZE];
    match file.read_exact_at(&mut b, 0) {
        Ok(()) => Ok(State::decode(&b)),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(Error::io("read", path, e)),
    }
}

impl Locked<'_> {
    fn read(&self) -> Result<Option<State>> {
        read_state(&self.file, self.path)
    }

    /// Writes `state` while still holding the lock.
    pub fn write(&self, state: &State) -> Result<()> {
        self.file
            .write_all_at(&state.encode(), 0)
            .map_err(|e| Error::io("write", self.path, e))
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // Closing the process releases it anyway; an error here leaves
        // nothing to repair.
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode() {
        let mut s = State {
            total: 12,
            entries: 3,
            ..State::default()
        };
        s.begin_epoch(7, 0, 1000);
        let b = s.encode();
        assert_eq!(State::decode(&b), Some(s));
        for i in 0..SIZE {
            let mut c = b;
            c[i] ^= 1;
            assert_eq!(State::decode(&c), None, "flip at {i}");
        }
        assert_eq!(State::decode(&b[..SIZE - 1]), None);
    }

    #[test]
    fn epoch_clock() {
        let mut s = State::default();
        assert!(s.begin_epoch(7, 0, 100));
        assert_eq!((s.generation, s.start_of(1), s.start_of(0)), (1, 100, 100));
        assert!(!s.begin_epoch(7, 0, 150), "same epoch again is a no-op");
        assert!(s.begin_epoch(7, 1, 200));
        assert!(
            !s.begin_epoch(7, 0, 210),
            "a straggler's older epoch is a no-op"
        );
        assert_eq!((s.generation, s.start_of(2), s.start_of(1)), (2, 200, 100));
        assert!(s.begin_epoch(9, 0, 300), "a new dataset");
        assert_eq!((s.generation, s.start_of(3), s.start_of(2)), (3, 300, 300));
        assert_eq!(s.start_of(4), 0, "the future has no start");
        for e in 1..=RING as u64 {
            s.begin_epoch(9, e, 300 + e);
        }
        assert_eq!(s.start_of(3), 0, "forgotten generations");
    }

    #[test]
    fn lock_read_write() {
        let dir = tempfile::tempdir().expect("tempdir");
        let shared = SharedState::open(dir.path().join("state")).expect("open");
        assert_eq!(shared.read().expect("read"), None);
        let s = State {
            total: 5,
            ..State::default()
        };
        {
            let locked = shared.lock().expect("lock");
            assert_eq!(locked.state, None);
            locked.write(&s).expect("write");
        }
        assert_eq!(shared.read().expect("read"), Some(s.clone()));
        assert_eq!(shared.lock().expect("lock").state, Some(s));
    }
}
