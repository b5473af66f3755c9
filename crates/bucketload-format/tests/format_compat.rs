//! Compatibility with GNU tar and Python's `tarfile`, both ways.

use std::path::Path;
use std::process::Command;

use bucketload_format::{TarReader, TarWriter, read_members};
use bucketload_test_support::venv_python;

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .env("LC_ALL", "C.UTF-8")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

fn sample_members() -> Vec<(String, Vec<u8>)> {
    let mut members: Vec<(String, Vec<u8>)> = vec![
        ("n01/000001.jpg".into(), vec![0xff, 0xd8, 0xff, 1, 2, 3]),
        ("n01/000001.cls".into(), b"0".to_vec()),
        ("n01/000002.jpg".into(), vec![7; 5000]),
        ("empty/zero.bin".into(), Vec::new()),
        ("with spaces/a b.txt".into(), b"spaces".to_vec()),
        ("ünïcødé/日本語.txt".into(), "utf8 ✓".as_bytes().to_vec()),
        (
            format!("{}/{}.jpg", "p".repeat(120), "n".repeat(90)),
            vec![3; 513],
        ),
        (
            format!("{}/{}.jpg", "q".repeat(150), "m".repeat(140)),
            vec![4; 1024],
        ),
        ("x".repeat(255), vec![5; 10]),
    ];
    members.push(("last/k.v.w".into(), b"multi-dot extension".to_vec()));
    members
}

fn write_shard(path: &Path, members: &[(String, Vec<u8>)]) {
    let mut out = Vec::new();
    let mut w = TarWriter::new(path.display().to_string());
    for (name, data) in members {
        w.append(&mut out, name, data).expect("append");
    }
    w.finish(&mut out).expect("finish");
    std::fs::write(path, out).expect("write shard");
}

fn read_ours(path: &Path) -> Vec<(String, Vec<u8>)> {
    let file = std::fs::File::open(path).expect("open");
    read_members(TarReader::new(path.display().to_string()), file)
        .map(|m| m.map(|m| (m.header.name, m.data.to_vec())))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{e}"))
}

const PY_LIST: &str = r#"
import sys, tarfile, hashlib
with tarfile.open(sys.argv[1]) as t:
    for m in t:
        data = t.extractfile(m).read()
        print(m.name, m.size, m.mode, m.mtime, hashlib.sha256(data).hexdigest(), sep="\t")
"#;

fn sha256_hex(data: &[u8]) -> String {
    let out = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn();
    let mut child = out.expect("sha256sum");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(data)
        .expect("pipe");
    let out = child.wait_with_output().expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn python_tarfile_reads_our_shards() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shard = dir.path().join("shard-000000.tar");
    let members = sample_members();
    write_shard(&shard, &members);
    let listing = run(Command::new(venv_python())
        .arg("-c")
        .arg(PY_LIST)
        .arg(&shard));
    let expected: Vec<String> = members
        .iter()
        .map(|(n, d)| format!("{n}\t{}\t420\t0\t{}", d.len(), sha256_hex(d)))
        .collect();
    assert_eq!(listing.lines().collect::<Vec<_>>(), expected);
}

#[test]
fn gnu_tar_lists_and_extracts_our_shards_byte_for_byte() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shard = dir.path().join("shard-000000.tar");
    let members = sample_members();
    write_shard(&shard, &members);
    let listing = run(Command::new("tar").arg("-tf").arg(&shard));
    let names: Vec<&str> = members.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(listing.lines().collect::<Vec<_>>(), names);
    let out = dir.path().join("x");
    std::fs::create_dir(&out).expect("mkdir");
    run(Command::new("tar")
        .arg("-xf")
        .arg(&shard)
        .arg("-C")
        .arg(&out));
    for (name, data) in &members {
        let got = std::fs::read(out.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(&got, data, "{name}");
    }
}

fn make_tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = sample_members();
    files.retain(|(n, _)| !n.starts_with("empty/"));
    files.push(("empty/zero.bin".into(), Vec::new()));
    for (name, data) in &files {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, data).expect("write");
    }
    files.sort();
    files
}

