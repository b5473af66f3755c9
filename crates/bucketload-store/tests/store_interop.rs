//! Objects written by the store are read back by boto3 and the other way
//! round, on moto: an independent client checks our bytes.

#![allow(clippy::unwrap_used)] // tests fail loudly on any error

use bucketload_store::object_store::ObjectStoreExt;
use bucketload_store::object_store::path::Path;
use bucketload_store::{MultipartOptions, MultipartWriter, Store, StoreConfig};
use bucketload_test_support::{MotoServer, run_python};
use bytes::Bytes;
use sha2::{Digest, Sha256};

/// Runs a boto3 snippet against moto; `args` become `sys.argv[1:]`.
fn boto3(moto: &MotoServer, script: &str, args: &[&str]) -> String {
    let prelude = format!(
        "import sys, hashlib, boto3\ns3 = boto3.client('s3', endpoint_url='{}', region_name='us-east-1', \
         aws_access_key_id='testing', aws_secret_access_key='testing')\n",
        moto.endpoint()
    );
    run_python(&(prelude + script), args).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_object_reads_back_in_boto3() {
    let moto = MotoServer::start();
    let bucket = moto.bucket().await;
    let store = Store::open(&format!("s3://{bucket}/ckpt"), &moto.store_config()).unwrap();
    let data: Bytes = (0..(11 << 20) + 5)
        .map(|i| (i * 7 % 256) as u8)
        .collect::<Vec<u8>>()
        .into();
    let opts = MultipartOptions {
        part_size: 5 << 20,
        concurrency: 3,
    };
    let mut w = MultipartWriter::new(store.object_store(), Path::from("model.pt"), opts);
    w.write(data.clone()).await.unwrap();
    w.finish().await.unwrap();
    let script = "b = s3.get_object(Bucket=sys.argv[1], Key='ckpt/model.pt')['Body'].read()\n\
                  print(len(b), hashlib.sha256(b).hexdigest())";
    let got = boto3(&moto, script, &[&bucket]);
    assert_eq!(
        got,
        format!("{} {}", data.len(), hex::encode(Sha256::digest(&data)))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boto3_object_reads_in_the_store() {
    let moto = MotoServer::start();
    let bucket = moto.bucket().await;
    let script =
        "s3.put_object(Bucket=sys.argv[1], Key='data/from-boto3.txt', Body=b'written by boto3')";
    boto3(&moto, script, &[&bucket]);
    let store = Store::open(&format!("s3://{bucket}/data"), &moto.store_config()).unwrap();
    let got = store
        .object_store()
        .get(&Path::from("from-boto3.txt"))
        .await
        .unwrap();
    assert_eq!(got.bytes().await.unwrap(), "written by boto3");
}

/// Keys object_store's paths rewrite or cannot spell, each written and read through
/// `Store::object` below prefixes as written (`ü/`, `a//`, `../`), checked with boto3 both
/// ways. Keys with `.` and `..` segments are literal keys to S3 and boto3, as to us.
const KEYS: &[&str] = &[
    "ü/x.pt",
    "d#~[]{}^|<>\"\\*%41/f.pt",
    "a//b.pt",
    "/lead.pt",
    "trail/",
    "tab\tx.pt",
    "cr\rx.pt",
    "ctl\u{1}\u{7f}.pt",
    "dots/./x.pt",
    "dots/../x.pt",
    "dots/..",
    "x/.",
    "..",
];

/// `keys` (hex-encoded, so control characters survive `argv`) as boto3 reads them.
const BOTO3_READ: &str = "for k in sys.argv[2:]:\n    \
     k = bytes.fromhex(k).decode()\n    \
     print(s3.get_object(Bucket=sys.argv[1], Key=k)['Body'].read().decode())";
/// The keys below `sys.argv[2]` as boto3 lists them, hex-encoded, one a line.
const BOTO3_LIST: &str = "pages = s3.get_paginator('list_objects_v2').paginate(Bucket=sys.argv[1], \
     Prefix=bytes.fromhex(sys.argv[2]).decode())\n\
     for p in pages:\n    \
     for o in p.get('Contents', []):\n        \
     print(o['Key'].encode().hex())";
const BOTO3_WRITE: &str = "for k in sys.argv[2:]:\n    \
     k = bytes.fromhex(k).decode()\n    \
     s3.put_object(Bucket=sys.argv[1], Key=k, Body=('boto3:' + k).encode())";

async fn keys_as_written(endpoint: &str, key: &str, secret: &str, config: StoreConfig) {
    let bucket = bucketload_test_support::unique_bucket();
    bucketload_test_support::create_bucket(&config, &bucket).await;
    let boto3 = |script: &str, keys: &[String]| {
        let prelude = format!(
            "import sys, boto3\ns3 = boto3.client('s3', endpoint_url='{endpoint}', \
             region_name='us-east-1', aws_access_key_id='{key}', aws_secret_access_key='{secret}')\n"
        );
        let mut args = vec![bucket.clone()];
        args.extend(keys.iter().map(hex::encode));
        run_python(&(prelude + script), &args)
    };
    for prefix in ["w", "w/ü", "w/a//", "w//lead", "w/../d/."] {
        let store = Store::open(&format!("s3://{bucket}/{prefix}"), &config).unwrap();
        let folder = store.key_folder().to_owned();
        let mut full = Vec::new();
        for name in KEYS {
            let object = store.object(name).unwrap();
            let put = object.store().put(object.path(), name.to_string().into());
            put.await.unwrap();
            full.push(format!("{folder}{name}"));
        }
        let read = boto3(BOTO3_READ, &full);
        assert_eq!(read.lines().collect::<Vec<_>>(), KEYS, "below {prefix}");
        // Stored at the literal keys: none resolved into another.
        let listed = boto3(BOTO3_LIST, std::slice::from_ref(&folder));
        let listed: Vec<String> = listed
            .lines()
            .map(|l| String::from_utf8(hex::decode(l).unwrap()).unwrap())
            .collect();
        let missing: Vec<&String> = full.iter().filter(|k| !listed.contains(k)).collect();
        assert!(
            missing.is_empty(),
            "below {prefix}: {missing:?} not in {listed:?}"
        );
        let full: Vec<String> = KEYS.iter().map(|k| format!("r{folder}{k}")).collect();
        boto3(BOTO3_WRITE, &full);
        let store = Store::open(&format!("s3://{bucket}/r{prefix}"), &config).unwrap();
        for (name, key) in KEYS.iter().zip(&full) {
            let object = store.object(name).unwrap();
            assert_eq!(object.uri(), format!("s3://{bucket}/{key}"));
            let got = object.store().get(object.path()).await.unwrap();
            assert_eq!(
                got.bytes().await.unwrap(),
                format!("boto3:{key}"),
                "{key:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_written_and_read_as_written_on_the_embedded_server() {
    let server = bucketload_test_support::EmbeddedServer::start().await;
    let (key, secret) = (
        bucketload_server::DEFAULT_ACCESS_KEY,
        bucketload_server::DEFAULT_SECRET_KEY,
    );
    keys_as_written(server.endpoint(), key, secret, server.store_config()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_written_and_read_as_written_on_moto() {
    let moto = MotoServer::start();
    keys_as_written(moto.endpoint(), "testing", "testing", moto.store_config()).await;
}
