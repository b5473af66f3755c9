//! Lists a store: one level (directories and objects, like `aws s3 ls`) or everything below.
//!
//! Listings come from [`bucketload_store::Store::list_pages`], which keeps keys exactly as
//! the store holds them, and every key is sorted into what it is for a dataset:
//!
//! - an object, read like any other;
//! - a **folder marker**, a key ending in `/` (the S3 console's "Create folder", `aws s3api
//!   put-object --key dir/`): a folder, never a sample. One that holds bytes is skipped with a
//!   warning naming it;
//! - a key object_store's paths cannot spell (`a//b`, a tab, a `..` segment): listed by `ls`,
//!   read by files datasets (the loader, `stats`, `manifest`, `cp -r`) through
//!   [`Location::get_key`](super::Location::get_key), left out with a warning naming it by the
//!   commands that still read through paths (the shard tools).

use bucketload_store::object_store::{ObjectMeta, path::Path};
use bucketload_store::{ListPage, Listed, ListedKind};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};

use super::{DataKey, Location};
use crate::error::{Error, Result};

/// One line of a listing.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Entry {
    /// A folder, its key relative to the location's root and ending in `/` (`""` for the
    /// root itself): a common prefix in a one-level listing, a folder marker in a recursive
    /// one. A one-level listing of a folder that has a marker also yields that marker.
    Dir(String),
    /// An object.
    Object(ObjectMeta),
    /// An object whose key object_store cannot spell (`a//b`, a tab, …;
    /// [`bucketload_store::unspellable`] says why), read through [`super::DataKey`].
    Unaddressable(Listed),
}

/// Totals of a listing (`--summarize`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ListReport {
    /// Objects listed.
    pub objects: u64,
    /// Their total size in bytes.
    pub bytes: u64,
    /// Directories listed.
    pub dirs: u64,
}

impl ListReport {
    /// Adds one entry to the totals.
    pub fn add(&mut self, entry: &Entry) {
        match entry {
            Entry::Dir(_) => self.dirs += 1,
            Entry::Object(meta) => {
                self.objects += 1;
                self.bytes += meta.size;
            }
            Entry::Unaddressable(listed) => {
                self.objects += 1;
                self.bytes += listed.size;
            }
        }
    }
}

/// The pages of the listing of `prefix` (`""`, or a folder ending in `/`), keys as stored.
fn pages(
    location: &Location,
    prefix: &str,
    delimiter: bool,
) -> BoxStream<'static, Result<ListPage>> {
    match location.handle() {
        Some(store) => store
            .list_pages(prefix, delimiter)
            .map_err(Error::Store)
            .boxed(),
        None => {
            let (location, key) = (location.clone(), Path::from(prefix));
            bucketload_store::list_object_store(location.store().clone(), prefix, delimiter)
                .map_err(move |e| location.error(&key, e))
                .boxed()
        }
    }
}

/// `prefix` as a listing prefix: `""` or ending in `/`.
fn folder(prefix: Option<&Path>) -> String {
    match prefix {
        Some(p) if !p.as_ref().is_empty() => format!("{p}/"),
        _ => String::new(),
    }
}

/// Logs that a folder marker holding bytes is not read (an empty one is an ordinary folder).
fn warn_full_marker(location: &Location, listed: &Listed) {
    if listed.size > 0 {
        tracing::warn!(
            "{}: a folder marker (its key ends in `/`) holding {} bytes: a folder, not an \
             object, so it is skipped; copy it to a key without the trailing `/` to read it",
            location.uri_of_key(&listed.key),
            listed.size
        );
    }
}

/// Logs that an object whose key object_store's paths cannot spell is left out by a command
/// that reads through them (the shard tools), saying why.
pub(crate) fn warn_unaddressable(location: &Location, key: &str) {
    let why = bucketload_store::unspellable(key).unwrap_or("cannot be spelled");
    tracing::warn!(
        "{}: the key {why}, which this command cannot read (the loader, `read`, `stats`, \
         `manifest`, `verify` and `cp -r` can), so the object is left out; copy it to a key without it (e.g. with \
         `aws s3 cp`) to include it",
        location.uri_of_key(key)
    );
}

