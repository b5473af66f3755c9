//! PAX extended header records: `"<len> <key>=<value>\n"`.

/// Values from PAX headers that override the next entry's ustar fields.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct PaxOverrides {
    pub path: Option<String>,
    pub linkpath: Option<String>,
    pub size: Option<u64>,
    pub mtime: Option<u64>,
}

impl PaxOverrides {
    pub fn merge(&mut self, later: PaxOverrides) {
        self.path = later.path.or(self.path.take());
        self.linkpath = later.linkpath.or(self.linkpath.take());
        self.size = later.size.or(self.size);
        self.mtime = later.mtime.or(self.mtime);
    }
}

/// Longest decimal length prefix accepted.
const MAX_LEN_DIGITS: usize = 20;

/// Parses the records of a PAX header whose data starts at shard offset
/// `base`. Errors carry the offset of the offending record.
pub(crate) fn parse(data: &[u8], base: u64) -> Result<PaxOverrides, (u64, String)> {
    let mut out = PaxOverrides::default();
    let mut pos = 0;
    while pos < data.len() {
        if data[pos..].iter().all(|&b| b == 0) {
            break;
        }
        let at = base + pos as u64;
        let (key, value, len) = record(&data[pos..]).map_err(|reason| (at, reason))?;
        apply(&mut out, key, value).map_err(|reason| (at, reason))?;
        pos += len;
    }
    Ok(out)
}

/// Splits one record; returns key, value and the record length.
fn record(rest: &[u8]) -> Result<(&[u8], &[u8], usize), String> {
    let space = rest
        .iter()
        .take(MAX_LEN_DIGITS + 1)
        .position(|&b| b == b' ')
        .ok_or("record length is not followed by a space")?;
    let digits = &rest[..space];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err("record length is not a decimal number".into());
    }
    let len: usize = std::str::from_utf8(digits)
        .ok()
        .and_then(|d| d.parse().ok())
        .ok_or("record length overflows")?;
    if len <= space + 2 {
        return Err(format!(
            "record length {len} is too small for its own header"
        ));
    }
    if len > rest.len() {
        return Err(format!(
            "record declares {len} bytes but only {} remain",
            rest.len()
        ));
    }
    if rest[len - 1] != b'\n' {
        return Err(format!("record of {len} bytes does not end with a newline"));
    }
    let body = &rest[space + 1..len - 1];
    let eq = body
        .iter()
        .position(|&b| b == b'=')
        .ok_or("record has no `=`")?;
    Ok((&body[..eq], &body[eq + 1..], len))
}

fn apply(out: &mut PaxOverrides, key: &[u8], value: &[u8]) -> Result<(), String> {
    match key {
        b"path" => out.path = Some(text(key, value)?),
        b"linkpath" => out.linkpath = Some(text(key, value)?),
        b"size" => out.size = Some(decimal(value).ok_or("`size` is not a decimal number")?),
        b"mtime" => out.mtime = Some(seconds(value).ok_or("`mtime` is not a decimal time")?),
        _ => {}
    }
    Ok(())
}

fn text(key: &[u8], value: &[u8]) -> Result<String, String> {
    let key = String::from_utf8_lossy(key);
    if value.contains(&0) {
        return Err(format!("`{key}` holds a NUL byte"));
    }
    String::from_utf8(value.to_vec()).map_err(|_| format!("`{key}` is not UTF-8"))
}

fn decimal(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// `[-]digits[.digits]`; negative times read as 0, fractions are dropped.
fn seconds(value: &[u8]) -> Option<u64> {
    let (negative, rest) = match value.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, value),
    };
    let (whole, frac) = match rest.iter().position(|&b| b == b'.') {
        Some(dot) => (&rest[..dot], &rest[dot + 1..]),
        None => (rest, &b""[..]),
    };
    if !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let whole = decimal(whole)?;
    Some(if negative { 0 } else { whole })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse() {
        let data = b"30 mtime=1700000000.123456789\n14 size=12345\n12 path=a/b\n";
        let p = parse(data, 0).expect("valid");
        assert_eq!(p.path.as_deref(), Some("a/b"));
        assert_eq!(p.size, Some(12345));
        assert_eq!(p.mtime, Some(1_700_000_000));
    }

    #[test]
    fn lying_lengths_are_refused_with_the_record_offset() {
        // Second record claims 20 bytes but is 12.
        let data = b"12 path=a/b\n20 path=c/d\n";
        let (offset, reason) = parse(data, 1024).expect_err("lies");
        assert_eq!(offset, 1024 + 12);
        assert!(reason.contains("declares 20 bytes"), "{reason}");
        let (offset, reason) = parse(b"11 path=a/b\n", 0).expect_err("short");
        assert_eq!(offset, 0);
        assert!(reason.contains("newline"), "{reason}");
        assert!(parse(b"x path=a\n", 0).is_err());
        assert!(parse(b"3 \n", 0).is_err());
        assert!(parse(b"9 size=x\n", 0).is_err());
        assert!(parse(b"11 path=a\0\n", 0).is_err());
    }
}
