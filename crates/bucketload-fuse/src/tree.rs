//! The inode table: what the mount knows about the bucket's names, pure and synchronous.
//!
//! Every name seen (in a listing, a lookup or a manifest) gets an inode number that stays the
//! same for the life of the mount. A directory's children are *complete* when a listing filled
//! them: until the metadata TTL runs out (or forever, for a manifest) a name that is not among
//! them does not exist, without asking the store. Nodes created through the mount (files being
//! written, directories made by `mkdir`) are *local*: they live here until an object backs them
//! and survive listings that do not show them yet.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime};

/// The inode of the mount's root directory.
pub const ROOT: u64 = 1;

/// A file or a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An object.
    File,
    /// A common prefix (or a directory made through the mount).
    Dir,
}

/// When metadata was last confirmed by the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Checked {
    /// Never: ask the store before trusting size or ETag.
    Never,
    /// At this instant; trusted for the metadata TTL.
    At(Instant),
    /// Always trusted (a manifest listed it).
    Forever,
}

impl Checked {
    pub(crate) fn fresh(self, ttl: Duration) -> bool {
        match self {
            Checked::Never => false,
            Checked::At(t) => t.elapsed() < ttl,
            Checked::Forever => true,
        }
    }
}

/// What a listing, a HEAD or a manifest says about one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) name: String,
    pub(crate) kind: Kind,
    pub(crate) size: u64,
    pub(crate) etag: Option<String>,
    pub(crate) mtime: SystemTime,
}

/// When this process started: the time of directories, which have none in the store.
fn started() -> SystemTime {
    static STARTED: std::sync::OnceLock<SystemTime> = std::sync::OnceLock::new();
    *STARTED.get_or_init(SystemTime::now)
}

impl Entry {
    pub(crate) fn dir(name: &str) -> Entry {
        Entry {
            name: name.to_owned(),
            kind: Kind::Dir,
            size: 0,
            etag: None,
            mtime: started(),
        }
    }
}

/// The attributes of a node, as the kernel sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// Inode number.
    pub ino: u64,
    /// File or directory.
    pub kind: Kind,
    /// Bytes (bytes written so far for a file being written).
    pub size: u64,
    /// Last modification (the object's `Last-Modified`).
    pub mtime: SystemTime,
    /// Whether the file is being written through the mount (its attributes change).
    pub writing: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) parent: u64,
    pub(crate) name: String,
    /// The key relative to the mount's URI ("" for the root).
    pub(crate) key: String,
    pub(crate) kind: Kind,
    pub(crate) size: u64,
    pub(crate) etag: Option<String>,
    pub(crate) mtime: SystemTime,
    pub(crate) checked: Checked,
    /// Created through the mount and not (yet) backed by an object.
    pub(crate) local: bool,
    /// Open for writing by a handle.
    pub(crate) writing: bool,
    /// Directories: children by name.
    pub(crate) children: BTreeMap<String, u64>,
    /// Directories: when `children` was last filled by a complete listing.
    pub(crate) listed: Checked,
}

/// The store's object behind a file, as the tree knew it: what the name shows again when an
/// upload that would have replaced it fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Saved {
    pub(crate) size: u64,
    pub(crate) etag: Option<String>,
    pub(crate) mtime: SystemTime,
}

impl Node {
    /// The object behind this file, unless it was made through the mount and not yet uploaded.
    pub(crate) fn saved(&self) -> Option<Saved> {
        (!self.local).then(|| Saved {
            size: self.size,
            etag: self.etag.clone(),
            mtime: self.mtime,
        })
    }

    /// Shows `saved` again; the store is asked before it is trusted.
    pub(crate) fn restore(&mut self, saved: &Saved) {
        self.size = saved.size;
        self.etag = saved.etag.clone();
        self.mtime = saved.mtime;
        self.checked = Checked::Never;
    }

    pub(crate) fn stat(&self, ino: u64) -> Stat {
        Stat {
            ino,
            kind: self.kind,
            size: self.size,
            mtime: self.mtime,
            writing: self.writing,
        }
    }
}

