//! Helpers shared by the integration tests of bucketload-image.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};

/// The committed test corpus (`tests/data/make_fixtures.py` writes it).
pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

pub fn read(name: &str) -> Vec<u8> {
    std::fs::read(data(name)).unwrap()
}

/// Runs `python script args...`, failing the test with its output if it fails; returns stdout.
pub fn run_python(python: &Path, script: &str, args: &[&std::ffi::OsStr]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(script);
    let output = std::process::Command::new(python)
        .arg(&script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{} failed:\n{}\n{}",
        script.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}
