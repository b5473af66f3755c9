//! Tar header blocks: numeric fields, checksums, names.
//!
//! Offsets of the ustar fields inside a 512-byte block are in
//! `docs/FORMATS.md`.

/// Size of a tar block.
pub const BLOCK: usize = 512;

/// Largest size an 11-digit octal `size` field can hold (8 GiB − 1).
pub const MAX_OCTAL_SIZE: u64 = (1 << 33) - 1;

/// `(offset, length)` of the ustar header fields used here.
pub(crate) mod field {
    pub const NAME: (usize, usize) = (0, 100);
    pub const MODE: (usize, usize) = (100, 8);
    pub const UID: (usize, usize) = (108, 8);
    pub const GID: (usize, usize) = (116, 8);
    pub const SIZE: (usize, usize) = (124, 12);
    pub const MTIME: (usize, usize) = (136, 12);
    pub const CHKSUM: (usize, usize) = (148, 8);
    pub const TYPEFLAG: usize = 156;
    pub const LINKNAME: (usize, usize) = (157, 100);
    pub const MAGIC: (usize, usize) = (257, 8);
    pub const PREFIX: (usize, usize) = (345, 155);
}

/// Why a numeric field could not be decoded.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BadNumber;

/// Decodes a numeric header field: octal digits (leading spaces, trailing
/// NUL/space) or GNU base-256 (first byte `0x80`; negative values refused).
/// An all-NUL or all-space field is 0.
pub(crate) fn parse_number(raw: &[u8]) -> Result<u64, BadNumber> {
    match raw.first() {
        Some(&0x80) => parse_base256(&raw[1..]),
        Some(&b) if b & 0x80 != 0 => Err(BadNumber),
        _ => parse_octal(raw),
    }
}

fn parse_base256(rest: &[u8]) -> Result<u64, BadNumber> {
    let mut value: u64 = 0;
    for &b in rest {
        if value >> 56 != 0 {
            return Err(BadNumber);
        }
        value = (value << 8) | u64::from(b);
    }
    Ok(value)
}

fn parse_octal(raw: &[u8]) -> Result<u64, BadNumber> {
    let start = raw.iter().position(|&b| b != b' ').unwrap_or(raw.len());
    let digits = &raw[start..];
    let end = digits
        .iter()
        .position(|&b| b == 0 || b == b' ')
        .unwrap_or(digits.len());
    if digits[end..].iter().any(|&b| b != 0 && b != b' ') {
        return Err(BadNumber);
    }
    let mut value: u64 = 0;
    for &b in &digits[..end] {
        if !(b'0'..=b'7').contains(&b) {
            return Err(BadNumber);
        }
        value = value
            .checked_mul(8)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or(BadNumber)?;
    }
    Ok(value)
}

/// Writes `value` into `out` as zero-padded octal with a trailing NUL, or
/// base-256 if it does not fit. Returns `false` if it fits neither.
pub(crate) fn put_number(out: &mut [u8], value: u64) -> bool {
    let digits = out.len() - 1;
    if digits < 22 && value >= 1u64 << (3 * digits) {
        if out.len() < 9 {
            return false;
        }
        out.fill(0);
        out[0] = 0x80;
        let n = out.len();
        out[n - 8..].copy_from_slice(&value.to_be_bytes());
        return true;
    }
    let text = format!("{value:0digits$o}");
    out[..digits].copy_from_slice(text.as_bytes());
    out[digits] = 0;
    true
}

/// Sum of the header bytes with the checksum field taken as spaces, both
/// unsigned (POSIX) and signed (historic implementations).
pub(crate) fn checksums(block: &[u8]) -> (u64, u64) {
    let (start, len) = field::CHKSUM;
    let mut unsigned: u64 = 0;
    let mut signed: i64 = 0;
    for (i, &b) in block.iter().enumerate().take(BLOCK) {
        let b = if (start..start + len).contains(&i) {
            b' '
        } else {
            b
        };
        unsigned += u64::from(b);
        signed += i64::from(b as i8);
    }
    (unsigned, signed as u64)
}

/// Writes the checksum field of a header whose other fields are final.
pub(crate) fn seal(block: &mut [u8; BLOCK]) {
    let (sum, _) = checksums(block);
    let (start, _) = field::CHKSUM;
    let text = format!("{sum:06o}");
    block[start..start + 6].copy_from_slice(text.as_bytes());
    block[start + 6] = 0;
    block[start + 7] = b' ';
}

/// The bytes of a NUL-terminated fixed-width field.
pub(crate) fn cstr(raw: &[u8]) -> &[u8] {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    &raw[..end]
}

