//! Bucket operations, multipart listings and S3 error codes, verified with an independent
//! client: boto3 from the workspace virtualenv (`scripts/setup.sh --python`, or set
//! `BUCKETLOAD_PYTHON`).
#![allow(clippy::unwrap_used)]

mod common;

use common::TestServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boto3_sees_s3_semantics() {
    let t = TestServer::start().await;
    let python = bucketload_test_support::venv_python();
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
