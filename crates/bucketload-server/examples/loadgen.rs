//! Load generator for S3 endpoints: many small GETs with a fixed number in flight, or one
//! large streaming GET.
//!
//! ```text
//! loadgen --endpoint http://127.0.0.1:9000 --bucket bench [--create-bucket] \
//!     [--objects 1000] [--size 100KB] [--concurrency 64] [--requests 50000] [--server-pid PID] \
//!     [--single-stream 1GiB [--object-store-client]] [--access-key K --secret-key S]
//! ```
//!
//! Uploads the objects unless they already exist with the right size, then GETs them in
//! round-robin order and prints GETs/s, MB/s, p50/p99 latency and, with `--server-pid`, the
//! server's CPU time per request read from `/proc/PID/stat`. `--single-stream` instead times
//! one plain GET of an object of that size, read from a presigned URL over a bare socket into
//! one reused 4 MiB buffer, so the client costs one copy per byte and little else (an HTTP
//! client such as object_store's costs more CPU than the server and would bound the result);
//! `--object-store-client` reads it through object_store instead.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::signer::Signer;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug)]
struct Args {
    endpoint: String,
    bucket: String,
    access_key: String,
    secret_key: String,
    create_bucket: bool,
    objects: usize,
    size: u64,
    concurrency: usize,
    requests: usize,
    server_pid: Option<u32>,
    single_stream: Option<u64>,
    object_store_client: bool,
}

fn parse_size(s: &str) -> Result<u64, BoxError> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse()?;
    let mult = match unit {
        "" | "B" => 1,
        "KB" => 1000,
        "KiB" => 1 << 10,
        "MB" => 1_000_000,
        "MiB" => 1 << 20,
        "GB" => 1_000_000_000,
        "GiB" => 1 << 30,
        _ => return Err(format!("unknown size unit in {s}").into()),
    };
    Ok(n * mult)
}

fn parse_args() -> Result<Args, BoxError> {
    let mut args = Args {
        endpoint: "http://127.0.0.1:9000".into(),
        bucket: "bench".into(),
        access_key: bucketload_server::DEFAULT_ACCESS_KEY.into(),
        secret_key: bucketload_server::DEFAULT_SECRET_KEY.into(),
        create_bucket: false,
        objects: 1000,
        size: 100_000,
        concurrency: 64,
        requests: 50_000,
        server_pid: None,
        single_stream: None,
        object_store_client: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--create-bucket" {
            args.create_bucket = true;
            continue;
        }
        if flag == "--object-store-client" {
            args.object_store_client = true;
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--endpoint" => args.endpoint = value,
            "--bucket" => args.bucket = value,
            "--access-key" => args.access_key = value,
            "--secret-key" => args.secret_key = value,
            "--objects" => args.objects = value.parse()?,
            "--size" => args.size = parse_size(&value)?,
            "--concurrency" => args.concurrency = value.parse()?,
            "--requests" => args.requests = value.parse()?,
            "--server-pid" => args.server_pid = Some(value.parse()?),
            "--single-stream" => args.single_stream = Some(parse_size(&value)?),
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    Ok(args)
}

/// User + system CPU seconds of a process, from /proc/PID/stat (fields 14 and 15).
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0) // CLK_TCK is 100 on Linux
}

/// Creates the bucket with an unsigned request (moto accepts it; the embedded server needs
/// `serve --bucket NAME` instead).
async fn create_bucket(endpoint: &str, bucket: &str) -> Result<(), BoxError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authority = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = tokio::net::TcpStream::connect(authority).await?;
    let request = format!(
        "PUT /{bucket} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    println!("create bucket: {}", response.lines().next().unwrap_or(""));
    Ok(())
}

async fn ensure_object(
    store: &Arc<dyn ObjectStore>,
    key: &Path,
    size: u64,
) -> Result<(), BoxError> {
    if let Ok(meta) = store.head(key).await
        && meta.size == size
    {
        return Ok(());
    }
    if size <= 64 << 20 {
        let data: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
        store.put(key, PutPayload::from(data)).await?;
        return Ok(());
    }
    let upload = store.put_multipart(key).await?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, 64 << 20);
    let chunk: Vec<u8> = (0..(8u64 << 20)).map(|i| (i * 7 + 3) as u8).collect();
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        writer.wait_for_capacity(4).await?;
        writer.write(&chunk[..n]);
        left -= n as u64;
    }
    writer.finish().await?;
    Ok(())
}

/// GETs `url` over a bare HTTP/1.1 connection and discards the body; returns its length.
async fn raw_get(url: &url::Url) -> Result<u64, BoxError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = url.host_str().ok_or("presigned URL without a host")?;
    let authority = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    let target = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    };
    let mut stream = tokio::net::TcpStream::connect(&authority).await?;
    let request =
        format!("GET {target} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut buf = vec![0u8; 4 << 20];
    let mut filled = 0;
    let header_end = loop {
        let n = stream.read(&mut buf[filled..]).await?;
        if n == 0 {
            return Err("connection closed before the response headers".into());
        }
        filled += n;
        if let Some(i) = buf[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") {
        return Err(format!("GET failed: {}", head.lines().next().unwrap_or("")).into());
    }
    let length: u64 = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .ok_or("response without content-length")?
        .trim()
        .parse()?;
    let mut got = (filled - header_end) as u64;
    while got < length {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(format!("body ended after {got} of {length} bytes").into());
        }
        got += n as u64;
    }
    Ok(got)
}

