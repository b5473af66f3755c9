//! How keys map onto paths below a bucket directory, and back.
//!
//! A key is split at '/' and each segment becomes one file or directory name. Ordinary
//! segments keep their own name, so a bucket looks like the files it holds. What cannot be a
//! file name is escaped behind the reserved prefix `.bl%`, reversibly:
//!
//! ```text
//! segment                         name on disk
//! ""   (as in `a//b`, `/x`)        .bl%e
//! "."                             .bl%d
//! ".."                            .bl%dd
//! ".bl%<rest>"                    .bl%q<rest>
//! over 255 bytes, or holding NUL  .bl%h<MD5 hex of the segment>, a directory holding the
//!                                 segment in its file .bl%name
//! ```
//!
//! Inside a directory, `.bl%self` holds the bytes of the object whose key is the directory's
//! own (object `a` while `a/b` exists: `a/.bl%self`), so a key may also be a prefix of other
//! keys; a hashed segment is always a directory, its object (if any) in `.bl%self`. Every
//! other `.bl%` name is internal and never read as a key. No encoded segment is empty, `.`,
//! `..`, longer than 255 bytes or holds '/' or NUL, so no key can name a path outside its
//! bucket, nor one of these internal files.

use std::borrow::Cow;
use std::path::PathBuf;

use md5::{Digest, Md5};

/// Names starting with this are escapes or internal files.
const ESCAPE: &str = ".bl%";
/// In a directory: the bytes of the object whose key is the directory's.
pub(crate) const SELF: &str = ".bl%self";
/// In a hashed segment's directory: the segment itself.
pub(crate) const NAME: &str = ".bl%name";
/// Longest file name on the file systems the server runs on (Linux `NAME_MAX`).
const NAME_MAX: usize = 255;

/// The name on disk of one key segment.
pub(crate) fn encode_segment(segment: &str) -> Cow<'_, str> {
    let escaped: Cow<'_, str> = match segment {
        "" => ".bl%e".into(),
        "." => ".bl%d".into(),
        ".." => ".bl%dd".into(),
        s => match s.strip_prefix(ESCAPE) {
            Some(rest) => format!(".bl%q{rest}").into(),
            None => s.into(),
        },
    };
    if escaped.len() > NAME_MAX || segment.contains('\0') {
        return format!(".bl%h{}", hex::encode(Md5::digest(segment.as_bytes()))).into();
    }
    escaped
}

/// True if `name` (an encoded segment) is a hashed segment: a directory holding [`NAME`].
pub(crate) fn is_hashed(name: &str) -> bool {
    name.starts_with(".bl%h")
}

/// What a name found on disk stands for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded<'a> {
    /// This key segment.
    Segment(Cow<'a, str>),
    /// A hashed segment: the segment is in the directory's [`NAME`] file.
    Hashed,
    /// An internal file ([`SELF`], [`NAME`]) or an unknown escape: not a key.
    Internal,
}

/// The key segment a file or directory name stands for.
pub(crate) fn decode_name(name: &str) -> Decoded<'_> {
    let Some(rest) = name.strip_prefix(ESCAPE) else {
        return Decoded::Segment(name.into());
    };
    match rest {
        "e" => Decoded::Segment("".into()),
        "d" => Decoded::Segment(".".into()),
        "dd" => Decoded::Segment("..".into()),
        _ if rest.starts_with('q') => Decoded::Segment(format!("{ESCAPE}{}", &rest[1..]).into()),
        _ if rest.starts_with('h') => Decoded::Hashed,
        _ => Decoded::Internal,
    }
}

/// The path below the bucket directory of the segments of `key` (split at every '/').
pub(crate) fn key_path(key: &str) -> PathBuf {
    key.split('/')
        .map(|s| encode_segment(s).into_owned())
        .collect()
}

/// The path of the directory holding the keys that start with `dir_key`, which is empty or
/// ends in '/'.
pub(crate) fn dir_path(dir_key: &str) -> PathBuf {
    match dir_key.strip_suffix('/') {
        Some(folder) => key_path(folder),
        None => PathBuf::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(name: &str) -> Option<String> {
        match decode_name(name) {
            Decoded::Segment(s) => Some(s.into_owned()),
            _ => None,
        }
    }

    #[test]
    fn escaped_segments_decode_to_themselves() {
        for segment in [
            "", ".", "..", "...", "a", ".bl%", ".bl%e", ".bl%self", ".bl%name", ".bl%h00", ".bl%q",
            ".bl", "%", "a b+c%d", "ключ",
        ] {
            let name = encode_segment(segment);
            assert!(
                !name.is_empty() && name != "." && name != "..",
                "{segment:?}"
            );
            assert!(name.len() <= NAME_MAX && !name.contains(['/', '\0']));
            assert_eq!(decode(&name).as_deref(), Some(segment), "{name}");
        }
        assert_eq!(encode_segment("plain.txt"), "plain.txt");
        assert_eq!(encode_segment(".hidden"), ".hidden");
    }

    #[test]
    fn internal_names_are_not_keys() {
        for name in [SELF, NAME, ".bl%", ".bl%x", ".bl%tmp"] {
            assert_eq!(decode_name(name), Decoded::Internal, "{name}");
        }
        assert_eq!(decode_name(".bl%h0123"), Decoded::Hashed);
    }

    #[test]
    fn long_and_nul_segments_are_hashed() {
        let long = "x".repeat(600);
        let name = encode_segment(&long);
        assert!(is_hashed(&name) && name.len() == 5 + 32, "{name}");
        assert_ne!(encode_segment(&"x".repeat(601)), name);
        assert_eq!(encode_segment(&"y".repeat(255)), "y".repeat(255));
        assert!(is_hashed(&encode_segment(&format!(
            ".bl%{}",
            "y".repeat(251)
        ))));
        assert!(is_hashed(&encode_segment("a\0b")));
    }

    #[test]
    fn key_paths() {
        assert_eq!(key_path("a/b"), PathBuf::from("a/b"));
        assert_eq!(key_path("a//b"), PathBuf::from("a/.bl%e/b"));
        assert_eq!(key_path("/x"), PathBuf::from(".bl%e/x"));
        assert_eq!(key_path("a/../b"), PathBuf::from("a/.bl%dd/b"));
        assert_eq!(key_path("./x"), PathBuf::from(".bl%d/x"));
        assert_eq!(dir_path(""), PathBuf::new());
        assert_eq!(dir_path("a//"), PathBuf::from("a/.bl%e"));
        assert_eq!(dir_path("/"), PathBuf::from(".bl%e"));
    }
}
