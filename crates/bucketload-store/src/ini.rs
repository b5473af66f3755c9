//! A small parser for the AWS shared `config` and `credentials` files.
//!
//! Only what those files use: `[section]` headers, `key = value` pairs,
//! `#`/`;` comment lines. Nested (indented) sub-properties such as
//! `s3 =\n  addressing_style = path` are stored as `s3.addressing_style`.

use std::collections::HashMap;

/// Sections by name, each a map of lowercase keys to values.
pub(crate) type Ini = HashMap<String, HashMap<String, String>>;

/// Parses INI text; malformed lines are ignored, as the AWS CLI does.
pub(crate) fn parse(text: &str) -> Ini {
    let mut ini = Ini::new();
    let mut section: Option<String> = None;
    let mut parent: Option<String> = None;
    for raw in text.lines() {
        let indented = raw.starts_with([' ', '\t']);
        let line = raw.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.trim().to_owned());
            parent = None;
            continue;
        }
        let (Some(sec), Some((key, value))) = (&section, line.split_once('=')) else {
            continue;
        };
        let key = key.trim().to_ascii_lowercase();
        let value = value.trim().to_owned();
        let entries = ini.entry(sec.clone()).or_default();
        match (&parent, indented) {
            (Some(p), true) => {
                entries.insert(format!("{p}.{key}"), value);
            }
            _ => {
                parent = value.is_empty().then(|| key.clone());
                entries.insert(key, value);
            }
        }
    }
    ini
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::parse;

    #[test]
    fn sections_keys_and_comments() {
        let ini = parse(
            "# comment\n[default]\naws_access_key_id = AKID\n; other\nRegion=eu-west-1\n\n\
             [profile dev]\nregion = us-west-2\nendpoint_url = http://127.0.0.1:9000\n",
        );
        assert_eq!(ini["default"]["aws_access_key_id"], "AKID");
        assert_eq!(ini["default"]["region"], "eu-west-1");
        assert_eq!(ini["profile dev"]["endpoint_url"], "http://127.0.0.1:9000");
    }

    #[test]
    fn nested_properties_and_garbage() {
        let ini = parse(
            "key = before section\n[p]\ns3 =\n  addressing_style = path\nnot a pair\nx = 1\n",
        );
        assert_eq!(ini["p"]["s3.addressing_style"], "path");
        assert_eq!(ini["p"]["x"], "1");
        assert_eq!(ini.len(), 1);
    }
}
