//! Listing checkpoints, keeping the last K, and cleaning up after killed writers.
//!
//! A checkpoint is a top-level entry of the prefix: one object (`step-100.pt`), or every
//! object under one folder (`step-100/…`, as PyTorch's distributed checkpoints are written).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use bucketload_store::ListedKind;
use futures::TryStreamExt;

use super::local::{PARTIAL_MARK, blocking, io_error};
use super::{Checkpoints, Target};
use crate::Result;

/// One checkpoint of a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// Its name: the object's key, or the folder's name, under the prefix.
    pub name: String,
    /// Objects (files) it holds.
    pub objects: u64,
    /// Their total size.
    pub bytes: u64,
    /// When its newest object was written.
    pub last_modified: Option<SystemTime>,
}

/// A save that was started and never finished: a multipart upload in progress on an object
/// store, or a temporary file in a local directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    /// The checkpoint it was writing (key under the prefix; for local targets, the temporary
    /// file's path under the directory).
    pub name: String,
    /// The multipart upload's id (object stores only).
    pub upload_id: Option<String>,
    /// When it was started (local: the temporary file's last write).
    pub initiated: Option<SystemTime>,
}

/// Objects of the prefix, by checkpoint name: (relative keys, info).
type Groups = BTreeMap<String, (Vec<String>, CheckpointInfo)>;

impl Checkpoints {
    /// The checkpoints under the prefix, oldest first (by their newest object).
    pub async fn list(&self) -> Result<Vec<CheckpointInfo>> {
        let mut list: Vec<CheckpointInfo> =
            self.groups().await?.into_values().map(|(_, i)| i).collect();
        list.sort_by(|a, b| (a.last_modified, &a.name).cmp(&(b.last_modified, &b.name)));
        Ok(list)
    }

    /// Deletes every checkpoint but the `k` most recent; returns the names deleted, oldest
    /// first. A save in progress is not a checkpoint yet and is never touched.
    pub async fn keep_last(&self, k: usize) -> Result<Vec<String>> {
        let mut groups: Vec<(Vec<String>, CheckpointInfo)> =
            self.groups().await?.into_values().collect();
        groups.sort_by(|a, b| (a.1.last_modified, &a.1.name).cmp(&(b.1.last_modified, &b.1.name)));
        let old = groups.len().saturating_sub(k);
        let mut deleted = Vec::new();
        for (keys, info) in groups.into_iter().take(old) {
            self.delete_group(&info.name, &keys).await?;
            tracing::info!(checkpoint = %self.uri_of(&info.name), "deleted by retention");
            deleted.push(info.name);
        }
        Ok(deleted)
    }

    /// Deletes checkpoint `name` (its object, or every object under its folder); false when
    /// there was none.
    pub async fn delete(&self, name: &str) -> Result<bool> {
        let Some((keys, _)) = self.groups().await?.remove(name) else {
            return Ok(false);
        };
        self.delete_group(name, &keys).await?;
        Ok(true)
    }

    /// Saves started and never finished (a writer killed mid-upload leaves its parts stored,
    /// and billed, until aborted).
    pub async fn orphaned_uploads(&self) -> Result<Vec<Orphan>> {
        match &self.target {
            Target::Object(store) => Ok(store
                .list_uploads("")
                .await?
                .into_iter()
                .map(|u| Orphan {
                    name: u.key,
                    upload_id: Some(u.upload_id),
                    initiated: u.initiated.map(SystemTime::from),
                })
                .collect()),
            Target::Local(dir) => {
                let dir = dir.clone();
                blocking(move || local_partials(&dir)).await
            }
        }
    }

