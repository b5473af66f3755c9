//! Folder markers (keys ending in `/`, as the S3 console's "Create folder" and `aws s3api
//! put-object --key dir/` make them) are folders, never samples, in every command; against
//! the embedded server and against moto, with the markers written by boto3 and the listings
//! compared with the AWS CLI's.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use bucketload_server::{DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY};
use bucketload_test_support::{MotoServer, run_python, unique_bucket, venv_bin, venv_python};
use common::{Fixture, Run};

/// An S3 server the test talks to: its endpoint and credentials.
struct Backend {
    endpoint: String,
    key: &'static str,
    secret: &'static str,
    work: tempfile::TempDir,
}

impl Backend {
    fn embedded(fx: &Fixture) -> Backend {
        Backend {
            endpoint: fx.endpoint(),
            key: DEFAULT_ACCESS_KEY,
            secret: DEFAULT_SECRET_KEY,
            work: tempfile::tempdir().unwrap(),
        }
    }

    fn moto(moto: &MotoServer) -> Backend {
        Backend {
            endpoint: moto.endpoint().to_string(),
            key: "testing",
            secret: "testing",
            work: tempfile::tempdir().unwrap(),
        }
    }

    fn bucketload(&self, args: &[&str]) -> Run {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bucketload"));
        for (key, _) in std::env::vars() {
            if key.starts_with("AWS_") || key == "RUST_LOG" {
                cmd.env_remove(key);
            }
        }
        let out = cmd
            .args(args)
            .env("HOME", self.work.path())
            .env("AWS_ENDPOINT_URL", &self.endpoint)
            .env("AWS_ACCESS_KEY_ID", self.key)
            .env("AWS_SECRET_ACCESS_KEY", self.secret)
            .env("AWS_REGION", "us-east-1")
            .current_dir(self.work.path())
            .output()
            .unwrap();
        Run::from(out)
    }

    fn local(&self, name: &str) -> PathBuf {
        self.work.path().join(name)
    }

    /// Runs `script` in the workspace's Python with boto3 client `s3` for this server.
    fn python(&self, script: &str) -> String {
        let prelude = "import boto3, sys\n\
                       s3 = boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1', \
                       aws_access_key_id=sys.argv[2], aws_secret_access_key=sys.argv[3])\n";
        run_python(
            &format!("{prelude}{script}"),
            [&self.endpoint, self.key, self.secret],
        )
    }

    /// PUTs each key with `bytes` through boto3.
    fn put(&self, bucket: &str, keys: &[&str], bytes: &str) {
        let keys = keys
            .iter()
            .map(|k| format!("{k:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        self.python(&format!(
            "for k in [{keys}]: s3.put_object(Bucket={bucket:?}, Key=k, Body={bytes:?})\n"
        ));
    }

    /// The output of `aws s3 ls [FLAGS] s3://BUCKET/PREFIX/` (it must succeed).
    fn aws_s3_ls(&self, flags: &[&str], bucket: &str, prefix: &str) -> String {
        let out = Command::new(venv_python())
            .arg(venv_bin("aws"))
            .args(["--endpoint-url", &self.endpoint, "s3", "ls"])
            .args(flags)
            .arg(format!("s3://{bucket}/{prefix}/"))
            .env("HOME", self.work.path())
            .env("AWS_ACCESS_KEY_ID", self.key)
            .env("AWS_SECRET_ACCESS_KEY", self.secret)
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "aws failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `aws s3 ls --recursive s3://BUCKET/PREFIX/`: (size, key relative to the prefix).
    fn aws_ls_recursive(&self, bucket: &str, prefix: &str) -> Vec<(u64, String)> {
        parse_ls(&self.aws_s3_ls(&["--recursive"], bucket, prefix))
            .into_iter()
            .map(|(size, key)| (size, key[prefix.len() + 1..].to_string()))
            .collect()
    }

    /// `aws s3 ls s3://BUCKET/PREFIX/`: the names it prints, in order ([`listed_names`]).
    fn aws_ls(&self, bucket: &str, prefix: &str) -> Vec<String> {
        listed_names(&self.aws_s3_ls(&[], bucket, prefix))
    }
}

/// The names `aws s3 ls` or `bucketload ls` printed, in order: `dir/` for a `PRE dir/` line,
/// the key for an object line.
fn listed_names(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter_map(|words| match words.as_slice() {
            ["PRE", name] => Some((*name).to_string()),
            [_, _, _, key] => Some((*key).to_string()),
            _ => None,
        })
        .collect()
}

/// `date time size key` lines (of `aws s3 ls` or `bucketload ls`): (size, key).
fn parse_ls(text: &str) -> Vec<(u64, String)> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|words| words.len() >= 3 && words[0] != "PRE" && !words[0].starts_with("Total"))
        .map(|words| {
            let key = words.get(3).copied().unwrap_or("");
            (words[2].parse().unwrap(), key.to_string())
        })
        .collect()
}

