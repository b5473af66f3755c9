//! What a server does to its data directory before it serves: take the root's lock, then
//! reclaim what earlier runs left behind.
//!
//! A server killed while it received an upload leaves its temporary file in
//! `.bucketload/tmp/`, and clients that never complete or abort a multipart upload leave its
//! parts in `.bucketload/uploads/`. At start nothing is being written — the lock
//! (`.bucketload/lock`, an exclusive `flock` held while the server runs) makes sure no other
//! server uses the same root — so every temporary file is an orphan. Unfinished uploads are
//! kept until they are older than the configured expiry (S3's lifecycle rule
//! `AbortIncompleteMultipartUpload` does the same), and the records of completed uploads for
//! a day (they answer a repeated CompleteMultipartUpload). Files and trees a running server
//! discarded wait in `.bucketload/trash/` for its [`Reaper`]; any left there go too.

use std::fmt;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError, mpsc};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;

use super::INTERNAL_DIR;
use super::multipart::{COMPLETED, REMEMBER_COMPLETED};

/// An exclusive lock on a data directory, released when dropped (or when the process ends).
#[derive(Debug)]
pub(crate) struct RootLock {
    _file: File,
}

/// Why the root's lock could not be taken.
#[derive(Debug)]
pub(crate) enum LockError {
    /// Another server holds it.
    InUse(PathBuf),
    Io(io::Error),
}

/// Takes the lock of the data directory `root`, whose internal directory must exist.
pub(crate) fn lock_root(root: &Path, shared: bool) -> Result<RootLock, LockError> {
    let path = root.join(INTERNAL_DIR).join("lock");
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(LockError::Io)?;
    // Servers that share the root take the lock shared: they exclude one that cleans it at
    // start, not each other.
    let operation = match shared {
        true => rustix::fs::FlockOperation::NonBlockingLockShared,
        false => rustix::fs::FlockOperation::NonBlockingLockExclusive,
    };
    match rustix::fs::flock(&file, operation) {
        Ok(()) => Ok(RootLock { _file: file }),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => Err(LockError::InUse(path)),
        Err(e) => Err(LockError::Io(e.into())),
    }
}

/// What [`reclaim`] removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reclaimed {
    /// Temporary files of writes that never finished.
    pub temp_files: u64,
    /// Unfinished multipart uploads past the expiry, and records of old completed ones.
    pub uploads: u64,
    /// Files removed in all (the parts of an upload count one each).
    pub files: u64,
    /// Bytes those files held.
    pub bytes: u64,
}

impl Reclaimed {
    /// Whether anything was removed.
    pub fn is_empty(&self) -> bool {
        self.files == 0 && self.uploads == 0
    }

    fn add(&mut self, (files, bytes): (u64, u64)) {
        self.files += files;
        self.bytes += bytes;
    }
}

impl fmt::Display for Reclaimed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} temporary file(s) and {} expired multipart upload(s): {} file(s), {} bytes",
            self.temp_files, self.uploads, self.files, self.bytes
        )
    }
}

/// Removes every temporary file, unfinished uploads initiated more than `upload_expiry` ago
/// (none when `None`), and records of uploads completed more than a day ago. Blocking.
pub(crate) fn reclaim(root: &Path, upload_expiry: Option<Duration>) -> io::Result<Reclaimed> {
    let internal = root.join(INTERNAL_DIR);
    let mut reclaimed = Reclaimed::default();
    for area in ["tmp", "trash"] {
        for entry in read_dir_or_empty(&internal.join(area))? {
            let entry = entry?;
            reclaimed.add(remove_tree(&entry.path())?);
            reclaimed.temp_files += 1;
        }
    }
    let now = SystemTime::now();
    for bucket in read_dir_or_empty(&internal.join("uploads"))? {
        let bucket = bucket?;
        if !bucket.file_type()?.is_dir() {
            continue;
        }
        for upload in fs::read_dir(bucket.path())? {
            let dir = upload?.path();
            if upload_is_stale(&dir, now, upload_expiry) {
                reclaimed.add(remove_tree(&dir)?);
                reclaimed.uploads += 1;
            }
        }
    }
    Ok(reclaimed)
}

#[derive(Deserialize)]
struct Initiated {
    initiated_ns: u64,
}

/// An upload directory to remove: initiated before the expiry, completed more than
/// [`REMEMBER_COMPLETED`] ago, or holding neither record (a creation or completion that was
/// cut short; no client can use it).
fn upload_is_stale(dir: &Path, now: SystemTime, expiry: Option<Duration>) -> bool {
    let age = |t: SystemTime| now.duration_since(t).unwrap_or_default();
    match fs::read(dir.join("upload.json")) {
        Ok(bytes) => match serde_json::from_slice::<Initiated>(&bytes) {
            Ok(record) => expiry.is_some_and(|expiry| {
                age(UNIX_EPOCH + Duration::from_nanos(record.initiated_ns)) > expiry
            }),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "unreadable upload record; keeping it");
                false
            }
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            match fs::metadata(dir.join(COMPLETED)).and_then(|m| m.modified()) {
                Ok(completed) => age(completed) > REMEMBER_COMPLETED,
                Err(_) => dir.is_dir(),
            }
        }
        Err(_) => false,
    }
}