    /// Aborts (or removes) the unfinished saves started more than `older_than` ago, which
    /// leaves saves still running alone; returns those removed.
    pub async fn abort_orphans(&self, older_than: Duration) -> Result<Vec<Orphan>> {
        let cutoff = SystemTime::now()
            .checked_sub(older_than)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let mut removed = Vec::new();
        for orphan in self.orphaned_uploads().await? {
            if orphan.initiated.is_some_and(|t| t > cutoff) {
                continue;
            }
            match (&self.target, &orphan.upload_id) {
                (Target::Object(store), Some(id)) => store.abort_upload(&orphan.name, id).await?,
                (Target::Local(dir), _) => {
                    let path = dir.join(&orphan.name);
                    blocking(move || match std::fs::remove_file(&path) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                            Err(io_error(&path, "remove", e))
                        }
                        _ => Ok(()),
                    })
                    .await?;
                }
                (Target::Object(_), None) => continue,
            }
            tracing::info!(checkpoint = %self.uri_of(&orphan.name), "aborted an unfinished save");
            removed.push(orphan);
        }
        Ok(removed)
    }

    async fn groups(&self) -> Result<Groups> {
        let mut groups = Groups::new();
        let mut add = |key: String, size: u64, modified: Option<SystemTime>| {
            let name = key.split('/').next().unwrap_or(&key).to_owned();
            let entry = groups.entry(name.clone()).or_insert_with(|| {
                let info = CheckpointInfo {
                    name,
                    objects: 0,
                    bytes: 0,
                    last_modified: None,
                };
                (Vec::new(), info)
            });
            entry.0.push(key);
            entry.1.objects += 1;
            entry.1.bytes += size;
            entry.1.last_modified = entry.1.last_modified.max(modified);
        };
        match &self.target {
            Target::Object(store) => {
                // Keys as stored: a folder marker (`step-100/`, an empty folder made in the S3
                // console) is no checkpoint and no part of one.
                let mut listing = store.list_pages("", false);
                while let Some(page) = listing.try_next().await? {
                    for listed in page.objects {
                        match listed.kind() {
                            ListedKind::Object(meta) => {
                                let modified = SystemTime::from(meta.last_modified);
                                add(meta.location.to_string(), meta.size, Some(modified));
                            }
                            ListedKind::Folder => {}
                            ListedKind::Unaddressable => tracing::warn!(
                                "{}: the key {}, which the checkpoint listing cannot \
                                 address: not counted in any checkpoint",
                                self.uri_of(&listed.key),
                                bucketload_store::unspellable(&listed.key)
                                    .unwrap_or("cannot be spelled")
                            ),
                        }
                    }
                }
            }
            Target::Local(dir) => {
                let dir = dir.clone();
                for (key, size, modified) in blocking(move || local_files(&dir)).await? {
                    add(key, size, modified);
                }
            }
        }
        Ok(groups)
    }

    async fn delete_group(&self, name: &str, keys: &[String]) -> Result<()> {
        match &self.target {
            Target::Object(store) => {
                for key in keys {
                    let path = bucketload_store::key_path(key);
                    store
                        .delete_key(&path)
                        .await
                        .map_err(|e| store.map_error(e, &path))?;
                }
                Ok(())
            }
            Target::Local(dir) => {
                let path = dir.join(name);
                blocking(move || {
                    let removed = match path.is_dir() {
                        true => std::fs::remove_dir_all(&path),
                        false => std::fs::remove_file(&path),
                    };
                    removed.map_err(|e| io_error(&path, "delete", e))
                })
                .await
            }
        }
    }
}

/// Every finished file under `dir`: (relative path, size, modified).
fn local_files(dir: &Path) -> Result<Vec<(String, u64, Option<SystemTime>)>> {
    let mut out = Vec::new();
    walk(dir, dir, &mut |rel, meta| {
        if !is_partial(rel) {
            out.push((rel.to_owned(), meta.len(), meta.modified().ok()));
        }
    })?;
    Ok(out)
}

fn local_partials(dir: &Path) -> Result<Vec<Orphan>> {
    let mut out = Vec::new();
    walk(dir, dir, &mut |rel, meta| {
        if is_partial(rel) {
            out.push(Orphan {
                name: rel.to_owned(),
                upload_id: None,
                initiated: meta.modified().ok(),
            });
        }
    })?;
    Ok(out)
}

fn is_partial(rel: &str) -> bool {
    let base = rel.rsplit('/').next().unwrap_or(rel);
    base.starts_with('.') && base.contains(PARTIAL_MARK)
}

/// Calls `f` with the path relative to `root` and the metadata of every file under `dir`; a
/// missing `root` holds nothing.
fn walk(root: &Path, dir: &Path, f: &mut dyn FnMut(&str, &std::fs::Metadata)) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir == root => return Ok(()),
        Err(e) => return Err(io_error(dir, "list", e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| io_error(dir, "list", e))?;
        let path: PathBuf = entry.path();
        let meta = entry.metadata().map_err(|e| io_error(&path, "stat", e))?;
        if meta.is_dir() {
            walk(root, &path, f)?;
        } else if let Ok(rel) = path.strip_prefix(root) {
            f(&rel.to_string_lossy(), &meta);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_files_are_recognised() {
        assert!(is_partial("a/.step-1.pt.partial-12-345"));
        assert!(!is_partial("a/step-1.pt"));
        assert!(!is_partial("partial-1"));
    }
}
