//! Objects written by the store are read back by boto3 and the other way
//! round, on moto: an independent client checks our bytes.

#![allow(clippy::unwrap_used)] // tests fail loudly on any error

use bucketload_store::object_store::ObjectStoreExt;
use bucketload_store::object_store::path::Path;
use bucketload_store::{MultipartOptions, MultipartWriter, Store};
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
