//! The CLI's whole story against SeaweedFS's S3 gateway, an independent implementation that
//! checks signatures: gen, ls, stats, manifest, cp both ways, shard, index, verify, read in
//! every format with a cache, ckpt save/load/ls/gc and a read-write mount, all into a bucket
//! that exists before the first command (created with boto3 by another SeaweedFS identity, so
//! a CreateBucket from the CLI's identity would answer 409 BucketAlreadyExists). Objects are
//! checked with boto3. The mount needs /dev/fuse and fusermount3, as in cli_mount.rs.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use bucketload_test_support::{
    SEAWEED_COLLEAGUE, SEAWEED_OWNER, SeaweedServer, pattern, unique_bucket, venv_python,
};
use common::{Run, json};

/// `bucketload ARGS` as [`SEAWEED_OWNER`], with a clean AWS environment.
fn bucketload(weed: &SeaweedServer, work: &Path, args: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bucketload"));
    for (key, _) in std::env::vars() {
        if key.starts_with("AWS_") || key == "RUST_LOG" {
            cmd.env_remove(key);
        }
    }
    let out = cmd
        .args(args)
        .env("HOME", work)
        .env("AWS_ENDPOINT_URL", weed.endpoint())
        .env("AWS_ACCESS_KEY_ID", SEAWEED_OWNER.0)
        .env("AWS_SECRET_ACCESS_KEY", SEAWEED_OWNER.1)
        .env("AWS_REGION", "us-east-1")
        .current_dir(work)
        .output()
        .unwrap();
    Run::from(out)
}

/// boto3 for the independent checks, one process answering one JSON request per line (so
/// Python and boto3 load once): `["create"]`, `["list", PREFIX]` (`[[key, size], ...]`),
/// `["get", KEY, FILE]`, `["copy", FROM, TO]`, `["start-upload", KEY]` (a multipart upload
/// left unfinished), `["uploads", PREFIX]` (their count).
const BOTO3: &str = r#"
import json, sys, boto3
endpoint, key, secret, bucket = sys.argv[1:]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key,
                  aws_secret_access_key=secret, region_name="us-east-1")
for line in sys.stdin:
    op, *args = json.loads(line)
    out = None
    if op == "create":
        s3.create_bucket(Bucket=bucket)
    elif op == "list":
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=args[0])
        out = [[o["Key"], o["Size"]] for p in pages for o in p.get("Contents", [])]
    elif op == "get":
        with open(args[1], "wb") as f:
            f.write(s3.get_object(Bucket=bucket, Key=args[0])["Body"].read())
    elif op == "copy":
        s3.copy_object(Bucket=bucket, Key=args[1], CopySource={"Bucket": bucket, "Key": args[0]})
    elif op == "start-upload":
        u = s3.create_multipart_upload(Bucket=bucket, Key=args[0])
        s3.upload_part(Bucket=bucket, Key=args[0], UploadId=u["UploadId"], PartNumber=1, Body=b"x")
    elif op == "uploads":
        out = len(s3.list_multipart_uploads(Bucket=bucket, Prefix=args[0]).get("Uploads", []))
    print(json.dumps(out), flush=True)
"#;

/// The boto3 process of one identity on one bucket; it ends when its stdin closes (on drop).
struct Boto3 {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Boto3 {
    fn start(weed: &SeaweedServer, bucket: &str, identity: (&str, &str)) -> Boto3 {
        let python = venv_python();
        let mut child = Command::new(&python)
            .arg("-c")
            .arg(BOTO3)
            .args([weed.endpoint(), identity.0, identity.1, bucket])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {}: {e}; run scripts/setup.sh --python",
                    python.display()
                )
            });
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Boto3 {
            child,
            stdin,
            stdout,
        }
    }

    fn call(&mut self, request: &[&str]) -> serde_json::Value {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{}", serde_json::to_string(request).unwrap()).unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        // A failed request ends the process (its traceback on stderr) and the line is empty.
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("boto3 {request:?} failed: {e}"))
    }

    /// (key relative to `prefix`, size), sorted.
    fn list(&mut self, prefix: &str) -> Vec<(String, u64)> {
        let v: Vec<(String, u64)> = serde_json::from_value(self.call(&["list", prefix])).unwrap();
        let mut v: Vec<_> = v
            .into_iter()
            .map(|(k, s)| (k.strip_prefix(prefix).unwrap().to_owned(), s))
            .collect();
        v.sort();
        v
    }

    fn get(&mut self, key: &str, work: &Path) -> Vec<u8> {
        let file = work.join("boto3-get.bin");
        self.call(&["get", key, file.to_str().unwrap()]);
        std::fs::read(file).unwrap()
    }
}