/// The entry of a listed key; folder markers holding bytes are logged.
fn entry(location: &Location, listed: Listed) -> Entry {
    match listed.kind() {
        ListedKind::Object(meta) => Entry::Object(meta),
        ListedKind::Folder => {
            warn_full_marker(location, &listed);
            Entry::Dir(listed.key)
        }
        ListedKind::Unaddressable => Entry::Unaddressable(listed),
    }
}

/// Lists `prefix` (the root when `None`) in `location`, one level or recursively, page by page
/// as the store answers: nothing beyond one page is held.
///
/// A recursive listing yields folder markers as [`Entry::Dir`]. A one-level listing yields each
/// page's directories, then its objects, each sorted (a local folder answers in one page, in
/// directory order), as `aws s3 ls` prints them; it includes the folder marker of `prefix`
/// itself, if any, as an [`Entry::Dir`] of `prefix` (`""` for the root).
pub fn list(
    location: &Location,
    prefix: Option<Path>,
    recursive: bool,
) -> BoxStream<'static, Result<Entry>> {
    let location = location.clone();
    let prefix = folder(prefix.as_ref());
    let delimiter = !recursive;
    pages(&location, &prefix, delimiter)
        .map_ok(move |page| {
            let mut dirs = page.prefixes;
            dirs.sort();
            // A folder marker in a one-level page can only be the listed folder's own.
            let mut objects: Vec<Entry> = page
                .objects
                .into_iter()
                .map(|l| entry(&location, l))
                .collect();
            if delimiter {
                objects.sort_by(|a, b| key_of(a).cmp(key_of(b)));
            }
            let entries = dirs.into_iter().map(Entry::Dir).chain(objects);
            futures::stream::iter(entries.map(Ok))
        })
        .try_flatten()
        .boxed()
}

fn key_of(entry: &Entry) -> &str {
    match entry {
        Entry::Dir(key) => key,
        Entry::Object(meta) => meta.location.as_ref(),
        Entry::Unaddressable(listed) => &listed.key,
    }
}

/// True if a recursive listing of `location` comes in key order (UTF-8 byte order), as S3's
/// does; local folders list in directory order, and S3 directory buckets (`…--x-s3`) in no
/// particular order.
pub(crate) fn lists_in_key_order(location: &Location) -> bool {
    location.handle().is_some_and(|store| {
        let uri = store.uri();
        uri.scheme() == bucketload_store::Scheme::S3 && !uri.bucket().ends_with("--x-s3")
    })
}

/// Pages [`list_in_order`] lists ahead of its reader: two round trips' worth, a few KB a page.
const PAGES_AHEAD: usize = 2;

/// Listing requests in flight in [`list_all`].
const LIST_FAN_OUT: usize = 32;

/// Every object below the location's root, sorted by key, listed in parallel.
///
/// Folder markers are left out (they are folders, not objects); keys object_store cannot spell
/// too, each with a warning naming it ([`list_all_keys`] keeps them).
///
/// A flat listing is one page of 1,000 keys after another, one round trip each: 100 pages for
/// 100,000 objects. This lists the root with a delimiter (descending through levels that hold
/// a single folder and nothing else), then lists every folder found there in parallel, so a
/// class-per-folder dataset costs about two round trips plus the pages of its largest class.
/// It sends at most one request per folder more than a flat listing.
pub async fn list_all(location: &Location) -> Result<Vec<ObjectMeta>> {
    let mut objects: Vec<ObjectMeta> = listed_below(location)
        .await?
        .into_iter()
        .filter_map(|l| match entry(location, l) {
            Entry::Object(meta) => Some(meta),
            Entry::Unaddressable(l) => {
                warn_unaddressable(location, &l.key);
                None
            }
            Entry::Dir(_) => None,
        })
        .collect();
    objects.sort_by(|a, b| a.location.cmp(&b.location));
    Ok(objects)
}