fn files_below(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in walk(dir) {
        if entry.is_file() {
            out.push(entry.strip_prefix(dir).unwrap().display().to_string());
        }
    }
    out.sort();
    out
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            all.extend(walk(&path));
        }
        all.push(path);
    }
    all
}

/// The markers every test writes below `data`: the prefix's own, one of a folder with
/// objects, one of an empty folder and one of a nested empty folder.
const MARKERS: [&str; 4] = [
    "data/",
    "data/class_000/",
    "data/empty/",
    "data/empty/deeper/",
];

/// A dataset of 8 samples in 2 classes below `s3://BUCKET/data`, with [`MARKERS`]; every
/// command must see 8 samples and exit 0.
fn every_command_sees_folders_not_samples(b: &Backend) -> String {
    let bucket = unique_bucket();
    let uri = format!("s3://{bucket}/data");
    b.bucketload(&[
        "gen",
        &uri,
        "--samples",
        "8",
        "--classes",
        "2",
        "--size",
        "2KB",
    ])
    .ok();
    b.put(&bucket, &MARKERS, "");

    let ls = b.bucketload(&["ls", &uri]).ok();
    let dirs: Vec<&str> = ls.stdout.lines().map(str::trim).collect();
    assert_eq!(
        dirs,
        ["PRE class_000/", "PRE class_001/", "PRE empty/"],
        "{ls:#?}"
    );
    let ls = b.bucketload(&["ls", &format!("{uri}/empty")]).ok();
    assert_eq!(ls.stdout.trim(), "PRE deeper/", "{ls:#?}");
    let ls = b.bucketload(&["ls", &format!("{uri}/empty/deeper")]).ok();
    assert_eq!(ls.stdout, "", "an empty folder lists nothing: {ls:#?}");

    // `ls -r` lists what `aws s3 ls --recursive` lists, but the markers.
    let ls = b.bucketload(&["ls", "-r", &uri, "--summarize"]).ok();
    let mut ours = parse_ls(&ls.stdout);
    let mut reference: Vec<(u64, String)> = b
        .aws_ls_recursive(&bucket, "data")
        .into_iter()
        .filter(|(_, key)| !key.is_empty() && !key.ends_with('/'))
        .collect();
    ours.sort();
    reference.sort();
    assert_eq!(ours, reference, "{ls:#?}");
    assert_eq!(ours.len(), 8);
    assert!(ls.stdout.contains("Total Objects: 8"), "{ls:#?}");
    let json = b.bucketload(&["ls", "-r", "--json", &uri]).ok();
    assert_eq!(json.stdout.lines().count(), 8, "{json:#?}");

    let stats = b.bucketload(&["stats", &uri, "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&stats.stdout).unwrap();
    assert_eq!(v["objects"], 8, "{stats:#?}");
    assert_eq!(
        v["classes"],
        serde_json::json!({"class_000": 4, "class_001": 4}),
        "{stats:#?}"
    );

    let read = b.bucketload(&["read", &uri, "--no-shuffle"]).ok();
    assert!(read.stdout.contains("8 samples"), "{read:#?}");
    let bench = b
        .bucketload(&[
            "bench",
            "--dataset",
            &uri,
            "--epochs",
            "1",
            "--batch-size",
            "4",
            "--no-decode",
            "--compute-ms",
            "0",
            "--json",
        ])
        .ok();
    assert!(bench.stdout.contains("\"samples\": 8") || bench.stdout.contains("\"samples\":8"));

    let down = b.local("down");
    b.bucketload(&["cp", "-r", &uri, down.to_str().unwrap()])
        .ok();
    assert_eq!(files_below(&down).len(), 8, "{:?}", files_below(&down));
    assert!(down.join("empty/deeper").is_dir(), "empty folders are made");
    let back = format!("s3://{bucket}/back");
    let up = b
        .bucketload(&["cp", "-r", down.to_str().unwrap(), &back])
        .ok();
    assert!(up.stdout.contains("copied 8 objects"), "{up:#?}");

    let manifest = b.bucketload(&["manifest", &uri]).ok();
    assert!(
        manifest.stdout.contains("(8 files") && manifest.stdout.contains("2 classes"),
        "{manifest:#?}"
    );
    let verify = b.bucketload(&["verify", &uri]).ok();
    assert!(verify.stdout.contains("0 problems"), "{verify:#?}");
    assert!(
        !verify.stderr.contains("not in the manifest"),
        "{verify:#?}"
    );

    let shards = format!("s3://{bucket}/shards");
    b.put(&bucket, &["shards/"], "");
    let shard = b
        .bucketload(&["shard", &uri, &shards, "--samples-per-shard", "4"])
        .ok();
    assert!(shard.stdout.contains("8 samples"), "{shard:#?}");
    let index = b.bucketload(&["index", &shards, "--force"]).ok();
    assert!(index.stdout.contains("indexed 2 shards"), "{index:#?}");
    b.bucketload(&["verify", &shards]).ok();

    // A checkpoint prefix with markers: they are no checkpoints.
    let ckpt = format!("s3://{bucket}/ckpt");
    std::fs::write(b.local("model.pt"), b"weights").unwrap();
    let saved = format!("{ckpt}/step-1.pt");
    b.bucketload(&[
        "ckpt",
        "save",
        b.local("model.pt").to_str().unwrap(),
        &saved,
    ])
    .ok();
    b.put(&bucket, &["ckpt/", "ckpt/step-0/"], "");
    let ls = b.bucketload(&["ckpt", "ls", &ckpt]).ok();
    assert!(ls.stdout.contains("1 checkpoints, 7 B"), "{ls:#?}");
    assert_eq!(ls.stdout.lines().count(), 2, "{ls:#?}");
    bucket
}

#[test]
fn folder_markers_are_folders_on_the_embedded_server() {
    let fx = Fixture::start();
    let b = Backend::embedded(&fx);
    every_command_sees_folders_not_samples(&b);
}

#[test]
fn folder_markers_and_empty_segments_on_moto() {
    let moto = MotoServer::start();
    let b = Backend::moto(&moto);
    let bucket = every_command_sees_folders_not_samples(&b);
    let uri = format!("s3://{bucket}/data");

    // A marker that holds bytes and keys with an empty segment, which only some stores
    // accept: listed by `ls`, skipped with a warning naming them by everything that reads.
    b.put(
        &bucket,
        &["data/full/", "data/odd//", "data/class_001//x.jpg"],
        "bytes",
    );
    b.python(&format!(
        "s3.delete_object(Bucket={bucket:?}, Key='data/_bucketload/manifest.bin')\n"
    ));
    let ls = b.bucketload(&["ls", &uri]).ok();
    assert!(ls.stdout.contains("PRE full/") && ls.stdout.contains("PRE odd/"));
    let ls = b.bucketload(&["ls", "-r", &uri]).ok();
    let ours = parse_ls(&ls.stdout);
    assert!(
        ours.contains(&(5, "class_001//x.jpg".to_string())),
        "{ls:#?}"
    );
    assert_eq!(ours.len(), 9, "{ls:#?}");
    assert!(ls.stderr.contains(&format!("{uri}/full/")), "{ls:#?}");

    let stats = b.bucketload(&["stats", &uri, "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&stats.stdout).unwrap();
    // `class_001//x.jpg` is a sample like the others.
    assert_eq!(v["objects"], 9, "{stats:#?}");
    assert!(!stats.stderr.contains("class_001//x.jpg"), "{stats:#?}");
    let down = b.local("down2");
    let cp = b
        .bucketload(&["cp", "-r", &uri, down.to_str().unwrap()])
        .ok();
    // `class_001//x.jpg` is read as boto3 reads it, and lands in the folder as a file
    // system names it (`class_001/x.jpg`).
    assert!(cp.stdout.contains("copied 9 objects"), "{cp:#?}");
    assert!(!cp.stdout.contains("skipped"), "{cp:#?}");
    assert!(down.join("full").is_dir() && down.join("odd").is_dir());
    let read = b.bucketload(&["read", &uri, "--no-shuffle"]).ok();
    assert!(read.stdout.contains("9 samples"), "{read:#?}");
}

/// Keys object_store's paths cannot spell (`a//b.jpg`, a tab, a `..` segment, beside folder
/// markers) are samples of a files dataset like any other: `read`, `manifest` and `cp -r`
/// read them as boto3 does and `cp -r` writes them at the same keys, checked with boto3.
fn unspellable_keys_are_samples(b: &Backend) {
    let bucket = unique_bucket();
    let keys = [
        "cls/a.jpg",
        "cls//b.jpg",
        "cls/t\tab.jpg",
        "cls/up/../u.jpg",
        "other/c.jpg",
    ];
    let listing = format!(
        "def keys(prefix):\n    \
         pages = s3.get_paginator('list_objects_v2').paginate(Bucket={bucket:?}, Prefix=prefix)\n    \
         return sorted((o['Key'][len(prefix):], s3.get_object(Bucket={bucket:?}, \
         Key=o['Key'])['Body'].read().decode()) for p in pages for o in p.get('Contents', []) \
         if not o['Key'].endswith('/'))\n"
    );
    b.python(&format!(
        "s3.create_bucket(Bucket={bucket:?})\n\
         for k in {keys:?}: s3.put_object(Bucket={bucket:?}, Key='ds/' + k, Body=k.encode())\n\
         for k in ['ds/', 'ds/cls/', 'ds/x/']: s3.put_object(Bucket={bucket:?}, Key=k, Body=b'')\n"
    ));
    let uri = format!("s3://{bucket}/ds");
    let read = b.bucketload(&["read", &uri, "--no-shuffle"]).ok();
    assert!(read.stdout.contains("5 samples"), "{read:#?}");
    assert!(!read.stderr.contains("skipped"), "{read:#?}");

    let copy = format!("s3://{bucket}/copy");
    let cp = b.bucketload(&["cp", "-r", &uri, &copy]).ok();
    assert!(cp.stdout.contains("copied 5 objects"), "{cp:#?}");
    let got = b.python(&format!(
        "{listing}print(keys('copy/') == keys('ds/'), keys('copy/'))\n"
    ));
    assert!(got.starts_with("True"), "{got}");

    let down = b.local("unspellable");
    let cp = b
        .bucketload(&["cp", "-r", &uri, down.to_str().unwrap()])
        .ok();
    // A `..` segment would leave its folder: that one object is skipped, named.
    assert!(cp.stdout.contains("copied 4 objects"), "{cp:#?}");
    assert!(cp.stdout.contains("skipped 1 object"), "{cp:#?}");
    assert!(cp.stderr.contains("cls/up/../u.jpg"), "{cp:#?}");
    // The folder names `cls//b.jpg` as a file system does. (A control character is written
    // percent-encoded, `t%09ab.jpg`, as object_store's local store names files.)
    let files = files_below(&down);
    assert_eq!(
        std::fs::read_to_string(down.join("cls").join("b.jpg")).ok(),
        Some("cls//b.jpg".to_owned()),
        "{files:?}"
    );
    assert_eq!(files.len(), 4, "{files:?}");

    let stats = b.bucketload(&["stats", &uri, "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&stats.stdout).unwrap();
    assert_eq!(v["objects"], 5, "{stats:#?}");
    assert_eq!(v["classes"]["cls"], 4, "{stats:#?}");

    // Format 1, which boto3 reads as JSON; format 2 (the default) is checked by its magic.
    let manifest = b.bucketload(&["manifest", &uri]).ok();
    assert!(manifest.stdout.contains("(5 files"), "{manifest:#?}");
    let magic = b.python(&format!(
        "print(s3.get_object(Bucket={bucket:?}, Key='ds/_bucketload/manifest.bin')['Body'].read()[:8].hex())\n"
    ));
    assert_eq!(magic.trim(), "89424c4d460d0a1a");
    b.bucketload(&["manifest", &uri, "--manifest-format", "1"])
        .ok();
    let listed = b.python(&format!(
        "import json\n\
         m = json.loads(s3.get_object(Bucket={bucket:?}, Key='ds/_bucketload/manifest.json')['Body'].read())\n\
         print(json.dumps(sorted(f['key'] for f in m['files'])))\n"
    ));
    let mut want: Vec<&str> = keys.to_vec();
    want.sort();
    assert_eq!(
        serde_json::from_str::<Vec<String>>(listed.trim()).unwrap(),
        want
    );
    let read = b.bucketload(&["read", &uri, "--no-shuffle"]).ok();
    assert!(read.stdout.contains("5 samples"), "{read:#?}");
    let verify = b.bucketload(&["verify", &uri]).ok();
    assert!(verify.stdout.contains("0 problems"), "{verify:#?}");
    assert!(
        !verify.stderr.contains("not in the manifest"),
        "{verify:#?}"
    );
}

#[test]
fn unspellable_keys_are_samples_on_the_embedded_server() {
    let fx = Fixture::start();
    let b = Backend::embedded(&fx);
    unspellable_keys_are_samples(&b);
}

#[test]
fn unspellable_keys_are_samples_on_moto() {
    let moto = MotoServer::start();
    let b = Backend::moto(&moto);
    unspellable_keys_are_samples(&b);
}

/// A folder of more objects than one page holds is listed page by page as the store answers,
/// each page's directories and then its objects, as `aws s3 ls` prints it: nothing waits for
/// (or holds) the whole folder. With a directory sorting first and one sorting last, a listing
/// gathered whole would print both directories before every object.
fn a_folder_of_many_pages_lists_page_by_page(b: &Backend) {
    let bucket = unique_bucket();
    b.python(&format!(
        "from concurrent.futures import ThreadPoolExecutor\n\
         s3.create_bucket(Bucket={bucket:?})\n\
         keys = ['big/a/x', 'big/z/x'] + ['big/k%04d' % i for i in range(1500)]\n\
         list(ThreadPoolExecutor(8).map(lambda k: s3.put_object(Bucket={bucket:?}, Key=k, \
         Body=b'1'), keys))\n"
    ));
    let aws = b.aws_ls(&bucket, "big");
    assert_eq!(aws.len(), 1502, "{aws:?}");
    let run = b.bucketload(&["ls", &format!("s3://{bucket}/big/")]);
    assert_eq!(run.code, 0, "{run:#?}");
    let ours = listed_names(&run.stdout);
    assert_eq!(ours, aws);
    let z = ours.iter().position(|n| n == "z/").unwrap();
    assert!(
        z > 1 && z < 1501,
        "z/ printed with the page that holds it: {z}"
    );
}

#[test]
fn a_folder_of_many_pages_lists_page_by_page_on_the_embedded_server() {
    let fx = Fixture::start();
    a_folder_of_many_pages_lists_page_by_page(&Backend::embedded(&fx));
}

#[test]
fn a_folder_of_many_pages_lists_page_by_page_on_moto() {
    let moto = MotoServer::start();
    a_folder_of_many_pages_lists_page_by_page(&Backend::moto(&moto));
}