/// What the tree knows about one name in a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Known {
    /// The name exists; its attributes are trusted.
    Yes(Stat),
    /// The name does not exist (the directory's listing is fresh).
    No,
    /// Ask the store.
    Unsure,
}

/// The inode table.
#[derive(Debug)]
pub(crate) struct Tree {
    nodes: HashMap<u64, Node>,
    next: u64,
}

/// `parent/name` as a key ("name" under the root).
pub(crate) fn join(parent: &str, name: &str) -> String {
    match parent.is_empty() {
        true => name.to_owned(),
        false => format!("{parent}/{name}"),
    }
}

impl Tree {
    pub(crate) fn new() -> Tree {
        let root = Node {
            parent: ROOT,
            name: String::new(),
            key: String::new(),
            kind: Kind::Dir,
            size: 0,
            etag: None,
            mtime: started(),
            checked: Checked::Forever,
            local: false,
            writing: false,
            children: BTreeMap::new(),
            listed: Checked::Never,
        };
        Tree {
            nodes: HashMap::from([(ROOT, root)]),
            next: ROOT + 1,
        }
    }

    pub(crate) fn get(&self, ino: u64) -> Option<&Node> {
        self.nodes.get(&ino)
    }

    pub(crate) fn get_mut(&mut self, ino: u64) -> Option<&mut Node> {
        self.nodes.get_mut(&ino)
    }