/// An object of [`list_all_keys`]: its key as the store holds it, size and ETag.
#[derive(Debug, Clone)]
pub struct KeyedObject {
    /// The key relative to the location's root.
    pub key: DataKey,
    /// Size in bytes.
    pub size: u64,
    /// The ETag, as the store sent it.
    pub e_tag: Option<String>,
}

/// Every object below the location's root, sorted by key, as [`list_all`] lists them, keys
/// object_store cannot spell (`a//b`, a tab) included as they are: a dataset reads them through
/// [`Location::get_key`]. Folder markers are left out.
pub async fn list_all_keys(location: &Location) -> Result<Vec<KeyedObject>> {
    let mut objects: Vec<KeyedObject> = listed_below(location)
        .await?
        .into_iter()
        .filter_map(|l| keyed(location, l))
        .collect();
    objects.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(objects)
}

/// Every object below the location's root as [`list_all_keys`] gives them (keys as the store
/// holds them, folder markers left out), but streamed, in no particular order: folders are
/// listed in parallel as [`list_all`] does, and pages are yielded as they arrive, so memory
/// holds a few pages (and the names of the folders) however many objects there are.
pub fn list_each(location: &Location) -> BoxStream<'static, Result<KeyedObject>> {
    let location = location.clone();
    listed_pages(&location)
        .map_ok(move |objects| {
            let location = location.clone();
            let keyed = objects.into_iter().filter_map(move |l| keyed(&location, l));
            futures::stream::iter(keyed.map(Ok))
        })
        .try_flatten()
        .boxed()
}

/// Every object below the location's root as [`list_each`] gives them (keys as the store holds
/// them, folder markers left out), in the store's order: one flat listing, page after page, one
/// page in memory. S3 lists in key order (UTF-8 bytes; [`lists_in_key_order`] says which stores
/// do), so a caller can merge it with another sorted stream; one that relies on the order must
/// still check it. One round trip per 1,000 keys, in sequence (the price of the order): a task
/// lists [`PAGES_AHEAD`] pages ahead of the reader so the round trips overlap its work. Must be
/// called within a Tokio runtime; dropping the stream stops the listing after a page at most.
pub(crate) fn list_in_order(location: &Location) -> BoxStream<'static, Result<KeyedObject>> {
    let location = location.clone();
    let (tx, rx) = tokio::sync::mpsc::channel(PAGES_AHEAD);
    let mut listing = pages(&location, "", false);
    tokio::spawn(async move {
        while let Some(page) = listing.next().await {
            let failed = page.is_err();
            if tx.send(page).await.is_err() || failed {
                break;
            }
        }
    });
    futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|page| (page, rx))
    })
    .map_ok(move |page| {
        let location = location.clone();
        let keyed = page
            .objects
            .into_iter()
            .filter_map(move |l| keyed(&location, l));
        futures::stream::iter(keyed.map(Ok))
    })
    .try_flatten()
    .boxed()
}

/// The [`KeyedObject`] of a listed key; `None` for a folder marker.
fn keyed(location: &Location, listed: Listed) -> Option<KeyedObject> {
    match entry(location, listed) {
        Entry::Object(meta) => Some(KeyedObject {
            key: DataKey::Path(meta.location),
            size: meta.size,
            e_tag: meta.e_tag,
        }),
        Entry::Unaddressable(l) => Some(KeyedObject {
            key: DataKey::new(&l.key),
            size: l.size,
            e_tag: l.e_tag,
        }),
        Entry::Dir(_) => None,
    }
}

