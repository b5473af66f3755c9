//! Helpers shared by the commands: URIs as given, sizes and counts as printed.

use anyhow::Context;

/// Local relative paths become absolute, so the store and its messages name the real folder.
pub fn local_to_absolute(uri: &str) -> anyhow::Result<String> {
    // An empty URI is left for the store crate to refuse, never taken as the current folder.
    if uri.is_empty() || uri.contains("://") || uri.starts_with('/') {
        return Ok(uri.to_string());
    }
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let joined = cwd.join(uri.trim_start_matches("./"));
    Ok(joined.to_string_lossy().trim_end_matches("/.").to_string())
}

/// The error of a URI under which nothing is stored: no object, no prefix.
pub fn nothing_at(uri: &str) -> anyhow::Error {
    bucketload_store::Error::NotFound {
        uri: uri.to_string(),
        what: "object or prefix",
        hint: "check the path with `bucketload ls` on its parent".into(),
    }
    .into()
}

/// "1 object", "2 objects".
pub fn objects(n: u64) -> String {
    if n == 1 {
        "1 object".to_string()
    } else {
        format!("{n} objects")
    }
}

/// Bytes in decimal units, e.g. "100.2 KB".
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes_use_decimal_units() {
        assert_eq!(human(999), "999 B");
        assert_eq!(human(100_200), "100.2 KB");
        assert_eq!(human(2_500_000_000), "2.5 GB");
    }
}
