//! WebDataset conventions: sample keys, grouping, class labels.

use bytes::Bytes;

/// Splits a member name into WebDataset key and extension at the first dot
/// of the basename: `n01/000123.jpg` → (`n01/000123`, `jpg`),
/// `a/b.c/x.y.z` → (`a/b.c/x`, `y.z`). A basename without a dot has an
/// empty extension.
pub fn split_key(name: &str) -> (&str, &str) {
    let base_start = name.rfind('/').map_or(0, |i| i + 1);
    match name[base_start..].find('.') {
        Some(dot) => (&name[..base_start + dot], &name[base_start + dot + 1..]),
        None => (name, ""),
    }
}

/// One sample: consecutive members sharing a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The shared key.
    pub key: String,
    /// `(extension, data)` in shard order.
    pub members: Vec<(String, Bytes)>,
}

impl Sample {
    /// The data of the member with extension `ext`.
    pub fn get(&self, ext: &str) -> Option<&Bytes> {
        self.members.iter().find(|(e, _)| e == ext).map(|(_, d)| d)
    }
}

/// Groups consecutive members with the same key into [`Sample`]s.
///
/// Members with the same key that are not adjacent form separate samples,
/// as in the `webdataset` library; members are kept in order.
#[derive(Debug, Default)]
pub struct Grouper {
    current: Option<Sample>,
}

impl Grouper {
    /// An empty grouper.
    pub fn new() -> Grouper {
        Grouper::default()
    }

    /// Adds a member; returns the previous sample when this member starts a
    /// new one.
    pub fn push(&mut self, name: &str, data: Bytes) -> Option<Sample> {
        let (key, ext) = split_key(name);
        let entry = (ext.to_owned(), data);
        if let Some(current) = self.current.as_mut().filter(|s| s.key == key) {
            current.members.push(entry);
            return None;
        }
        self.current.replace(Sample {
            key: key.to_owned(),
            members: vec![entry],
        })
    }

    /// Returns the last sample, if any.
    pub fn finish(&mut self) -> Option<Sample> {
        self.current.take()
    }
}

/// The class folder of a key for class-per-folder datasets: the last
/// directory component (`train/n01440764/000123` → `n01440764`).
pub fn class_of_key(key: &str) -> Option<&str> {
    let dir = &key[..key.rfind('/')?];
    let folder = dir.rsplit('/').next().unwrap_or(dir);
    (!folder.is_empty()).then_some(folder)
}

/// The class index of `folder` in the sorted class list, as the ASCII
/// decimal bytes of a `.cls` member (what `webdataset` expects), or `None`
/// if the folder is not a class. `classes` must be sorted.
pub fn class_label(folder: &str, classes: &[String]) -> Option<(usize, Vec<u8>)> {
    let index = classes.binary_search_by(|c| c.as_str().cmp(folder)).ok()?;
    Some((index, index.to_string().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_at_the_first_dot_of_the_basename() {
        assert_eq!(split_key("n01/000123.jpg"), ("n01/000123", "jpg"));
        assert_eq!(split_key("a/b.c/x.y.z"), ("a/b.c/x", "y.z"));
        assert_eq!(split_key("plain"), ("plain", ""));
        assert_eq!(split_key("d/.hidden"), ("d/", "hidden"));
    }

    #[test]
    fn consecutive_members_group_into_samples() {
        let mut g = Grouper::new();
        let names = ["a/1.jpg", "a/1.cls", "a/2.jpg", "a/1.json", "b.seg.png"];
        let mut out: Vec<Sample> = names
            .iter()
            .filter_map(|n| g.push(n, Bytes::from_static(b"x")))
            .collect();
        out.extend(g.finish());
        let shape: Vec<(&str, Vec<&str>)> = out
            .iter()
            .map(|s| {
                (
                    s.key.as_str(),
                    s.members.iter().map(|(e, _)| e.as_str()).collect(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                ("a/1", vec!["jpg", "cls"]),
                ("a/2", vec!["jpg"]),
                ("a/1", vec!["json"]),
                ("b", vec!["seg.png"])
            ]
        );
        assert_eq!(out[0].get("cls"), Some(&Bytes::from_static(b"x")));
        assert!(g.finish().is_none());
    }

    #[test]
    fn labels_come_from_the_sorted_class_list() {
        let classes: Vec<String> = ["cat", "dog", "n01"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(class_of_key("train/dog/0001"), Some("dog"));
        assert_eq!(class_of_key("0001"), None);
        assert_eq!(class_label("n01", &classes), Some((2, b"2".to_vec())));
        assert_eq!(class_label("emu", &classes), None);
    }
}