impl Drop for Boto3 {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// Every file below `dir` as (relative path, bytes), sorted.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_owned();
                out.push((rel, std::fs::read(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[test]
fn the_cli_story_on_seaweedfs_into_an_existing_bucket() {
    let weed = SeaweedServer::shared();
    let work = tempfile::tempdir().unwrap();
    let work = work.path();
    let run = |args: &[&str]| bucketload(weed, work, args).ok();
    let bucket = unique_bucket();
    Boto3::start(weed, &bucket, SEAWEED_COLLEAGUE).call(&["create"]);
    let mut boto3 = Boto3::start(weed, &bucket, SEAWEED_OWNER);
    let s3 = |path: &str| format!("s3://{bucket}/{path}");

    // gen, ls, stats, manifest, verify.
    let train = s3("train");
    run(&[
        "gen",
        &train,
        "--samples",
        "24",
        "--classes",
        "3",
        "--size",
        "4KB",
    ]);
    let listed = boto3.list("train/");
    assert_eq!(listed.len(), 24, "{listed:?}");
    assert!(listed.iter().any(|(k, _)| k == "class_002/000023.jpg"));
    let ls = run(&["ls", &train]);
    let folders: Vec<&str> = ls.stdout.lines().map(str::trim).collect();
    assert_eq!(
        folders,
        ["PRE class_000/", "PRE class_001/", "PRE class_002/"]
    );
    let summary = run(&["ls", "-r", "--summarize", &train]);
    assert!(summary.stdout.contains("Total Objects: 24"), "{summary:#?}");
    let stats = json(&run(&["stats", &train, "--json"]));
    assert_eq!(stats["objects"], 24);
    assert_eq!(stats["classes"]["class_001"], 8);
    run(&["manifest", &train]);
    assert!(
        boto3
            .list("train/_bucketload/")
            .iter()
            .any(|(k, _)| k == "manifest.bin")
    );
    let verified = run(&["verify", &train]);
    assert!(verified.stdout.contains("0 problems"), "{verified:#?}");

    // cp down, byte for byte what boto3 reads; cp back up under another prefix.
    run(&["cp", "-r", &train, "local"]);
    let local = files(&work.join("local"));
    assert_eq!(local.len(), 25, "24 images and the manifest");
    for (rel, bytes) in local.iter().step_by(6) {
        assert_eq!(&boto3.get(&format!("train/{rel}"), work), bytes, "{rel}");
    }
    run(&["cp", "-r", "local", &s3("back")]);
    assert_eq!(boto3.list("back/"), boto3.list("train/"));

    // shard and verify; index shards another tool wrote (here: a copy made with boto3).
    let shards = s3("shards");
    run(&["shard", &train, &shards, "--samples-per-shard", "8"]);
    let shard_keys: Vec<String> = boto3.list("shards/").into_iter().map(|(k, _)| k).collect();
    for i in 0..3 {
        assert!(
            shard_keys.contains(&format!("shard-00000{i}.tar")),
            "{shard_keys:?}"
        );
        assert!(
            shard_keys.contains(&format!("shard-00000{i}.tar.idx")),
            "{shard_keys:?}"
        );
    }
    let verified = run(&["verify", &shards]);
    assert!(verified.stdout.contains("0 problems"), "{verified:#?}");
    boto3.call(&["copy", "shards/shard-000001.tar", "foreign/a.tar"]);
    run(&["index", &s3("foreign")]);
    let foreign: Vec<String> = boto3.list("foreign/").into_iter().map(|(k, _)| k).collect();
    assert_eq!(foreign, ["a.tar", "a.tar.idx"]);

    // read in every format, each with a cache: the second files pass is all hits.
    let cache = work.join("cache");
    let cache = cache.to_str().unwrap();
    for (uri, format) in [
        (&train, "files"),
        (&train, "files"),
        (&shards, "shards"),
        (&shards, "indexed"),
        (&shards, "auto"),
    ] {
        let report = json(&run(&[
            "read", uri, "--format", format, "--cache", cache, "--json",
        ]));
        assert_eq!(report["loader"]["samples"], 24, "{format}: {report}");
        assert_eq!(report["loader"]["cache"]["errors"], 0, "{format}: {report}");
    }
    let again = json(&run(&[
        "read", &train, "--format", "files", "--cache", cache, "--json",
    ]));
    assert_eq!(again["loader"]["cache"]["hits"], 24, "{again}");
    assert_eq!(again["loader"]["requests"]["get"], 0, "{again}");

    // ckpt: two multipart saves, ls, load, and gc of a save left unfinished.
    let ckpt_file = work.join("model.pt");
    let model = pattern(12 << 20, 3);
    std::fs::write(&ckpt_file, &model).unwrap();
    let run_prefix = s3("ckpt/run-1");
    for step in ["step-1.pt", "step-2.pt"] {
        let uri = format!("{run_prefix}/{step}");
        run(&[
            "ckpt",
            "save",
            ckpt_file.to_str().unwrap(),
            &uri,
            "--part-size",
            "5MiB",
        ]);
    }
    assert_eq!(boto3.get("ckpt/run-1/step-2.pt", work), model);
    boto3.call(&["start-upload", "ckpt/run-1/killed.pt"]);
    let ls = run(&["ckpt", "ls", &run_prefix]);
    assert!(ls.stdout.contains("2 checkpoints"), "{ls:#?}");
    assert!(ls.stdout.contains("1 unfinished saves"), "{ls:#?}");
    let loaded = work.join("loaded.pt");
    let step1 = format!("{run_prefix}/step-1.pt");
    run(&["ckpt", "load", &step1, loaded.to_str().unwrap()]);
    assert_eq!(std::fs::read(&loaded).unwrap(), model);
    let gc = run(&["ckpt", "gc", &run_prefix, "--older-than", "0s"]);
    assert!(gc.stdout.contains("aborted 1 unfinished saves"), "{gc:#?}");
    assert_eq!(boto3.call(&["uploads", "ckpt/"]), 0);

    // The mount: read what gen wrote, write a new object (multipart), overwrite, delete.
    let mounted = Mounted::new(weed, work, &bucket);
    let mnt = mounted.dir.clone();
    let (jpeg, bytes) = local.iter().find(|(k, _)| k.ends_with(".jpg")).unwrap();
    assert_eq!(&std::fs::read(mnt.join("train").join(jpeg)).unwrap(), bytes);
    let names: Vec<String> = std::fs::read_dir(mnt.join("shards"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(names.contains(&"shard-000000.tar".to_owned()), "{names:?}");
    let written = pattern(7 << 20, 4);
    std::fs::write(mnt.join("written.bin"), &written).unwrap();
    assert_eq!(boto3.get("written.bin", work), written);
    std::fs::write(mnt.join("written.bin"), "again").unwrap();
    assert_eq!(boto3.get("written.bin", work), b"again");
    std::fs::remove_file(mnt.join("written.bin")).unwrap();
    assert!(!boto3.list("").iter().any(|(k, _)| k == "written.bin"));
    mounted.unmount();
}

fn is_mounted(dir: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let dir = dir.to_str().unwrap();
    mounts
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(dir) && l.contains("bucketload"))
}

/// A mount of a whole bucket, lazily unmounted on drop if the test failed before
/// [`Mounted::unmount`].
struct Mounted {
    dir: PathBuf,
}

impl Mounted {
    /// `bucketload mount s3://BUCKET DIR --allow-overwrite --allow-delete` (returns once
    /// mounted).
    fn new(weed: &SeaweedServer, work: &Path, bucket: &str) -> Mounted {
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing: mount tests need FUSE (run the container with --device /dev/fuse)"
        );
        let dir = work.join("mnt");
        std::fs::create_dir(&dir).unwrap();
        let dir = std::fs::canonicalize(dir).unwrap();
        let uri = format!("s3://{bucket}");
        let args = [
            "mount",
            &uri,
            dir.to_str().unwrap(),
            "--allow-overwrite",
            "--allow-delete",
            "--part-size",
            "5MiB",
        ];
        bucketload(weed, work, &args).ok();
        assert!(
            is_mounted(&dir),
            "not in /proc/self/mounts after mount returned"
        );
        Mounted { dir }
    }

    fn unmount(&self) {
        let status = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.dir)
            .status();
        assert!(status.unwrap().success(), "fusermount3 -u failed");
        let deadline = Instant::now() + Duration::from_secs(30);
        while is_mounted(&self.dir) {
            assert!(Instant::now() < deadline, "the mount did not go away");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if is_mounted(&self.dir) {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.dir)
                .status();
        }
    }
}