fn sorted(mut v: Vec<(String, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    v.sort();
    v
}

#[test]
fn we_read_gnu_tar_gnu_and_pax_formats() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tree = dir.path().join("tree");
    let files = make_tree(&tree);
    for format in ["gnu", "pax", "ustar"] {
        let shard = dir.path().join(format!("{format}.tar"));
        let mut cmd = Command::new("tar");
        cmd.arg(format!("--format={format}"))
            .arg("-cf")
            .arg(&shard)
            .arg("-C")
            .arg(&tree)
            .arg(".");
        if format == "ustar" {
            // ustar cannot hold the long names; keep the ones it can.
            let out = cmd.env("LC_ALL", "C.UTF-8").output().expect("tar");
            assert!(!out.status.success(), "ustar should refuse a 290-byte name");
            continue;
        }
        run(&mut cmd);
        assert_eq!(
            sorted(read_ours(&shard)),
            files,
            "GNU tar --format={format}"
        );
    }
}

const PY_WRITE: &str = r#"
import sys, tarfile, os
fmt = {"gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}[sys.argv[3]]
with tarfile.open(sys.argv[1], "w", format=fmt) as t:
    for root, dirs, files in sorted(os.walk(sys.argv[2])):
        for f in sorted(files):
            p = os.path.join(root, f)
            t.add(p, arcname=os.path.relpath(p, sys.argv[2]))
"#;

#[test]
fn we_read_python_tarfile_gnu_and_pax_formats() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tree = dir.path().join("tree");
    let files = make_tree(&tree);
    for format in ["gnu", "pax"] {
        let shard = dir.path().join(format!("py-{format}.tar"));
        run(Command::new(venv_python())
            .arg("-c")
            .arg(PY_WRITE)
            .arg(&shard)
            .arg(&tree)
            .arg(format));
        assert_eq!(sorted(read_ours(&shard)), files, "tarfile {format}");
    }
}

const PY_WDS: &str = r#"
import sys
try:
    import webdataset as wds
except ImportError:
    sys.exit("webdataset is not installed: .venv/bin/pip install -r requirements-dev.txt")
for s in wds.WebDataset(sys.argv[1], shardshuffle=False):
    exts = sorted(k for k in s if not k.startswith("__"))
    print(s["__key__"], ",".join(f"{k}={len(s[k])}" for k in exts), sep="\t")
"#;

#[test]
fn webdataset_reads_our_shards_with_our_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shard = dir.path().join("shard-000000.tar");
    let members: Vec<(String, Vec<u8>)> = vec![
        ("n01/000001.jpg".into(), vec![1; 100]),
        ("n01/000001.cls".into(), b"3".to_vec()),
        ("n01/000002.jpg".into(), vec![2; 7]),
        ("n01/000002.cls".into(), b"12".to_vec()),
        ("a/b.c/x.y.z".into(), b"dots".to_vec()),
        (format!("{}/long.seg.png", "l".repeat(150)), vec![0; 3]),
    ];
    write_shard(&shard, &members);
    let listing = run(Command::new(venv_python())
        .arg("-c")
        .arg(PY_WDS)
        .arg(&shard));
    let mut grouper = bucketload_format::Grouper::new();
    let mut ours = Vec::new();
    for (name, data) in &members {
        ours.extend(grouper.push(name, data.clone().into()));
    }
    ours.extend(grouper.finish());
    let expected: Vec<String> = ours
        .iter()
        .map(|s| {
            let mut exts: Vec<String> = s
                .members
                .iter()
                .map(|(e, d)| format!("{e}={}", d.len()))
                .collect();
            exts.sort();
            format!("{}\t{}", s.key, exts.join(","))
        })
        .collect();
    assert_eq!(expected.len(), 4);
    assert_eq!(listing.lines().collect::<Vec<_>>(), expected);
}

#[test]
fn shard_checksums_match_md5sum_and_crc32c_of_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shard = dir.path().join("shard-000000.tar");
    let mut out = Vec::new();
    let mut w = TarWriter::new("shard-000000.tar");
    for (name, data) in sample_members() {
        w.append(&mut out, &name, &data).expect("append");
    }
    let summary = w.finish(&mut out).expect("finish");
    std::fs::write(&shard, &out).expect("write");
    let md5sum = run(Command::new("md5sum").arg(&shard));
    let entry = bucketload_format::ShardEntry::from_summary(
        "shard-000000.tar",
        "shard-000000.tar.idx",
        8,
        &summary,
    );
    assert_eq!(md5sum.split_whitespace().next(), Some(entry.md5.as_str()));
    assert_eq!(summary.crc32c, crc32c::crc32c(&out));
    assert_eq!(summary.size, out.len() as u64);
}
