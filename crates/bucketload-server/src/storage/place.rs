//! Placing objects in the tree: the directories a key's path needs are made one segment at a
//! time (a hashed segment's with its `.bl%name`); where an object's file stands in the way of
//! a directory, it moves into the new directory as `.bl%self`, with its sidecar. Deletes prune
//! the directories left empty. Everything here runs with the commit lock held.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::{Storage, keys};

impl Storage {
    /// Makes the directories the object `key` goes into, and returns where its bytes and
    /// sidecar go: the file at the key's path, or `.bl%self` in the directory there.
    pub(super) fn place_object(&self, bucket: &str, key: &str) -> io::Result<(PathBuf, PathBuf)> {
        let (mut data, mut meta) = (self.root.join(bucket), self.internal("meta", bucket));
        let segments: Vec<&str> = key.split('/').collect();
        let (last, parents) = segments.split_last().expect("split yields a segment");
        for segment in parents {
            self.enter_dir(&mut data, &mut meta, segment)?;
        }
        let name = keys::encode_segment(last);
        if keys::is_hashed(&name) {
            self.enter_dir(&mut data, &mut meta, last)?;
        } else {
            data.push(&*name);
            meta.push(&*name);
            let meta_is_dir = fs::symlink_metadata(&meta).map(|m| m.is_dir());
            if !fs::metadata(&data).is_ok_and(|m| m.is_dir()) {
                // No key lies below a file, so a sidecar directory here is stale.
                if meta_is_dir.is_ok_and(|is_dir| is_dir) {
                    fs::remove_dir_all(&meta)?;
                }
                return Ok((data, meta));
            }
            if meta_is_dir.is_ok_and(|is_dir| !is_dir) {
                self.file_into_dir(&meta)?;
            }
        }
        Ok((data.join(keys::SELF), meta.join(keys::SELF)))
    }

    /// Makes the directories of the folder marker `key` (which the listing enters to find
    /// it), and returns where its bytes and sidecar go.
    pub(super) fn place_marker(&self, bucket: &str, key: &str) -> io::Result<(PathBuf, PathBuf)> {
        let (mut data, mut meta) = (self.root.join(bucket), self.internal("meta", bucket));
        let folder = key.strip_suffix('/').unwrap_or(key);
        for segment in folder.split('/') {
            self.enter_dir(&mut data, &mut meta, segment)?;
        }
        Ok(self.marker_paths(bucket, key))
    }

    /// Pushes `segment` onto the data and sidecar directory paths, making the data directory
    /// if needed: a hashed segment's with its name inside; where an object's file is in the
    /// way, the file moves into the new directory as `.bl%self` (its sidecar likewise).
    fn enter_dir(&self, data: &mut PathBuf, meta: &mut PathBuf, segment: &str) -> io::Result<()> {
        let name = keys::encode_segment(segment);
        data.push(&*name);
        meta.push(&*name);
        match fs::metadata(&*data) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => self.file_into_dir(data),
            Err(e) if e.kind() == io::ErrorKind::NotFound && keys::is_hashed(&name) => {
                let temp = self.temp_path();
                fs::create_dir(&temp)?;
                let made = fs::write(temp.join(keys::NAME), segment)
                    .and_then(|()| fs::rename(&temp, &*data));
                if made.is_err() {
                    let _ = fs::remove_dir_all(&temp);
                }
                made
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir(&*data),
            Err(e) => Err(e),
        }?;
        // Sidecars mirror the data files: one in the way moves like its object.
        match fs::metadata(&*meta) {
            Ok(m) if !m.is_dir() => self.file_into_dir(meta),
            _ => Ok(()),
        }
    }

    /// Turns the file at `path` into a directory holding it as `.bl%self`. Readers that miss
    /// the object meanwhile look again once the move is over ([`Storage::settled`]). Called
    /// with the commit lock held.
    fn file_into_dir(&self, path: &Path) -> io::Result<()> {
        let temp = self.temp_path();
        fs::create_dir(&temp)?;
        self.moves.fetch_add(1, Ordering::SeqCst);
        let moved = move_into_dir(path, &temp);
        self.moves.fetch_add(1, Ordering::SeqCst);
        if moved.is_err() {
            let _ = fs::remove_dir_all(&temp);
        }
        moved
    }

    /// Removes the now-empty directories of the first `levels` segments of a key, deepest
    /// first, up to the first one that holds a folder marker or anything else.
    pub(super) fn prune_data_dirs(&self, bucket: &str, segments: &[&str], levels: usize) {
        for level in (1..=levels.min(segments.len())).rev() {
            let folder = format!("{}/", segments[..level].join("/"));
            let dir = self.root.join(bucket).join(keys::dir_path(&folder));
            if self.has_marker(bucket, &folder) || !remove_empty_dir(&dir) {
                break;
            }
        }
    }
}

/// Moves the file `path` into the empty directory `temp` as `.bl%self`, and `temp` to
/// `path`. On Linux the file and the directory swap places in one step (`RENAME_EXCHANGE`),
/// so a reader finds the object at `path` or in it at every moment; elsewhere, or where the
/// file system cannot, it is two renames, between which readers miss the object and look
/// again ([`Storage::settled`]).
fn move_into_dir(path: &Path, temp: &Path) -> io::Result<()> {
    let inner = temp.join(keys::SELF);
    #[cfg(target_os = "linux")]
    if fs::hard_link(path, &inner).is_ok() {
        use rustix::fs::{CWD, RenameFlags, renameat_with};
        if renameat_with(CWD, temp, CWD, path, RenameFlags::EXCHANGE).is_ok() {
            // `temp` is now the file's old name; the bytes stay linked as `.bl%self`.
            let _ = fs::remove_file(temp);
            return Ok(());
        }
        fs::remove_file(&inner)?;
    }
    fs::rename(path, &inner)?;
    fs::rename(temp, path).inspect_err(|_| {
        let _ = fs::rename(&inner, path);
    })
}

/// Removes `dir` if it holds nothing, or only a hashed segment's name; true if removed.
fn remove_empty_dir(dir: &Path) -> bool {
    let Ok(mut entries) = fs::read_dir(dir) else {
        return false;
    };
    match entries.next() {
        None => fs::remove_dir(dir).is_ok(),
        Some(Ok(only)) if only.file_name() == keys::NAME && entries.next().is_none() => {
            fs::remove_file(only.path()).is_ok() && fs::remove_dir(dir).is_ok()
        }
        Some(_) => false,
    }
}
