//! [`Fs`]: the file system over one store URI, kernel-free.
//!
//! Parts: the inode [`Tree`](crate::tree) (names, sizes, ETags, listings with their age), the
//! open handles (a [`FileReader`], a [`FileWriter`] or a directory snapshot each), the memory
//! budget and the engine's prefetch settings and disk cache ([`bucketload::io`]). Every operation is an `async fn`
//! taking inode and handle numbers, as FUSE does, and returning an [`Error`] that knows its
//! errno; the adapter in [`crate::fuse`] only translates. Locks on the tree are never held
//! across a request to the store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime};

use bucketload::base::Location;
use bucketload::io::{DiskCache, PrefetchConfig, PrefetchCounters};
use bucketload_format::{DatasetKind, Manifest};
use bucketload_store::Store;
use bucketload_store::object_store::{ObjectMeta, ObjectStoreExt};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use tokio::sync::Mutex as AsyncMutex;

mod writing;

use crate::config::MountConfig;
use crate::error::{Error, Result, errno};
use crate::memory::Memory;
use crate::read::{FileReader, ReadContext};
use crate::tree::{Checked, Entry, Kind, Known, ROOT, Stat, Tree, join};
use crate::write::{FileWriter, Start};

/// The largest object S3's CopyObject copies in one request; larger ones are not renamed.
const MAX_COPY: u64 = 5 << 30;
/// The longest file name Linux accepts.
const NAME_MAX: usize = 255;
/// The prefetcher's widest window: eight 8 MiB parts (see `PrefetchConfig`).
const MAX_WINDOW: u64 = 64 << 20;

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Inode number.
    pub ino: u64,
    /// The name in its directory.
    pub name: String,
    /// File or directory.
    pub kind: Kind,
    /// The attributes as listed (for `readdirplus`).
    pub stat: Stat,
}

/// How a file is opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenMode {
    /// Opened for writing (`O_WRONLY` or `O_RDWR`).
    pub write: bool,
    /// `O_TRUNC`.
    pub truncate: bool,
    /// `O_APPEND`.
    pub append: bool,
}

#[derive(Debug, Clone)]
enum Handle {
    Read(Arc<AsyncMutex<FileReader>>),
    Write(u64, Arc<AsyncMutex<FileWriter>>),
    Dir(Arc<Vec<DirEntry>>),
}

/// The file system; cheap to clone.
#[derive(Debug, Clone)]
pub struct Fs {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Store,
    config: MountConfig,
    tree: Mutex<Tree>,
    handles: Mutex<HashMap<u64, Handle>>,
    next_fh: AtomicU64,
    read: ReadContext,
    manifest: bool,
}