/// Where [`listed_pages`] is.
enum Walk {
    /// Listing one level with a delimiter, gathering its folders.
    Level {
        pages: BoxStream<'static, Result<ListPage>>,
        folders: Vec<String>,
        /// Nothing but folder markers listed at this level so far.
        markers_only: bool,
    },
    /// Listing the folders of the last level, in parallel.
    Folders(BoxStream<'static, Result<ListPage>>),
}

/// The keys below the location's root, folder markers included, page by page: the root (and
/// the levels that hold a single folder and nothing else) with a delimiter, then every folder
/// found there, [`LIST_FAN_OUT`] at a time (see [`list_all`]).
fn listed_pages(location: &Location) -> BoxStream<'static, Result<Vec<Listed>>> {
    let location = location.clone();
    let start = Walk::Level {
        pages: pages(&location, "", true),
        folders: Vec::new(),
        markers_only: true,
    };
    futures::stream::try_unfold(start, move |mut walk| {
        let location = location.clone();
        async move {
            loop {
                walk = match walk {
                    Walk::Level {
                        mut pages,
                        mut folders,
                        mut markers_only,
                    } => match pages.try_next().await? {
                        Some(page) => {
                            markers_only &= page
                                .objects
                                .iter()
                                .all(|o| matches!(o.kind(), ListedKind::Folder));
                            folders.extend(page.prefixes);
                            let walk = Walk::Level {
                                pages,
                                folders,
                                markers_only,
                            };
                            return Ok(Some((page.objects, walk)));
                        }
                        // The level's own folder marker does not make it hold anything.
                        None if folders.len() == 1 && markers_only => Walk::Level {
                            pages: self::pages(&location, &folders[0], true),
                            folders: Vec::new(),
                            markers_only: true,
                        },
                        None => {
                            let at = location.clone();
                            let below = futures::stream::iter(folders)
                                .map(move |folder| self::pages(&at, &folder, false))
                                .flatten_unordered(LIST_FAN_OUT);
                            Walk::Folders(below.boxed())
                        }
                    },
                    Walk::Folders(mut below) => {
                        return Ok(below
                            .try_next()
                            .await?
                            .map(|page| (page.objects, Walk::Folders(below))));
                    }
                };
            }
        }
    })
    .boxed()
}

/// Every key below the location's root, folder markers included, listed in parallel (see
/// [`list_all`]).
async fn listed_below(location: &Location) -> Result<Vec<Listed>> {
    let (mut listed, folders) = top_level(location).await?;
    let mut lists = futures::stream::iter(folders)
        .map(|folder| pages(location, &folder, false).try_collect::<Vec<ListPage>>())
        .buffer_unordered(LIST_FAN_OUT);
    while let Some(level) = lists.next().await {
        listed.extend(level?.into_iter().flat_map(|page| page.objects));
    }
    Ok(listed)
}

/// The keys of the top level (descending through levels that hold a single folder and
/// nothing else) and the folders found there.
async fn top_level(location: &Location) -> Result<(Vec<Listed>, Vec<String>)> {
    let mut listed = Vec::new();
    let mut prefix = String::new();
    loop {
        let mut folders = Vec::new();
        let mut level = pages(location, &prefix, true);
        let before = listed.len();
        while let Some(page) = level.try_next().await? {
            listed.extend(page.objects);
            folders.extend(page.prefixes);
        }
        // The level's own folder marker does not make it hold anything.
        let only_one_folder = folders.len() == 1
            && listed[before..]
                .iter()
                .all(|o| matches!(o.kind(), ListedKind::Folder));
        if !only_one_folder {
            return Ok((listed, folders));
        }
        prefix = folders.swap_remove(0);
    }
}