async fn single_stream(
    store: Arc<dyn ObjectStore>,
    signer: &AmazonS3,
    size: u64,
    args: &Args,
) -> Result<(), BoxError> {
    let key = Path::from(format!("loadgen/single-{size}"));
    ensure_object(&store, &key, size).await?;
    let url = signer
        .signed_url(http::Method::GET, &key, Duration::from_secs(3600))
        .await?;
    let pid = args.server_pid.map(|p| p.to_string());
    let server_cpu0 = pid.as_deref().and_then(cpu_seconds);
    let client_cpu0 = cpu_seconds("self");
    let started = Instant::now();
    let total = if args.object_store_client {
        let mut stream = store.get(&key).await?.into_stream();
        let mut total = 0u64;
        while let Some(chunk) = stream.try_next().await? {
            total += chunk.len() as u64;
        }
        total
    } else {
        raw_get(&url).await?
    };
    let secs = started.elapsed().as_secs_f64();
    println!(
        "single stream: {total} bytes in {secs:.3} s = {:.0} MB/s",
        total as f64 / secs / 1e6
    );
    if let (Some(pid), Some(cpu0)) = (pid.as_deref(), server_cpu0)
        && let Some(cpu1) = cpu_seconds(pid)
    {
        println!("server CPU: {:.2} s", cpu1 - cpu0);
    }
    if let (Some(c0), Some(c1)) = (client_cpu0, cpu_seconds("self")) {
        println!("loadgen CPU: {:.2} s", c1 - c0);
    }
    Ok(())
}

async fn many_gets(store: Arc<dyn ObjectStore>, args: &Args) -> Result<(), BoxError> {
    let keys: Vec<Path> = (0..args.objects)
        .map(|i| Path::from(format!("loadgen/{}/{i:06}", args.size)))
        .collect();
    let upload_started = Instant::now();
    futures::stream::iter(keys.iter().map(|k| ensure_object(&store, k, args.size)))
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    println!(
        "{} objects of {} bytes ready in {:.1} s",
        args.objects,
        args.size,
        upload_started.elapsed().as_secs_f64()
    );

    let pid = args.server_pid.map(|p| p.to_string());
    let server_cpu0 = pid.as_deref().and_then(cpu_seconds);
    let client_cpu0 = cpu_seconds("self");
    let started = Instant::now();
    let requests = futures::stream::iter(0..args.requests).map(|i| {
        let store = Arc::clone(&store);
        let key = keys[i % keys.len()].clone();
        async move {
            let t0 = Instant::now();
            let bytes = store.get(&key).await?.bytes().await?;
            Ok::<_, BoxError>((bytes.len() as u64, t0.elapsed()))
        }
    });
    let mut hist = hdrhistogram::Histogram::<u64>::new(3)?;
    let mut bytes = 0u64;
    let mut results = requests.buffer_unordered(args.concurrency);
    while let Some(result) = results.next().await {
        let (n, latency): (u64, Duration) = result?;
        bytes += n;
        hist.record(latency.as_micros() as u64)?;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} GETs of {} bytes, {} in flight: {:.0} GETs/s, {:.0} MB/s, p50 {:.2} ms, p99 {:.2} ms",
        args.requests,
        args.size,
        args.concurrency,
        args.requests as f64 / secs,
        bytes as f64 / secs / 1e6,
        hist.value_at_quantile(0.5) as f64 / 1000.0,
        hist.value_at_quantile(0.99) as f64 / 1000.0,
    );
    if let (Some(pid), Some(cpu0)) = (pid.as_deref(), server_cpu0)
        && let Some(cpu1) = cpu_seconds(pid)
    {
        let used = cpu1 - cpu0;
        println!(
            "server CPU: {used:.2} s = {:.0} µs per request",
            used * 1e6 / args.requests as f64
        );
    }
    if let (Some(c0), Some(c1)) = (client_cpu0, cpu_seconds("self")) {
        println!(
            "loadgen CPU: {:.2} s = {:.0} µs per request",
            c1 - c0,
            (c1 - c0) * 1e6 / args.requests as f64
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = parse_args()?;
    if args.create_bucket {
        create_bucket(&args.endpoint, &args.bucket).await?;
    }
    let s3 = AmazonS3Builder::new()
        .with_endpoint(&args.endpoint)
        .with_allow_http(true)
        .with_bucket_name(&args.bucket)
        .with_region("us-east-1")
        .with_access_key_id(&args.access_key)
        .with_secret_access_key(&args.secret_key)
        .with_virtual_hosted_style_request(false)
        .build()?;
    let store: Arc<dyn ObjectStore> = Arc::new(s3.clone());
    match args.single_stream {
        Some(size) => single_stream(store, &s3, size, &args).await,
        None => many_gets(store, &args).await,
    }
}
