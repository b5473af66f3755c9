//! ListObjectsV2 over the directory tree, in S3 order (UTF-8 byte order of whole keys).
//!
//! Each directory's entries are decoded into key segments ([`super::keys`]) and sorted by
//! them, with '/' appended to directory names; that visits keys in global byte order: every
//! key below directory `d` starts with `d/`, and no other entry of the parent starts with
//! `d/` since segments hold no '/'. The object a directory holds as its own (`d/.bl%self`,
//! the key `d`) sorts before `d/` and after the entries that extend `d` with a byte below '/'
//! (`d!`, `d.txt`): the walk emits it just before the first entry it precedes. The walk
//! starts in the deepest directory the prefix names, binary-searches each sorted directory
//! for the first entry past the start marker, and skips subtrees the marker or a common
//! prefix already covers, so one page costs about `max_keys` stats and sidecar reads however
//! many keys precede it.

use std::fs;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use s3s::S3Error;

use super::dirs::Sorted;
use super::keys;
use super::{ObjectMeta, PATH_MAX, Storage, internal};

/// One ListObjectsV2 request, resolved.
#[derive(Clone, Debug, Default)]
pub(crate) struct ListQuery {
    pub(crate) prefix: String,
    pub(crate) delimiter: Option<String>,
    /// Only keys strictly greater than this are listed.
    pub(crate) after: Option<String>,
    /// Keys starting with this (a common prefix already returned) are skipped.
    pub(crate) skip_prefix: Option<String>,
    pub(crate) max_keys: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ListItem {
    Object(String, ObjectMeta),
    CommonPrefix(String),
}

#[derive(Debug, Default)]
pub(crate) struct ListPage {
    pub(crate) items: Vec<ListItem>,
    pub(crate) truncated: bool,
}

struct Walk<'a> {
    storage: &'a Storage,
    bucket: &'a str,
    bucket_dir: PathBuf,
    query: &'a ListQuery,
    page: ListPage,
}

impl Storage {
    /// Lists one page of a bucket.
    pub(crate) fn list(&self, bucket: &str, query: &ListQuery) -> Result<ListPage, S3Error> {
        let bucket_dir = self.bucket_dir(bucket)?;
        let mut walk = Walk {
            storage: self,
            bucket,
            bucket_dir,
            query,
            page: ListPage::default(),
        };
        if query.max_keys == 0 {
            return Ok(walk.page);
        }
        // The deepest directory fully named by the prefix, and the start of names within it.
        let (dir_key, name_start) = match query.prefix.rfind('/') {
            Some(i) => (&query.prefix[..=i], &query.prefix[i + 1..]),
            None => ("", query.prefix.as_str()),
        };
        let rel = keys::dir_path(dir_key);
        if walk.bucket_dir.join(&rel).as_os_str().len() >= PATH_MAX {
            return Ok(walk.page); // no key can be stored there
        }
        match walk.visit(&rel, dir_key, name_start) {
            Ok(_) => Ok(walk.page),
            Err(e) => Err(internal(e)),
        }
    }
}