/// Every object below the location's root, in the order of [`list_all_keys`] (by key, keys
/// object_store cannot spell included, folder markers left out), handed to `each` as key, size
/// and ETag without collecting the listing: the top level is held, then folders are listed in
/// parallel and handed over one by one, in order. Memory holds the top level's keys and at most
/// [`LIST_FAN_OUT`] folders' (a class-per-folder dataset: a few classes), not the dataset's.
pub async fn for_each_key(
    location: &Location,
    mut each: impl FnMut(&str, u64, Option<&str>),
) -> Result<()> {
    let (mut level, mut folders) = top_level(location).await?;
    level.sort_by(|a, b| a.key.cmp(&b.key));
    folders.sort();
    let mut level = level.into_iter().peekable();
    let mut emit = |listed: Listed| match entry(location, listed) {
        Entry::Object(meta) => each(meta.location.as_ref(), meta.size, meta.e_tag.as_deref()),
        Entry::Unaddressable(l) => each(&l.key, l.size, l.e_tag.as_deref()),
        Entry::Dir(_) => {}
    };
    let mut lists = futures::stream::iter(folders)
        .map(|folder| async move {
            let pages: Vec<ListPage> = pages(location, &folder, false).try_collect().await?;
            Ok::<_, Error>((folder, pages))
        })
        .buffered(LIST_FAN_OUT);
    while let Some((folder, pages)) = lists.try_next().await? {
        // A key of the level that sorts before the folder sorts before every key in it.
        while let Some(listed) = level.next_if(|l| l.key.as_str() < folder.as_str()) {
            emit(listed);
        }
        let mut objects: Vec<Listed> = pages.into_iter().flat_map(|p| p.objects).collect();
        objects.sort_by(|a, b| a.key.cmp(&b.key));
        objects.into_iter().for_each(&mut emit);
    }
    level.for_each(emit);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucketload_store::object_store::{ObjectStore, ObjectStoreExt, memory::InMemory};
    use std::sync::Arc;

    async fn flat(store: &Arc<dyn ObjectStore>) -> Vec<(String, u64)> {
        let mut all: Vec<(String, u64)> = store
            .list(None)
            .map_ok(|m| (m.location.to_string(), m.size))
            .try_collect()
            .await
            .unwrap();
        all.sort();
        all
    }

    #[tokio::test]
    async fn the_parallel_listing_finds_what_a_flat_one_finds() {
        let layouts: [&[&str]; 5] = [
            &[],
            &["only.txt"],
            &[
                "a/1.jpg",
                "a/2.jpg",
                "b/3.jpg",
                "top.txt",
                "b/deep/er/4.jpg",
                "c/5",
            ],
            &[
                "one/two/three/x.jpg",
                "one/two/three/y.jpg",
                "one/two/z.jpg",
            ],
            &["one/two/x.jpg", "one/y.jpg"],
        ];
        for keys in layouts {
            let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
            for (i, key) in keys.iter().enumerate() {
                store
                    .put(&Path::from(*key), vec![0u8; i + 1].into())
                    .await
                    .unwrap();
            }
            let loc = Location::new(store.clone(), "mem://", "memory");
            let got: Vec<(String, u64)> = list_all(&loc)
                .await
                .unwrap()
                .into_iter()
                .map(|m| (m.location.to_string(), m.size))
                .collect();
            assert_eq!(got, flat(&store).await, "{keys:?}");
            let mut each: Vec<(String, u64)> = list_each(&loc)
                .map_ok(|o| (o.key.as_str().to_owned(), o.size))
                .try_collect()
                .await
                .unwrap();
            each.sort();
            assert_eq!(each, flat(&store).await, "streamed: {keys:?}");
            let mut streamed = Vec::new();
            for_each_key(&loc, |key, size, _| streamed.push((key.to_owned(), size)))
                .await
                .unwrap();
            assert_eq!(streamed, flat(&store).await, "{keys:?}");
        }
    }

    #[tokio::test]
    async fn lists_one_level_or_everything() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        for key in ["a/1.jpg", "a/2.jpg", "b/3.jpg", "top.txt"] {
            store
                .put(&Path::from(key), vec![0u8; 10].into())
                .await
                .unwrap();
        }
        let loc = Location::new(store, "mem://", "memory");
        let mut flat = ListReport::default();
        for e in list(&loc, None, false)
            .try_collect::<Vec<_>>()
            .await
            .unwrap()
        {
            flat.add(&e);
        }
        assert_eq!(
            flat,
            ListReport {
                objects: 1,
                bytes: 10,
                dirs: 2
            }
        );
        let mut deep = ListReport::default();
        for e in list(&loc, Some(Path::from("a")), true)
            .try_collect::<Vec<_>>()
            .await
            .unwrap()
        {
            deep.add(&e);
        }
        assert_eq!(
            deep,
            ListReport {
                objects: 2,
                bytes: 20,
                dirs: 0
            }
        );
    }
}