/// The entries of `dir`; none when it does not exist.
fn read_dir_or_empty(dir: &Path) -> io::Result<Vec<io::Result<fs::DirEntry>>> {
    match fs::read_dir(dir) {
        Ok(entries) => Ok(entries.collect()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Removes files and directory trees moved into `.bucketload/trash`, on a thread of its own.
/// Freeing a large file's blocks keeps the file system busy for a while (on the order of half a
/// second per GiB), which a request that replaces or deletes the file need not wait for. What
/// is left there when the server stops is removed at the next start, like temporary files.
#[derive(Debug)]
pub(crate) struct Reaper {
    queue: Mutex<Option<mpsc::Sender<Job>>>,
}

#[derive(Debug)]
enum Job {
    Remove(PathBuf),
    /// Answered once everything sent before is removed.
    #[cfg_attr(not(test), allow(dead_code))]
    Flush(mpsc::Sender<()>),
}

impl Reaper {
    pub(crate) fn start() -> Self {
        let (tx, rx) = mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name("bucketload-reaper".into())
            .spawn(move || {
                for job in rx {
                    match job {
                        Job::Remove(path) => {
                            if let Err(e) = remove_tree(&path) {
                                tracing::warn!(path = %path.display(), error = %e, "could not remove a discarded file; it goes at the next start");
                            }
                        }
                        Job::Flush(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            });
        Self {
            queue: Mutex::new(spawned.ok().map(|_| tx)),
        }
    }

    /// Removes `path` (already in the trash) soon; at once when the thread could not start.
    pub(crate) fn remove(&self, path: PathBuf) {
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let path = match queue.as_ref() {
            Some(tx) => match tx.send(Job::Remove(path)) {
                Ok(()) => return,
                Err(mpsc::SendError(Job::Remove(path))) => path,
                Err(_) => return,
            },
            None => path,
        };
        drop(queue);
        let _ = remove_tree(&path);
    }

    /// Waits until everything passed to [`Reaper::remove`] before is removed.
    #[cfg(test)]
    pub(crate) fn flush(&self) {
        let (tx, rx) = mpsc::channel();
        let sent = self
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|queue| queue.send(Job::Flush(tx)));
        if let Some(Ok(())) = sent {
            let _ = rx.recv();
        }
    }
}

/// Removes a file or a directory tree; returns the files and bytes it held.
fn remove_tree(path: &Path) -> io::Result<(u64, u64)> {
    let meta = fs::symlink_metadata(path)?;
    if !meta.is_dir() {
        fs::remove_file(path)?;
        return Ok((1, meta.len()));
    }
    let mut total = (0, 0);
    for entry in fs::read_dir(path)? {
        let (files, bytes) = remove_tree(&entry?.path())?;
        total = (total.0 + files, total.1 + bytes);
    }
    fs::remove_dir(path)?;
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upload(root: &Path, bucket: &str, id: &str, initiated: SystemTime, parts: &[usize]) {
        let dir = root
            .join(INTERNAL_DIR)
            .join("uploads")
            .join(bucket)
            .join(id);
        fs::create_dir_all(&dir).unwrap();
        let ns = initiated.duration_since(UNIX_EPOCH).unwrap().as_nanos();
        let record = format!(
            r#"{{"key":"k","initiated_ns":{ns},"attrs":{{"content_type":null,"metadata":{{}}}}}}"#
        );
        fs::write(dir.join("upload.json"), record).unwrap();
        for (i, len) in parts.iter().enumerate() {
            fs::write(dir.join(format!("{:05}", i + 1)), vec![0u8; *len]).unwrap();
        }
    }

    #[test]
    fn reclaims_orphans_and_expired_uploads_only() {
        let root = tempfile::tempdir().unwrap();
        let tmp = root.path().join(INTERNAL_DIR).join("tmp");
        fs::create_dir_all(&tmp).unwrap();
        fs::write(tmp.join("a"), vec![1u8; 1000]).unwrap();
        fs::write(tmp.join("b"), vec![1u8; 24]).unwrap();
        let week = Duration::from_secs(7 * 24 * 3600);
        let now = SystemTime::now();
        upload(
            root.path(),
            "bkt",
            "old",
            now - week - Duration::from_secs(60),
            &[100, 50],
        );
        upload(
            root.path(),
            "bkt",
            "new",
            now - Duration::from_secs(60),
            &[10],
        );
        let uploads = root.path().join(INTERNAL_DIR).join("uploads/bkt");
        fs::create_dir_all(uploads.join("empty")).unwrap();
        let record = fs::metadata(uploads.join("old/upload.json")).unwrap().len();

        let reclaimed = reclaim(root.path(), Some(week)).unwrap();
        assert_eq!(reclaimed.temp_files, 2);
        assert_eq!(
            reclaimed.uploads, 2,
            "the old upload and the record-less one"
        );
        assert_eq!(reclaimed.files, 2 + 3);
        assert_eq!(reclaimed.bytes, 1000 + 24 + 150 + record);
        assert_eq!(fs::read_dir(&tmp).unwrap().count(), 0);
        let left: Vec<_> = fs::read_dir(&uploads)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["new"]);
        assert!(reclaim(root.path(), Some(week)).unwrap().is_empty());
    }

    #[test]
    fn a_second_lock_on_a_root_is_refused() {
        let root = tempfile::tempdir().unwrap();
        fs::create_dir_all(root.path().join(INTERNAL_DIR)).unwrap();
        let first = lock_root(root.path(), false).unwrap();
        assert!(matches!(
            lock_root(root.path(), false),
            Err(LockError::InUse(_))
        ));
        drop(first);
        assert!(lock_root(root.path(), false).is_ok());
    }
}