impl Walk<'_> {
    /// Visits the entries of the directory `rel` (whose keys start with `dir_key`) whose
    /// segments start with `name_start`; breaks once the page is full.
    fn visit(
        &mut self,
        rel: &Path,
        dir_key: &str,
        name_start: &str,
    ) -> std::io::Result<ControlFlow<()>> {
        let entries = match self.storage.listings.sorted(&self.bucket_dir.join(rel)) {
            Ok(entries) => entries,
            Err(e) if super::is_missing(&e) => return Ok(ControlFlow::Continue(())),
            Err(e) => return Err(e),
        };
        // The folder's own marker sorts before every key inside it.
        if name_start.is_empty() && !dir_key.is_empty() && dir_key.starts_with(&self.query.prefix) {
            let flow = self.visit_marker(dir_key)?;
            if flow.is_break() {
                return Ok(flow);
            }
        }
        let first = self.first_index(&entries, dir_key, name_start);
        // Directories whose own object was visited (a page visits few: no per-entry state).
        let mut own_done = std::collections::HashSet::new();
        for i in first..entries.len() {
            let sort_name = entries.sort_name(i);
            if !sort_name.starts_with(name_start) {
                break;
            }
            for j in owners_before(&entries, i) {
                if !own_done.insert(j) {
                    continue;
                }
                let flow = self.visit_own(rel, dir_key, name_start, &entries, j)?;
                if flow.is_break() {
                    return Ok(flow);
                }
            }
            let key = format!("{dir_key}{sort_name}");
            let is_dir = entries.is_dir(i);
            if self.skipped(&key, is_dir) {
                continue;
            }
            let child = rel.join(entries.name(i));
            let flow = if is_dir {
                self.visit_dir(&child, &key)?
            } else {
                self.visit_file(child.clone(), &child, key)?
            };
            if flow.is_break() {
                return Ok(flow);
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Visits the object a directory entry holds as its own (`.bl%self`), if any.
    fn visit_own(
        &mut self,
        rel: &Path,
        dir_key: &str,
        name_start: &str,
        entries: &Sorted,
        i: usize,
    ) -> std::io::Result<ControlFlow<()>> {
        let Some(segment) = entries.own_segment(i).filter(|s| s.starts_with(name_start)) else {
            return Ok(ControlFlow::Continue(()));
        };
        let key = format!("{dir_key}{segment}");
        let key_rel = rel.join(entries.name(i));
        let data = key_rel.join(keys::SELF);
        if self.skipped(&key, false) || !is_file(&self.bucket_dir.join(&data)) {
            return Ok(ControlFlow::Continue(()));
        }
        self.visit_file(data, &key_rel, key)
    }

    /// Index of the first entry that may hold keys past the start marker and the prefix.
    fn first_index(&self, entries: &Sorted, dir_key: &str, name_start: &str) -> usize {
        let by_prefix = entries.partition_point(|i| entries.sort_name(i) < name_start);
        let by_marker = match self
            .query
            .after
            .as_deref()
            .and_then(|a| a.strip_prefix(dir_key))
        {
            // Entries sorting before the marker hold only smaller keys, except a directory
            // the marker lies in (the last such entry: see the module docs).
            Some(rest) => entries.partition_point(|i| {
                let name = entries.sort_name(i);
                name < rest && !(entries.is_dir(i) && rest.starts_with(name))
            }),
            None => 0,
        };
        by_prefix.max(by_marker)
    }

    /// True when every key of this entry (a key, or a directory ending in '/') is excluded by
    /// the marker or by the common prefix to skip.
    fn skipped(&self, key: &str, is_dir: bool) -> bool {
        if let Some(skip) = &self.query.skip_prefix
            && key.starts_with(skip.as_str())
        {
            return true;
        }
        match &self.query.after {
            Some(after) if is_dir => after.as_str() >= key && !after.starts_with(key),
            Some(after) => key <= after.as_str(),
            None => false,
        }
    }

    fn visit_dir(&mut self, rel: &Path, key: &str) -> std::io::Result<ControlFlow<()>> {
        // With a delimiter inside the directory's own path, the whole subtree is one common
        // prefix: emit it once if the subtree holds a listed key, without walking it.
        if let Some(prefix) = self.common_prefix(key)
            && prefix.len() <= key.len()
        {
            if self.last_prefix() == Some(prefix.as_str()) || !self.has_key(rel, key)? {
                return Ok(ControlFlow::Continue(()));
            }
            return Ok(self.push(ListItem::CommonPrefix(prefix)));
        }
        self.visit(rel, key, "")
    }

    /// Visits the object `key` whose bytes are at `data` and whose key path is `key_rel`
    /// (both relative to the bucket directory).
    fn visit_file(
        &mut self,
        data: PathBuf,
        key_rel: &Path,
        key: String,
    ) -> std::io::Result<ControlFlow<()>> {
        if let Some(prefix) = self.common_prefix(&key) {
            if self.last_prefix() == Some(prefix.as_str()) {
                return Ok(ControlFlow::Continue(()));
            }
            return Ok(self.push(ListItem::CommonPrefix(prefix)));
        }
        let mut path = self.bucket_dir.join(data);
        let Ok(mut stat) = fs::metadata(&path) else {
            return Ok(ControlFlow::Continue(()));
        };
        if stat.is_dir() {
            // Moved into a directory since the directory was read.
            path.push(keys::SELF);
            match fs::metadata(&path) {
                Ok(inner) => stat = inner,
                Err(_) => return Ok(ControlFlow::Continue(())),
            }
        }
        if !stat.is_file() {
            return Ok(ControlFlow::Continue(()));
        }
        let Some(meta) = self.storage.object_meta(self.bucket, key_rel, &stat)? else {
            return Ok(ControlFlow::Continue(())); // deleted since the directory was read
        };
        Ok(self.push(ListItem::Object(key, meta)))
    }

    /// Lists the folder marker `key` (ending in '/') if it exists and is not skipped.
    fn visit_marker(&mut self, key: &str) -> std::io::Result<ControlFlow<()>> {
        if self.skipped(key, false) || !self.storage.has_marker(self.bucket, key) {
            return Ok(ControlFlow::Continue(()));
        }
        let (data, meta_path) = self.storage.marker_paths(self.bucket, key);
        let Ok(stat) = fs::metadata(&data) else {
            return Ok(ControlFlow::Continue(()));
        };
        let found = (self.storage).marker_meta(self.bucket, key, &data, &meta_path, &stat)?;
        let Some(meta) = found else {
            return Ok(ControlFlow::Continue(()));
        };
        Ok(self.push(ListItem::Object(key.to_owned(), meta)))
    }

    /// The common prefix `key` rolls up into, if the delimiter occurs after the prefix.
    fn common_prefix(&self, key: &str) -> Option<String> {
        let delimiter = self.query.delimiter.as_deref().filter(|d| !d.is_empty())?;
        let rest = key.get(self.query.prefix.len()..)?;
        let at = rest.find(delimiter)?;
        Some(format!(
            "{}{}",
            self.query.prefix,
            &rest[..at + delimiter.len()]
        ))
    }

    fn last_prefix(&self) -> Option<&str> {
        match self.page.items.last() {
            Some(ListItem::CommonPrefix(p)) => Some(p),
            _ => None,
        }
    }

    /// True if the subtree `rel` (keys starting with `dir_key`) holds a key not skipped.
    fn has_key(&self, rel: &Path, dir_key: &str) -> std::io::Result<bool> {
        let entries = match self.storage.listings.sorted(&self.bucket_dir.join(rel)) {
            Ok(entries) => entries,
            Err(e) if super::is_missing(&e) => return Ok(false),
            Err(e) => return Err(e),
        };
        if !self.skipped(dir_key, false) && self.storage.has_marker(self.bucket, dir_key) {
            return Ok(true);
        }
        for i in self.first_index(&entries, dir_key, "")..entries.len() {
            let child = rel.join(entries.name(i));
            if let Some(segment) = entries.own_segment(i)
                && !self.skipped(&format!("{dir_key}{segment}"), false)
                && is_file(&self.bucket_dir.join(&child).join(keys::SELF))
            {
                return Ok(true);
            }
            let key = format!("{dir_key}{}", entries.sort_name(i));
            let is_dir = entries.is_dir(i);
            if self.skipped(&key, is_dir) {
                continue;
            }
            if !is_dir || self.has_key(&child, &key)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Adds an item, or notes that the page is full and stops the walk.
    fn push(&mut self, item: ListItem) -> ControlFlow<()> {
        if self.page.items.len() >= self.query.max_keys {
            self.page.truncated = true;
            return ControlFlow::Break(());
        }
        self.page.items.push(item);
        ControlFlow::Continue(())
    }
}

/// Indexes of the directories (at `i` or after) whose own object (`d` of `d/`) sorts before
/// entry `i` or is its own, in key order: `d` is a prefix of entry `i` followed by a byte
/// below '/', since every name between `d` and `d/` starts with `d`.
fn owners_before(entries: &Sorted, i: usize) -> Vec<usize> {
    let name = entries.sort_name(i);
    let mut owners = Vec::new();
    for (at, byte) in name.bytes().enumerate().skip(1) {
        if byte >= b'/' {
            continue;
        }
        // `at` is a character boundary: bytes below '/' are ASCII.
        let dir = format!("{}/", &name[..at]);
        if let Some(j) = entries.find(i + 1, &dir)
            && entries.is_dir(j)
        {
            owners.push(j);
        }
    }
    if entries.is_dir(i) {
        owners.push(i);
    }
    owners
}

fn is_file(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::ObjectAttrs;

    fn storage_with(keys: &[&str]) -> (tempfile::TempDir, Storage) {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), false).unwrap();
        storage.create_bucket("b").unwrap();
        for key in keys {
            let mut temp = storage.begin_write().unwrap();
            temp.write(key.as_bytes()).unwrap();
            let etag = hex::encode(temp.md5());
            storage
                .commit("b", key, temp, etag, ObjectAttrs::default())
                .unwrap();
        }
        (dir, storage)
    }

    fn names(page: &ListPage) -> Vec<String> {
        page.items
            .iter()
            .map(|i| match i {
                ListItem::Object(k, _) => k.clone(),
                ListItem::CommonPrefix(p) => format!("[{p}]"),
            })
            .collect()
    }

    fn query(
        prefix: &str,
        delimiter: Option<&str>,
        after: Option<&str>,
        max_keys: usize,
    ) -> ListQuery {
        ListQuery {
            prefix: prefix.into(),
            delimiter: delimiter.map(Into::into),
            after: after.map(Into::into),
            skip_prefix: None,
            max_keys,
        }
    }

    const KEYS: &[&str] = &["a-c", "a/b", "a/c/d", "a0", "b", "a/c-x", "ab/x", "z/y/x"];

    #[test]
    fn folder_markers_are_listed_in_key_order_and_keep_their_folder() {
        let keys = ["a/", "a/b/", "a/b/x", "a/c", "e/"];
        let (_d, s) = storage_with(&keys);
        let all = s.list("b", &query("", None, None, 1000)).unwrap();
        assert_eq!(names(&all), keys);
        let top = s.list("b", &query("", Some("/"), None, 1000)).unwrap();
        assert_eq!(names(&top), ["[a/]", "[e/]"]);
        let a = s.list("b", &query("a/", Some("/"), None, 1000)).unwrap();
        assert_eq!(names(&a), ["a/", "[a/b/]", "a/c"]);
        let paged = s.list("b", &query("", None, Some("a/"), 1)).unwrap();
        assert_eq!(names(&paged), ["a/b/"]);
        assert_eq!(s.head("b", "a/b/").unwrap().size, 4);
        s.delete("b", "a/b/x").unwrap();
        let a = s.list("b", &query("a/", Some("/"), None, 1000)).unwrap();
        assert_eq!(
            names(&a),
            ["a/", "[a/b/]", "a/c"],
            "the marker keeps its folder"
        );
        s.delete("b", "a/b/").unwrap();
        s.delete("b", "e/").unwrap();
        let all = s.list("b", &query("", None, None, 1000)).unwrap();
        assert_eq!(names(&all), ["a/", "a/c"]);
        assert!(s.head("b", "a/b/").is_err());
    }

    #[test]
    fn full_listing_is_in_byte_order() {
        let (_d, s) = storage_with(KEYS);
        let page = s.list("b", &query("", None, None, 1000)).unwrap();
        let mut expected: Vec<String> = KEYS.iter().map(|k| k.to_string()).collect();
        expected.sort();
        assert_eq!(names(&page), expected);
        assert!(!page.truncated);
    }

    #[test]
    fn delimiter_and_prefix() {
        let (_d, s) = storage_with(KEYS);
        let page = s.list("b", &query("", Some("/"), None, 1000)).unwrap();
        assert_eq!(names(&page), ["a-c", "[a/]", "a0", "[ab/]", "b", "[z/]"]);
        let page = s.list("b", &query("a/", Some("/"), None, 1000)).unwrap();
        assert_eq!(names(&page), ["a/b", "a/c-x", "[a/c/]"]);
        let page = s.list("b", &query("a/c", None, None, 1000)).unwrap();
        assert_eq!(names(&page), ["a/c-x", "a/c/d"]);
        let page = s.list("b", &query("a", Some("-"), None, 1000)).unwrap();
        assert_eq!(
            names(&page),
            ["[a-]", "a/b", "[a/c-]", "a/c/d", "a0", "ab/x"]
        );
    }

    #[test]
    fn pagination_with_markers() {
        let (_d, s) = storage_with(KEYS);
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = s.list("b", &query("", None, after.as_deref(), 3)).unwrap();
            all.extend(names(&page));
            if !page.truncated {
                break;
            }
            after = all.last().cloned();
        }
        let mut expected: Vec<String> = KEYS.iter().map(|k| k.to_string()).collect();
        expected.sort();
        assert_eq!(all, expected);
    }

    #[test]
    fn start_after_inside_a_directory() {
        let (_d, s) = storage_with(KEYS);
        let page = s.list("b", &query("", None, Some("a/c"), 1000)).unwrap();
        assert_eq!(names(&page), ["a/c-x", "a/c/d", "a0", "ab/x", "b", "z/y/x"]);
        let mut q = query("", Some("/"), None, 1000);
        q.after = Some("a/".into());
        q.skip_prefix = Some("a/".into());
        assert_eq!(
            names(&s.list("b", &q).unwrap()),
            ["a0", "[ab/]", "b", "[z/]"]
        );
    }

    /// Keys S3 stores that are not plain relative paths, folder markers among them.
    fn awkward_keys() -> Vec<String> {
        let long = "L".repeat(600);
        let mut keys: Vec<String> = [
            "a",
            "a!",
            "a/b",
            "a//c",
            "a/./d",
            "a/b/",
            "a/../e",
            "a/.",
            "a/..",
            "/x",
            "//y",
            "./x",
            "..",
            ".",
            "a-c",
            "a0",
            "ab/x",
            "a/b/c",
            "a/b!",
            "a/c/",
            "a//",
            "//",
            "/",
            ".bl%self",
            "a/.bl%self",
            "a/.bl%e",
            "q",
            "q/",
            "q!/x",
            "q/r",
            "a\u{1}",
            "a/\u{7f}",
            "ü/x",
            "ü",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        for key in [
            format!("long/{long}"),
            format!("long/{long}/m"),
            format!("long/{long}!"),
            format!("long/{}M", "L".repeat(599)),
            format!("long/{long}/"),
        ] {
            keys.push(key);
        }
        keys
    }

    /// S3's answer to `q` over `keys`, computed from the sorted list.
    fn reference(keys: &[String], q: &ListQuery) -> (Vec<String>, bool) {
        let mut sorted: Vec<&str> = keys.iter().map(String::as_str).collect();
        sorted.sort_unstable();
        let mut items: Vec<String> = Vec::new();
        for key in sorted {
            let after = q.after.as_deref().is_some_and(|a| key <= a);
            let skip = q.skip_prefix.as_deref().is_some_and(|s| key.starts_with(s));
            if !key.starts_with(&q.prefix) || after || skip {
                continue;
            }
            let rest = &key[q.prefix.len()..];
            let item = match q
                .delimiter
                .as_deref()
                .and_then(|d| Some((rest.find(d)?, d)))
            {
                Some((at, d)) => format!("[{}{}]", q.prefix, &rest[..at + d.len()]),
                None => key.to_owned(),
            };
            if items.last() != Some(&item) {
                items.push(item);
            }
        }
        let truncated = items.len() > q.max_keys;
        items.truncate(q.max_keys);
        (items, truncated)
    }

    /// Every page of `q`, one key at a time, continued as ListObjectsV2's token does.
    fn paged(s: &Storage, q: &ListQuery) -> Vec<String> {
        let mut q = ListQuery {
            max_keys: 1,
            ..q.clone()
        };
        let mut all = Vec::new();
        loop {
            let page = s.list("b", &q).unwrap();
            all.extend(names(&page));
            match page.items.last() {
                Some(ListItem::Object(key, _)) if page.truncated => q.after = Some(key.clone()),
                Some(ListItem::CommonPrefix(p)) if page.truncated => {
                    q.after = Some(p.clone());
                    q.skip_prefix = Some(p.clone());
                }
                _ => return all,
            }
        }
    }

    #[test]
    fn awkward_keys_list_in_s3_order() {
        let keys = awkward_keys();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let (_d, s) = storage_with(&refs);
        let mut prefixes = vec![String::new()];
        for key in &keys {
            for (at, _) in key.char_indices().skip(1).take(4) {
                prefixes.push(key[..at].to_owned());
            }
            prefixes.extend(key.match_indices('/').map(|(at, _)| key[..=at].to_owned()));
            prefixes.push(key.clone());
        }
        prefixes.sort();
        prefixes.dedup();
        for prefix in &prefixes {
            for delimiter in [None, Some("/"), Some("!")] {
                let q = query(prefix, delimiter, None, 1000);
                let (expected, _) = reference(&keys, &q);
                let page = s.list("b", &q).unwrap();
                assert_eq!(names(&page), expected, "{prefix:?} {delimiter:?}");
                assert_eq!(paged(&s, &q), expected, "paged {prefix:?} {delimiter:?}");
            }
        }
        for after in keys.iter().chain(&prefixes) {
            for delimiter in [None, Some("/")] {
                let q = query("", delimiter, Some(after), 3);
                let (expected, truncated) = reference(&keys, &q);
                let page = s.list("b", &q).unwrap();
                assert_eq!(names(&page), expected, "after {after:?} {delimiter:?}");
                assert_eq!(page.truncated, truncated, "after {after:?} {delimiter:?}");
            }
        }
    }

    fn put(s: &Storage, key: &str) {
        let mut temp = s.begin_write().unwrap();
        temp.write(key.as_bytes()).unwrap();
        let etag = hex::encode(temp.md5());
        s.commit("b", key, temp, etag, ObjectAttrs::default())
            .unwrap();
    }

    #[test]
    fn a_cached_directory_listing_sees_every_change() {
        let keys: Vec<String> = (0..300).map(|i| format!("d/k{i:04}")).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let (_d, s) = storage_with(&refs);
        for round in 0..2 {
            // Once the directory has settled, its sorted listing is kept between pages.
            std::thread::sleep(super::super::dirs::SETTLE + std::time::Duration::from_millis(50));
            let hits = s.listings.hits();
            let all = s.list("b", &query("d/", None, None, 1000)).unwrap();
            assert_eq!(names(&all), keys, "round {round}");
            let page = s.list("b", &query("d/", None, Some("d/k0100"), 2)).unwrap();
            assert_eq!(names(&page), ["d/k0101", "d/k0102"]);
            assert!(
                s.listings.hits() > hits,
                "round {round}: the listing was not kept"
            );
            for i in 0..100 {
                // Sorts between two kept keys, and after the last one.
                for key in [format!("d/k0100-{round}-{i}"), format!("d/z{round}-{i}")] {
                    put(&s, &key);
                    let after = Some("d/k0100");
                    let page = s.list("b", &query("d/", None, after, 1)).unwrap();
                    let last = s.list("b", &query("d/", None, Some("d/k0299"), 5)).unwrap();
                    let seen = names(&page).contains(&key) || names(&last).contains(&key);
                    assert!(seen, "round {round}: {key} put but not listed");
                    s.delete("b", &key).unwrap();
                    let page = s.list("b", &query("d/", None, after, 1)).unwrap();
                    assert_eq!(names(&page), ["d/k0101"], "round {round}: {key} deleted");
                    let last = s.list("b", &query("d/", None, Some("d/k0299"), 5)).unwrap();
                    assert!(last.items.is_empty(), "round {round}: {key} deleted");
                }
            }
        }
    }

    #[test]
    fn missing_prefix_directory_lists_nothing() {
        let (_d, s) = storage_with(KEYS);
        assert!(
            s.list("b", &query("nope/", None, None, 10))
                .unwrap()
                .items
                .is_empty()
        );
        assert!(
            s.list("b", &query("b/", None, None, 10))
                .unwrap()
                .items
                .is_empty()
        );
    }
}