    /// Number of nodes (for tests and metrics).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    pub(crate) fn child(&self, parent: u64, name: &str) -> Option<u64> {
        self.nodes.get(&parent)?.children.get(name).copied()
    }

    /// What is known about `name` in `parent` with metadata trusted for `ttl`.
    pub(crate) fn known(&self, parent: u64, name: &str, ttl: Duration) -> Known {
        let Some(dir) = self.nodes.get(&parent) else {
            return Known::Unsure;
        };
        match dir
            .children
            .get(name)
            .and_then(|c| Some((*c, self.nodes.get(c)?)))
        {
            Some((ino, node)) if node.local || node.writing => Known::Yes(node.stat(ino)),
            Some((ino, node)) if node.checked.fresh(ttl) => Known::Yes(node.stat(ino)),
            Some((ino, node)) if node.kind == Kind::Dir && dir.listed.fresh(ttl) => {
                Known::Yes(node.stat(ino))
            }
            Some(_) => Known::Unsure,
            None if dir.listed.fresh(ttl) => Known::No,
            None => Known::Unsure,
        }
    }

    /// Records `entry` under `parent`, keeping the inode of a same-named node of the same kind.
    pub(crate) fn upsert(&mut self, parent: u64, entry: Entry, checked: Checked) -> u64 {
        let existing = self.child(parent, &entry.name);
        if let Some(ino) = existing
            && let Some(node) = self.nodes.get_mut(&ino)
            && node.kind == entry.kind
        {
            if !node.writing {
                node.size = entry.size;
                node.etag = entry.etag;
                node.mtime = entry.mtime;
                node.checked = checked;
                node.local = false;
            }
            return ino;
        }
        if let Some(old) = existing {
            self.remove_subtree(old);
        }
        let key = match self.nodes.get(&parent) {
            Some(p) => join(&p.key, &entry.name),
            None => entry.name.clone(),
        };
        let ino = self.next;
        self.next += 1;
        let node = Node {
            parent,
            name: entry.name.clone(),
            key,
            kind: entry.kind,
            size: entry.size,
            etag: entry.etag,
            mtime: entry.mtime,
            checked,
            local: false,
            writing: false,
            children: BTreeMap::new(),
            listed: Checked::Never,
        };
        self.nodes.insert(ino, node);
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.children.insert(entry.name, ino);
        }
        ino
    }

    /// Moves the file `ino` to `name` in `parent`, keeping its inode (the kernel's dentry moves
    /// with it); a node already there is replaced. Its ETag is forgotten: the store is asked.
    pub(crate) fn rename(&mut self, ino: u64, parent: u64, name: &str) {
        if let Some(old) = self.child(parent, name)
            && old != ino
        {
            self.unlink(old);
        }
        let Some(node) = self.nodes.get(&ino) else {
            return;
        };
        let (old_parent, old_name) = (node.parent, node.name.clone());
        if let Some(p) = self.nodes.get_mut(&old_parent)
            && p.children.get(&old_name) == Some(&ino)
        {
            p.children.remove(&old_name);
        }
        let key = match self.nodes.get(&parent) {
            Some(p) => join(&p.key, name),
            None => name.to_owned(),
        };
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.parent = parent;
            node.name = name.to_owned();
            node.key = key;
            node.etag = None;
            node.checked = Checked::Never;
            node.mtime = SystemTime::now();
        }
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.children.insert(name.to_owned(), ino);
        }
    }

    /// Adds a node made through the mount (a file being written, a directory from `mkdir`).
    pub(crate) fn insert_local(&mut self, parent: u64, name: &str, kind: Kind) -> u64 {
        let mut entry = Entry::dir(name);
        entry.kind = kind;
        entry.mtime = SystemTime::now();
        let ino = self.upsert(parent, entry, Checked::Never);
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.local = true;
        }
        ino
    }

    /// Replaces the remote children of `parent` with a complete listing; local children and
    /// files being written stay.
    pub(crate) fn apply_listing(&mut self, parent: u64, entries: Vec<Entry>, checked: Checked) {
        let mut seen = std::collections::HashSet::with_capacity(entries.len());
        for entry in entries {
            seen.insert(entry.name.clone());
            self.upsert(parent, entry, checked);
        }
        let gone: Vec<u64> = match self.nodes.get(&parent) {
            Some(p) => p
                .children
                .iter()
                .filter(|(name, _)| !seen.contains(*name))
                .map(|(_, ino)| *ino)
                .collect(),
            None => return,
        };
        for ino in gone {
            let keep = self.nodes.get(&ino).is_some_and(|n| n.local || n.writing);
            if !keep {
                self.unlink(ino);
            }
        }
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.listed = checked;
        }
    }

    /// Keeps the directory `ino` and its ancestors in this mount even when no key is left under
    /// them (a file or directory in it was just removed through the mount), as a disk keeps an
    /// emptied directory until `rmdir`.
    pub(crate) fn keep_dirs(&mut self, mut ino: u64) {
        while ino != ROOT {
            let Some(node) = self.nodes.get_mut(&ino) else {
                return;
            };
            node.local = true;
            ino = node.parent;
        }
    }

    /// Removes `ino` from its parent and the table, with its descendants.
    pub(crate) fn unlink(&mut self, ino: u64) {
        let Some(node) = self.nodes.get(&ino) else {
            return;
        };
        let (parent, name) = (node.parent, node.name.clone());
        if let Some(p) = self.nodes.get_mut(&parent)
            && p.children.get(&name) == Some(&ino)
        {
            p.children.remove(&name);
        }
        self.remove_subtree(ino);
    }

    fn remove_subtree(&mut self, ino: u64) {
        let mut stack = vec![ino];
        while let Some(i) = stack.pop() {
            if let Some(node) = self.nodes.remove(&i) {
                stack.extend(node.children.values().copied());
            }
        }
    }

    /// The children of a directory, sorted by name.
    pub(crate) fn children(&self, parent: u64) -> Vec<(u64, String, Kind)> {
        let Some(dir) = self.nodes.get(&parent) else {
            return Vec::new();
        };
        dir.children
            .iter()
            .filter_map(|(name, ino)| Some((*ino, name.clone(), self.nodes.get(ino)?.kind)))
            .collect()
    }

    /// Makes sure the directories of `key` exist under the root and returns the innermost.
    pub(crate) fn ensure_dirs(&mut self, dirs: &[&str], checked: Checked) -> u64 {
        let mut parent = ROOT;
        for name in dirs {
            parent = match self.child(parent, name) {
                Some(ino) if self.nodes.get(&ino).is_some_and(|n| n.kind == Kind::Dir) => ino,
                _ => self.upsert(parent, Entry::dir(name), checked),
            };
        }
        parent
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn file(name: &str, size: u64) -> Entry {
        Entry {
            name: name.into(),
            kind: Kind::File,
            size,
            etag: Some(format!("\"{name}\"")),
            mtime: SystemTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn listings_keep_inodes_and_drop_vanished_names() {
        let mut t = Tree::new();
        let now = Checked::At(Instant::now());
        t.apply_listing(ROOT, vec![file("a", 1), Entry::dir("d")], now);
        let a = t.child(ROOT, "a").unwrap();
        let d = t.child(ROOT, "d").unwrap();
        assert_eq!(t.get(d).unwrap().key, "d");
        t.apply_listing(d, vec![file("x", 3)], now);
        assert_eq!(t.get(t.child(d, "x").unwrap()).unwrap().key, "d/x");
        t.apply_listing(ROOT, vec![file("a", 2)], now);
        assert_eq!(t.child(ROOT, "a"), Some(a));
        assert_eq!(t.get(a).unwrap().size, 2);
        assert_eq!(t.child(ROOT, "d"), None);
        assert_eq!(t.len(), 2, "d and d/x are gone");
    }

    #[test]
    fn fresh_listing_answers_absent_names() {
        let mut t = Tree::new();
        let ttl = Duration::from_secs(60);
        assert_eq!(t.known(ROOT, "a", ttl), Known::Unsure);
        t.apply_listing(ROOT, vec![file("a", 1)], Checked::At(Instant::now()));
        assert!(matches!(t.known(ROOT, "a", ttl), Known::Yes(s) if s.size == 1));
        assert_eq!(t.known(ROOT, "b", ttl), Known::No);
        assert_eq!(t.known(ROOT, "b", Duration::ZERO), Known::Unsure);
    }

    #[test]
    fn local_nodes_survive_listings() {
        let mut t = Tree::new();
        let w = t.insert_local(ROOT, "new", Kind::File);
        t.apply_listing(ROOT, vec![file("a", 1)], Checked::At(Instant::now()));
        assert_eq!(t.child(ROOT, "new"), Some(w));
        assert!(matches!(
            t.known(ROOT, "new", Duration::ZERO),
            Known::Yes(_)
        ));
    }

    #[test]
    fn rename_keeps_the_inode_and_replaces_the_target() {
        let mut t = Tree::new();
        let now = Checked::At(Instant::now());
        t.apply_listing(ROOT, vec![file("a", 1), file("b", 2), Entry::dir("d")], now);
        let (a, b, d) = (
            t.child(ROOT, "a").unwrap(),
            t.child(ROOT, "b").unwrap(),
            t.child(ROOT, "d").unwrap(),
        );
        t.rename(a, d, "x");
        assert_eq!(t.child(d, "x"), Some(a));
        assert_eq!(t.get(a).unwrap().key, "d/x");
        assert_eq!(t.child(ROOT, "a"), None);
        t.rename(a, ROOT, "b");
        assert_eq!(t.child(ROOT, "b"), Some(a));
        assert!(t.get(b).is_none());
        assert_eq!(t.get(a).unwrap().checked, Checked::Never);
    }

    #[test]
    fn a_file_replaced_by_a_directory_gets_a_new_inode() {
        let mut t = Tree::new();
        let now = Checked::At(Instant::now());
        t.apply_listing(ROOT, vec![file("a", 1)], now);
        let f = t.child(ROOT, "a").unwrap();
        t.apply_listing(ROOT, vec![Entry::dir("a")], now);
        let d = t.child(ROOT, "a").unwrap();
        assert_ne!(f, d);
        assert!(t.get(f).is_none());
        let inner = t.ensure_dirs(&["a", "b"], Checked::Forever);
        assert_eq!(t.get(inner).unwrap().key, "a/b");
    }
}
