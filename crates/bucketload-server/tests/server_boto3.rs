//! Bucket operations, multipart listings and S3 error codes, verified with an independent
//! client: boto3 from the workspace virtualenv (`python -m venv .venv && .venv/bin/pip
//! install -r requirements-dev.txt`, or set `BUCKETLOAD_PYTHON`).
#![allow(clippy::unwrap_used)]

mod common;

use common::TestServer;

fn python() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("BUCKETLOAD_PYTHON") {
        return path.into();
    }
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    workspace.join(".venv/bin/python")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boto3_sees_s3_semantics() {
    let t = TestServer::start().await;
    let python = python();
    assert!(
        python.exists(),
        "{} not found: create the virtualenv (python -m venv .venv && .venv/bin/pip install -r requirements-dev.txt) or set BUCKETLOAD_PYTHON",
        python.display()
    );
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/boto3_checks.py");
    let output = tokio::process::Command::new(&python)
        .arg(&script)
        .env("ENDPOINT", t.server.endpoint())
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "boto3 checks failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let counters = t.server.counters();
    assert_eq!(counters.get("CreateBucket"), 4);
    assert_eq!(counters.get("DeleteBucket"), 3);
    assert_eq!(counters.get("ListParts"), 2);
    assert!(counters.get("ListMultipartUploads") >= 2);
    assert_eq!(counters.get("UploadPartCopy"), 7);
    assert_eq!(counters.get("CopyObject"), 2);
}