/// Checks a member name for safety; returns the reason if refused.
pub(crate) fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("empty name");
    }
    if name.contains('\0') {
        return Err("NUL byte in name");
    }
    if name.starts_with('/') {
        return Err("absolute path");
    }
    if name.split('/').any(|c| c == "..") {
        return Err("`..` component");
    }
    Ok(())
}

/// Strips leading `./` (as written by `tar -cf x.tar .`).
pub(crate) fn strip_dot_slash(mut name: &str) -> &str {
    while let Some(rest) = name.strip_prefix("./") {
        name = rest;
    }
    name
}

/// Kinds of tar entries, from the typeflag byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EntryKind {
    /// Regular file (`'0'`, NUL or contiguous `'7'`).
    Regular,
    /// Hard link (`'1'`).
    HardLink,
    /// Symbolic link (`'2'`).
    Symlink,
    /// Character device (`'3'`).
    CharDevice,
    /// Block device (`'4'`).
    BlockDevice,
    /// Directory (`'5'`).
    Directory,
    /// FIFO (`'6'`).
    Fifo,
    /// Any other typeflag (GNU sparse, volume labels, ...).
    Other(u8),
}

impl EntryKind {
    pub(crate) fn from_flag(flag: u8) -> EntryKind {
        match flag {
            b'0' | 0 | b'7' => EntryKind::Regular,
            b'1' => EntryKind::HardLink,
            b'2' => EntryKind::Symlink,
            b'3' => EntryKind::CharDevice,
            b'4' => EntryKind::BlockDevice,
            b'5' => EntryKind::Directory,
            b'6' => EntryKind::Fifo,
            other => EntryKind::Other(other),
        }
    }

    /// A lowercase word for messages.
    pub fn describe(self) -> &'static str {
        match self {
            EntryKind::Regular => "regular file",
            EntryKind::HardLink => "hard link",
            EntryKind::Symlink => "symlink",
            EntryKind::CharDevice => "character device",
            EntryKind::BlockDevice => "block device",
            EntryKind::Directory => "directory",
            EntryKind::Fifo => "fifo",
            EntryKind::Other(_) => "special entry",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn octal_fields_decode() {
        assert_eq!(parse_number(b"00000000644\0"), Ok(0o644));
        assert_eq!(parse_number(b"  644 \0\0"), Ok(0o644));
        assert_eq!(parse_number(b"\0\0\0\0\0\0\0\0"), Ok(0));
        assert_eq!(parse_number(b"0000000064x\0"), Err(BadNumber));
        assert_eq!(parse_number(b"00009\0\0\0"), Err(BadNumber));
        assert_eq!(parse_number(b"12 34\0\0\0"), Err(BadNumber));
        assert_eq!(parse_number(b"7777777777777777777777777"), Err(BadNumber));
    }

    #[test]
    fn base256_fields_decode_and_refuse_negative_or_overflow() {
        let mut f = [0u8; 12];
        f[0] = 0x80;
        f[4..].copy_from_slice(&(10u64 << 30).to_be_bytes());
        assert_eq!(parse_number(&f), Ok(10 << 30));
        f[0] = 0xff;
        assert_eq!(parse_number(&f), Err(BadNumber));
        let mut big = [0xffu8; 12];
        big[0] = 0x80;
        assert_eq!(parse_number(&big), Err(BadNumber));
    }

    #[test]
    fn numbers_round_trip_through_octal_and_base256() {
        for v in [
            0,
            1,
            0o644,
            MAX_OCTAL_SIZE,
            MAX_OCTAL_SIZE + 1,
            1 << 40,
            u64::MAX >> 1,
        ] {
            let mut f = [0u8; 12];
            assert!(put_number(&mut f, v));
            assert_eq!(parse_number(&f), Ok(v), "value {v}");
        }
        let mut f = [0u8; 12];
        put_number(&mut f, MAX_OCTAL_SIZE);
        assert_eq!(&f, b"77777777777\0");
        put_number(&mut f, MAX_OCTAL_SIZE + 1);
        assert_eq!(f[0], 0x80);
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("a/b.jpg").is_ok());
        assert!(check_name("a/..b/c").is_ok());
        assert_eq!(check_name("/etc/passwd"), Err("absolute path"));
        assert_eq!(check_name("a/../../x"), Err("`..` component"));
        assert_eq!(check_name(".."), Err("`..` component"));
        assert_eq!(check_name("a\0b"), Err("NUL byte in name"));
        assert_eq!(check_name(""), Err("empty name"));
        assert_eq!(strip_dot_slash("././a"), "a");
    }
}
