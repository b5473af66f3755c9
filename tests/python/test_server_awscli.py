"""The AWS CLI, an independent client, against `bucketload serve`."""

from __future__ import annotations

import os
import subprocess


def aws(aws_cli, server, *args: str) -> str:
    out = subprocess.run([aws_cli, "--endpoint-url", server.endpoint, *args], env=server.env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"aws {' '.join(args)} failed:\n{out.stderr}"
    return out.stdout


def test_cp_ls_rm(aws_cli, server, bucket, tmp_path):
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(20 * 1024 * 1024 + 17))  # above the CLI's 8 MiB multipart threshold
    small = tmp_path / "small.txt"
    small.write_text("hello")

    aws(aws_cli, server, "s3", "cp", str(big), f"s3://{bucket}/data/big.bin")
    aws(aws_cli, server, "s3", "cp", str(small), f"s3://{bucket}/data/sub/small.txt")

    listing = aws(aws_cli, server, "s3", "ls", f"s3://{bucket}/data/")
    assert "PRE sub/" in listing
    assert "big.bin" in listing and str(big.stat().st_size) in listing
    recursive = aws(aws_cli, server, "s3", "ls", "--recursive", f"s3://{bucket}/")
    assert "data/sub/small.txt" in recursive

    back = tmp_path / "back.bin"
    aws(aws_cli, server, "s3", "cp", f"s3://{bucket}/data/big.bin", str(back))
    assert back.read_bytes() == big.read_bytes()

    aws(aws_cli, server, "s3", "cp", f"s3://{bucket}/data/big.bin", f"s3://{bucket}/copy/big.bin")
    aws(aws_cli, server, "s3", "rm", "--recursive", f"s3://{bucket}/data/")
    remaining = aws(aws_cli, server, "s3", "ls", "--recursive", f"s3://{bucket}/")
    assert "copy/big.bin" in remaining and "data/" not in remaining


def test_sync_directory(aws_cli, server, bucket, tmp_path):
    src = tmp_path / "tree"
    for i in range(30):
        (src / f"c{i % 3}").mkdir(parents=True, exist_ok=True)
        (src / f"c{i % 3}" / f"{i}.txt").write_text(str(i))
    aws(aws_cli, server, "s3", "sync", str(src), f"s3://{bucket}/tree")
    dst = tmp_path / "out"
    aws(aws_cli, server, "s3", "sync", f"s3://{bucket}/tree", str(dst))
    assert sorted(p.relative_to(dst).as_posix() for p in dst.rglob("*.txt")) == \
        sorted(p.relative_to(src).as_posix() for p in src.rglob("*.txt"))


def test_s3_ls_buckets(aws_cli, server, bucket):
    assert bucket in aws(aws_cli, server, "s3", "ls")
