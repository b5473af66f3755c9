//! The workspace virtualenv's tools (Python, the AWS CLI, moto's server, `weed`), found
//! one way by every test: `$BUCKETLOAD_VENV`, else `<workspace>/.venv`, which
//! `scripts/setup.sh --python` creates from requirements-dev.txt and requirements-torch.txt.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;

use crate::workspace_root;

/// What to run when the virtualenv or one of its tools is missing.
pub const SETUP_HINT: &str = "run scripts/setup.sh --python (it creates .venv with the test tools \
                              of requirements-dev.txt) or set BUCKETLOAD_VENV to such a virtualenv";

/// The virtualenv directory: `$BUCKETLOAD_VENV`, else `<workspace>/.venv`.
pub fn venv() -> PathBuf {
    std::env::var_os("BUCKETLOAD_VENV")
        .map_or_else(|| workspace_root().join(".venv"), PathBuf::from)
}

/// `bin/<name>` of the virtualenv, which must exist (the test fails saying what to install).
pub fn venv_bin(name: &str) -> PathBuf {
    let path = venv().join("bin").join(name);
    assert!(path.exists(), "{} not found: {SETUP_HINT}", path.display());
    path
}

/// The virtualenv's Python (boto3, tarfile, webdataset, Pillow, torch…):
/// `$BUCKETLOAD_PYTHON` when set, else `bin/python` of [`venv`].
pub fn venv_python() -> PathBuf {
    match std::env::var_os("BUCKETLOAD_PYTHON") {
        Some(python) => {
            let python = PathBuf::from(python);
            assert!(
                python.exists(),
                "BUCKETLOAD_PYTHON={} not found: {SETUP_HINT}",
                python.display()
            );
            python
        }
        None => venv_bin("python"),
    }
}

/// Runs `python -c script args…` in [`venv_python`]; its stdout. A failure fails the test
/// with the script's stderr.
pub fn run_python<A: AsRef<OsStr>>(script: &str, args: impl IntoIterator<Item = A>) -> String {
    let python = venv_python();
    let out = Command::new(&python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; {SETUP_HINT}", python.display()));
    assert!(
        out.status.success(),
        "python failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