impl Fs {
    /// A file system over `store` (keys relative to its URI). Reads the dataset manifest when
    /// there is one and the configuration allows it; sends no other request.
    pub async fn new(store: Store, config: MountConfig) -> Result<Fs> {
        config.validate()?;
        let location = Location::from_store(&store);
        let window = MAX_WINDOW
            .min(config.memory_limit / 4)
            .max(config.part_size);
        let prefetch = PrefetchConfig::default()
            .with_part_size(config.part_size)
            .with_max_window(window);
        let read = ReadContext {
            store: store.clone(),
            location: location.clone(),
            memory: Memory::new(config.memory_limit, config.memory_wait),
            cache: config.cache.clone().map(DiskCache::new),
            prefetch,
            counters: Arc::new(PrefetchCounters::default()),
            whole_limit: config.part_size,
        };
        let mut tree = Tree::new();
        let manifest = match config.use_manifest {
            true => location.manifest_found().await?,
            false => None,
        };
        let has_manifest = manifest.is_some();
        if let Some((key, m)) = manifest {
            fill_from_manifest(&mut tree, &m, key.as_ref());
            tracing::info!(uri = %store, files = m.files.len(), shards = m.shards.len(),
                "mount: listings come from the dataset manifest");
        }
        Ok(Fs {
            inner: Arc::new(Inner {
                store,
                config,
                tree: Mutex::new(tree),
                handles: Mutex::new(HashMap::new()),
                next_fh: AtomicU64::new(1),
                read,
                manifest: has_manifest,
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &MountConfig {
        &self.inner.config
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Whether listings come from a dataset manifest.
    pub fn uses_manifest(&self) -> bool {
        self.inner.manifest
    }

    /// Bytes of the memory limit not reserved by open handles now.
    pub fn memory_available(&self) -> u64 {
        self.inner.read.memory.available()
    }

    /// Open handles (files and directories).
    pub fn open_handles(&self) -> usize {
        self.handles().len()
    }

    fn tree(&self) -> std::sync::MutexGuard<'_, Tree> {
        self.inner
            .tree
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn handles(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Handle>> {
        self.inner
            .handles
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn ttl(&self) -> std::time::Duration {
        self.inner.config.metadata_ttl
    }

    fn add_handle(&self, handle: Handle) -> u64 {
        let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles().insert(fh, handle);
        fh
    }

    fn handle(&self, fh: u64) -> Result<Handle> {
        self.handles().get(&fh).cloned().ok_or_else(|| {
            Error::refused("", errno::EBADF, format!("file handle {fh} is not open"))
        })
    }

    /// The key of `ino`, and whether it is a directory.
    fn node_key(&self, ino: u64) -> Result<(String, Kind)> {
        let tree = self.tree();
        let node = tree
            .get(ino)
            .ok_or_else(|| Error::refused("", errno::ENOENT, format!("inode {ino} is gone")))?;
        Ok((node.key.clone(), node.kind))
    }

    fn dir_key(&self, ino: u64) -> Result<String> {
        match self.node_key(ino)? {
            (key, Kind::Dir) => Ok(key),
            (key, Kind::File) => Err(Error::refused(&key, errno::ENOTDIR, "not a directory")),
        }
    }

    fn map(&self, key: &str, e: bucketload_store::object_store::Error) -> Error {
        Error::Store(
            self.inner
                .store
                .map_error(e, &bucketload_store::key_path(key)),
        )
    }

    fn refuse_if_read_only(&self, key: &str) -> Result<()> {
        match self.inner.config.read_only {
            true => Err(Error::refused(
                key,
                errno::EROFS,
                "the mount is read-only (--read-only)",
            )),
            false => Ok(()),
        }
    }

    /// The attributes of `name` in `parent`: from the tree while fresh, else from the store
    /// (a HEAD of the key and a one-page LIST under `key/`, at once).
    pub async fn lookup(&self, parent: u64, name: &str) -> Result<Stat> {
        let parent_key = self.dir_key(parent)?;
        let key = join(&parent_key, name);
        if name.len() > NAME_MAX {
            return Err(Error::refused(
                &key,
                errno::ENAMETOOLONG,
                "file name too long",
            ));
        }
        match self.tree().known(parent, name, self.ttl()) {
            Known::Yes(stat) => return Ok(stat),
            Known::No => return Err(Error::not_found(&key)),
            Known::Unsure => {}
        }
        self.lookup_remote(parent, name, &key).await
    }

    async fn lookup_remote(&self, parent: u64, name: &str, key: &str) -> Result<Stat> {
        let store = self.inner.store.object_store();
        let path = bucketload_store::key_path(key);
        let head = store.head(&path);
        // Listed as bucketload lists (keys exactly as stored): a key object_store cannot
        // address (`a//b`, `./x`, a control character) still makes its folder a directory,
        // instead of failing the lookup.
        let first_under = async {
            let mut pages = self.inner.store.list_pages(&format!("{key}/"), true);
            let page = pages.next().await.transpose()?;
            Ok::<_, bucketload_store::Error>(
                page.is_some_and(|p| !p.objects.is_empty() || !p.prefixes.is_empty()),
            )
        };
        let (head, under) = tokio::join!(head, first_under);
        let now = Checked::At(Instant::now());
        // A prefix shadows an object of the same name, as in Mountpoint.
        let entry = match (head, under) {
            (_, Ok(true)) => Entry::dir(name),
            (Ok(meta), _) => file_entry(name, &meta),
            (Err(bucketload_store::object_store::Error::NotFound { .. }), Ok(false)) => {
                let gone = self.tree().child(parent, name);
                if let Some(ino) = gone {
                    let mut tree = self.tree();
                    if tree.get(ino).is_some_and(|n| !n.local && !n.writing) {
                        tree.unlink(ino);
                    }
                }
                return Err(Error::not_found(key));
            }
            (Err(bucketload_store::object_store::Error::NotFound { .. }), Err(e)) => {
                return Err(Error::Store(e));
            }
            (Err(e), _) => return Err(self.map(key, e)),
        };
        let mut tree = self.tree();
        let ino = tree.upsert(parent, entry, now);
        tree.get(ino)
            .map(|n| n.stat(ino))
            .ok_or_else(|| Error::not_found(key))
    }

    /// The attributes of `ino`; a file whose metadata is older than the TTL is checked with a
    /// HEAD.
    pub async fn getattr(&self, ino: u64) -> Result<Stat> {
        let (stat, key, fresh, parent, name) = {
            let tree = self.tree();
            let node = tree
                .get(ino)
                .ok_or_else(|| Error::refused("", errno::ENOENT, format!("inode {ino} is gone")))?;
            let fresh = node.kind == Kind::Dir
                || node.local
                || node.writing
                || node.checked.fresh(self.ttl());
            (
                node.stat(ino),
                node.key.clone(),
                fresh,
                node.parent,
                node.name.clone(),
            )
        };
        if fresh {
            return Ok(stat);
        }
        let store = self.inner.store.object_store();
        match store.head(&bucketload_store::key_path(&key)).await {
            Ok(meta) => {
                let mut tree = self.tree();
                let ino = tree.upsert(
                    parent,
                    file_entry(&name, &meta),
                    Checked::At(Instant::now()),
                );
                tree.get(ino)
                    .map(|n| n.stat(ino))
                    .ok_or_else(|| Error::not_found(&key))
            }
            Err(bucketload_store::object_store::Error::NotFound { .. }) => {
                self.tree().unlink(ino);
                Err(Error::not_found(&key))
            }
            Err(e) => Err(self.map(&key, e)),
        }
    }

    /// Lists `ino` if its listing is older than the TTL; returns its entries.
    async fn list_dir(&self, ino: u64) -> Result<Vec<DirEntry>> {
        let key = self.dir_key(ino)?;
        let fresh = self
            .tree()
            .get(ino)
            .is_some_and(|n| n.listed.fresh(self.ttl()));
        if !fresh {
            // Keys as stored: a folder marker is its directory, and a key or folder with an
            // empty segment (`a//b`) is not shown instead of failing the whole listing.
            let folder = match key.as_str() {
                "" => String::new(),
                k => format!("{k}/"),
            };
            let pages: Vec<bucketload_store::ListPage> = self
                .inner
                .store
                .list_pages(&folder, true)
                .try_collect()
                .await
                .map_err(Error::Store)?;
            let entries = listed_entries(&self.inner.store, &folder, &pages);
            self.tree()
                .apply_listing(ino, entries, Checked::At(Instant::now()));
        }
        let tree = self.tree();
        Ok(tree
            .children(ino)
            .into_iter()
            .filter_map(|(ino, name, kind)| {
                let stat = tree.get(ino)?.stat(ino);
                Some(DirEntry {
                    ino,
                    name,
                    kind,
                    stat,
                })
            })
            .collect())
    }

    /// Opens a directory: lists it (unless fresh) and keeps the entries for `readdir`.
    pub async fn opendir(&self, ino: u64) -> Result<u64> {
        let entries = self.list_dir(ino).await?;
        Ok(self.add_handle(Handle::Dir(Arc::new(entries))))
    }

    /// The entries of an open directory from position `offset` on.
    pub fn readdir(&self, fh: u64) -> Result<Arc<Vec<DirEntry>>> {
        match self.handle(fh)? {
            Handle::Dir(entries) => Ok(entries),
            _ => Err(Error::refused("", errno::ENOTDIR, "not a directory handle")),
        }
    }

    /// Closes a directory handle.
    pub fn releasedir(&self, fh: u64) {
        self.handles().remove(&fh);
    }

    /// Opens a file for reading, or for replacing with `O_TRUNC`.
    pub async fn open(&self, ino: u64, mode: OpenMode, pid: u32) -> Result<u64> {
        let (key, kind) = self.node_key(ino)?;
        if kind == Kind::Dir {
            return Err(Error::refused(&key, errno::EISDIR, "is a directory"));
        }
        let writing = self.tree().get(ino).is_some_and(|n| n.writing);
        if writing {
            return Err(Error::refused(
                &key,
                errno::EBUSY,
                "the file is being written through the mount; open it after it is closed",
            ));
        }
        if mode.write {
            let appends = self.appends(mode);
            if !appends {
                writing::refuse_append(&key, mode)?;
            }
            self.check_replace(&key)?;
            let start = match (mode.truncate, appends) {
                (true, _) => Start::Empty,
                (false, true) => Start::Append(self.getattr(ino).await?.size),
                (false, false) => self.load_for_edit(ino, &key).await?,
            };
            return self.start_writer(ino, &key, pid, start).await;
        }
        let stat = self.getattr(ino).await?;
        let etag = self
            .tree()
            .get(ino)
            .and_then(|n| bucketload_store::ETag::from_store(n.etag.as_deref()));
        let reader = FileReader::new(self.inner.read.clone(), &key, stat.size, etag);
        Ok(self.add_handle(Handle::Read(Arc::new(AsyncMutex::new(reader)))))
    }

    /// Up to `len` bytes of an open file at `offset`.
    pub async fn read(&self, fh: u64, offset: u64, len: u32) -> Result<Bytes> {
        match self.handle(fh)? {
            Handle::Read(reader) => reader.lock().await.read(offset, len).await,
            Handle::Write(_, writer) => {
                writer.lock().await.read_held(offset, len).ok_or_else(|| {
                    Error::refused(
                        "",
                        errno::EBADF,
                        "the file is open for writing and larger than one part (--part-size); \
                     reading it back needs a new open after close",
                    )
                })
            }
            Handle::Dir(_) => Err(Error::refused("", errno::EISDIR, "is a directory")),
        }
    }

    /// Deletes the object `name` in `parent` (needs `--allow-delete`).
    pub async fn unlink(&self, parent: u64, name: &str) -> Result<()> {
        let stat = self.lookup(parent, name).await?;
        let key = self.node_key(stat.ino)?.0;
        self.refuse_if_read_only(&key)?;
        if stat.kind == Kind::Dir {
            return Err(Error::refused(
                &key,
                errno::EISDIR,
                "is a directory; use rmdir",
            ));
        }
        let refused =
            || Error::refused(&key, errno::EPERM, "deleting objects needs --allow-delete");
        // A new file not uploaded yet has no object to delete: no flag is needed.
        let new_file = stat.writing && self.tree().get(stat.ino).is_some_and(|n| n.local);
        if !self.inner.config.allow_delete && !new_file {
            return Err(refused());
        }
        if stat.writing {
            // `touch f && rm f`, a temporary file, vim's swap probe: the name goes, and the
            // upload with it. A file that was never uploaded is then gone.
            self.discard_writers(stat.ino, &key).await;
            if self.tree().get(stat.ino).is_none_or(|n| n.key != key) {
                self.tree().keep_dirs(parent);
                return Ok(());
            }
        }
        if !self.inner.config.allow_delete {
            // Its upload completed just before (the release after the program's close).
            return Err(refused());
        }
        self.inner
            .store
            .delete_key(&bucketload_store::key_path(&key))
            .await
            .map_err(|e| self.map(&key, e))?;
        let mut tree = self.tree();
        tree.unlink(stat.ino);
        tree.keep_dirs(parent);
        Ok(())
    }

    /// Makes a directory; it exists in the mount only until a file is written in it.
    pub async fn mkdir(&self, parent: u64, name: &str) -> Result<Stat> {
        let key = join(&self.dir_key(parent)?, name);
        self.refuse_if_read_only(&key)?;
        match self.lookup(parent, name).await {
            Ok(_) => return Err(Error::refused(&key, errno::EEXIST, "already exists")),
            Err(Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        let mut tree = self.tree();
        let ino = tree.insert_local(parent, name, Kind::Dir);
        if let Some(node) = tree.get_mut(ino) {
            node.listed = Checked::At(Instant::now());
        }
        tree.get(ino)
            .map(|n| n.stat(ino))
            .ok_or_else(|| Error::not_found(&key))
    }

    /// Removes an empty directory.
    pub async fn rmdir(&self, parent: u64, name: &str) -> Result<()> {
        let stat = self.lookup(parent, name).await?;
        let key = self.node_key(stat.ino)?.0;
        self.refuse_if_read_only(&key)?;
        if stat.kind != Kind::Dir {
            return Err(Error::refused(&key, errno::ENOTDIR, "not a directory"));
        }
        if !self.list_dir(stat.ino).await?.is_empty() {
            return Err(Error::refused(
                &key,
                errno::ENOTEMPTY,
                "directory not empty",
            ));
        }
        if self.remove_folder_marker(&key).await? {
            tracing::debug!(key, "mount: deleted the folder marker");
        }
        let mut tree = self.tree();
        tree.unlink(stat.ino);
        tree.keep_dirs(parent);
        Ok(())
    }

    /// Deletes the folder marker (`key/`) of an empty directory, so that it does not come
    /// back; returns whether there was one. Keys under it that the mount does not show (see
    /// [`listed_entries`]) make it `ENOTEMPTY`; a marker to delete needs `--allow-delete`.
    async fn remove_folder_marker(&self, key: &str) -> Result<bool> {
        let folder = format!("{key}/");
        let mut pages = self.inner.store.list_pages(&folder, false);
        let mut marker = false;
        while let Some(page) = pages.next().await {
            for object in page.map_err(Error::Store)?.objects {
                match object.key == folder {
                    true => marker = true,
                    false => {
                        return Err(Error::refused(
                            key,
                            errno::ENOTEMPTY,
                            format!(
                                "the directory holds `{}`, a key the mount does not show; \
                                 delete it with boto3 or the AWS CLI",
                                object.key.escape_debug()
                            ),
                        ));
                    }
                }
            }
        }
        if !marker {
            return Ok(false);
        }
        if !self.inner.config.allow_delete {
            return Err(Error::refused(
                key,
                errno::EPERM,
                "the directory is a folder marker in the store; deleting it needs --allow-delete",
            ));
        }
        self.inner
            .store
            .delete_folder_marker(key)
            .await
            .map_err(Error::Store)?;
        Ok(true)
    }

    /// Renames a closed file: a server-side copy, then a delete of the old name. Replacing an
    /// existing file needs `--allow-overwrite`; directories are refused with `EXDEV`.
    pub async fn rename(
        &self,
        parent: u64,
        name: &str,
        new_parent: u64,
        new_name: &str,
        no_replace: bool,
    ) -> Result<()> {
        let src = self.lookup(parent, name).await?;
        let src_key = self.node_key(src.ino)?.0;
        let dst_key = join(&self.dir_key(new_parent)?, new_name);
        self.refuse_if_read_only(&src_key)?;
        if src_key == dst_key {
            return Ok(());
        }
        self.check_rename_source(&src_key, &src)?;
        match self.lookup(new_parent, new_name).await {
            Ok(dst) => self.check_rename_target(&dst_key, &dst, no_replace)?,
            Err(Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        let store = self.inner.store.object_store();
        let (from, to) = (
            bucketload_store::key_path(&src_key),
            bucketload_store::key_path(&dst_key),
        );
        store
            .copy(&from, &to)
            .await
            .map_err(|e| self.map(&src_key, e))?;
        self.inner
            .store
            .delete_key(&from)
            .await
            .map_err(|e| self.map(&src_key, e))?;
        // The copy's ETag is not known: the next open asks the store.
        let mut tree = self.tree();
        tree.rename(src.ino, new_parent, new_name);
        tree.keep_dirs(parent);
        Ok(())
    }

    fn check_rename_source(&self, key: &str, src: &Stat) -> Result<()> {
        if src.kind == Kind::Dir {
            return Err(Error::refused(
                key,
                errno::EXDEV,
                "directories are not renamed (an object store has no directories); `mv` copies \
                 them file by file instead",
            ));
        }
        if src.writing {
            return Err(Error::refused(
                key,
                errno::EBUSY,
                "the file is being written; close it first",
            ));
        }
        if src.size > MAX_COPY {
            return Err(Error::refused(
                key,
                errno::EFBIG,
                "objects over 5 GiB cannot be renamed (S3 copies at most 5 GiB in one request)",
            ));
        }
        Ok(())
    }

    fn check_rename_target(&self, key: &str, dst: &Stat, no_replace: bool) -> Result<()> {
        if no_replace {
            return Err(Error::refused(
                key,
                errno::EEXIST,
                "already exists (RENAME_NOREPLACE)",
            ));
        }
        if dst.kind == Kind::Dir {
            return Err(Error::refused(key, errno::EISDIR, "is a directory"));
        }
        if dst.writing {
            return Err(Error::refused(
                key,
                errno::EBUSY,
                "the file is being written",
            ));
        }
        if !self.inner.config.allow_overwrite {
            return Err(Error::refused(
                key,
                errno::EPERM,
                "renaming onto an existing object replaces it and needs --allow-overwrite",
            ));
        }
        Ok(())
    }
}

/// The entries of one directory's listing (`folder` is its key with a trailing `/`, or `""`).
/// A key or folder that has no file name the mount can address — an empty segment (`a//b`),
/// `.` or `..`, a control character, a name over 255 bytes — is skipped with a warning naming
/// it; the rest of the directory is listed.
fn listed_entries(store: &Store, folder: &str, pages: &[bucketload_store::ListPage]) -> Vec<Entry> {
    let skip = |key: &str, why: &str| {
        tracing::warn!(
            uri = %store.uri().join(key),
            "mount: not shown in its directory: {why}"
        );
    };
    let mut entries = Vec::new();
    for object in pages.iter().flat_map(|p| &p.objects) {
        match object.kind() {
            bucketload_store::ListedKind::Object(meta) => match meta.location.filename() {
                Some(name) if name.len() > NAME_MAX => skip(&object.key, TOO_LONG),
                Some(name) => entries.push(file_entry(name, &meta)),
                None => {}
            },
            bucketload_store::ListedKind::Folder => {}
            bucketload_store::ListedKind::Unaddressable => skip(&object.key, UNADDRESSABLE),
        }
    }
    for dir in pages.iter().flat_map(|p| &p.prefixes) {
        let name = dir
            .get(folder.len()..)
            .and_then(|d| d.strip_suffix('/'))
            .unwrap_or_default();
        if name.is_empty() || name.contains('/') {
            continue;
        }
        if name.len() > NAME_MAX {
            skip(dir, TOO_LONG);
        } else if bucketload_store::object_store::path::Path::parse(name)
            .is_ok_and(|p| p.as_ref() == name)
        {
            entries.retain(|e| e.name != name);
            entries.push(Entry::dir(name));
        } else {
            skip(dir, UNADDRESSABLE);
        }
    }
    entries
}

/// Why a listed key is not shown: its name is longer than a file name may be.
const TOO_LONG: &str = "the name is longer than 255 bytes, the longest file name Linux accepts; \
                        read it with `bucketload cp` or boto3";
/// Why a listed key is not shown: the mount cannot address it.
const UNADDRESSABLE: &str = "the key has an empty segment, a `.` or `..` segment or a control \
                             character, which the store client cannot address; read it with \
                             boto3, or copy it to a plain key";

fn file_entry(name: &str, meta: &ObjectMeta) -> Entry {
    Entry {
        name: name.to_owned(),
        kind: Kind::File,
        size: meta.size,
        etag: meta.e_tag.clone(),
        mtime: SystemTime::from(meta.last_modified),
    }
}

/// Puts every file of a manifest in the tree; the directories it implies are complete forever,
/// except `_bucketload/`, which is listed from the store.
fn fill_from_manifest(tree: &mut Tree, manifest: &Manifest, manifest_key: &str) {
    let now = SystemTime::now();
    let mut dirs = std::collections::HashSet::from([ROOT]);
    let mut add =
        |tree: &mut Tree, key: &str, size: u64, etag: Option<String>, checked: Checked| {
            let mut parts: Vec<&str> = key.split('/').filter(|p| !p.is_empty()).collect();
            let Some(name) = parts.pop() else {
                return;
            };
            let parent = tree.ensure_dirs(&parts, Checked::Forever);
            let mut ino = parent;
            while ino != ROOT && dirs.insert(ino) {
                ino = tree.get(ino).map_or(ROOT, |n| n.parent);
            }
            let entry = Entry {
                name: name.to_owned(),
                kind: Kind::File,
                size,
                etag,
                mtime: now,
            };
            tree.upsert(parent, entry, checked);
        };
    match manifest.kind {
        DatasetKind::Files => {
            for f in &manifest.files {
                // Compared as an `ETag` when read: the manifest's bare spelling is the store's.
                add(tree, &f.key, f.size, f.etag.clone(), Checked::Forever);
            }
        }
        DatasetKind::Shards => {
            for s in &manifest.shards {
                add(tree, &s.name, s.bytes, None, Checked::Forever);
                // The index's size is not in the manifest: a lookup asks the store.
                add(tree, &s.index, 0, None, Checked::Never);
            }
        }
    }
    add(tree, manifest_key, 0, None, Checked::Never);
    let meta_dir = manifest_key
        .split('/')
        .next()
        .and_then(|d| tree.child(ROOT, d));
    for ino in dirs {
        if Some(ino) != meta_dir
            && let Some(node) = tree.get_mut(ino)
        {
            node.listed = Checked::Forever;
        }
    }
}
