#!/usr/bin/env python3
"""The fault matrix: every data path of bucketload against `bucketload serve` answering a share of
requests with 500/503 errors, resetting connections mid-body (after the request took effect) and
cutting bodies short of their Content-Length, at the given rate each, for several seeds.

Each operation runs against the faulty server; its effect is then checked through a second,
fault-free server over the same directory, with boto3 (an independent client) and Python's
tarfile. Every run lands in one of:

    ok              exit 0 and the effect is whole and byte-exact
    false success   exit 0 but data is missing or wrong (a byte mismatch is one)
    false failure   exit non-zero although the operation took effect
    failure         exit non-zero and nothing (or nothing visible) took effect: honest, counted
    damage          exit non-zero and what was there before is gone or changed (an overwrite
                    that failed must leave the old object whole)
    crash           a panic (exit 101) or a signal

The matrix fails (exit 1) on any false success, false failure, damage or crash, and on honest
failures too: at these rates every operation is expected to succeed within its retry budget
(with 5 s between attempts at most, 60 s hold about 17 attempts, so one request in about ten
million fails for good). `--allow-failures` counts honest failures without failing. It prints
the counts.

    .venv/bin/python tests/faults/fault_matrix.py [--seeds 1 2 3] [--rate 0.15] [--bin PATH]
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import boto3
from botocore.config import Config

ACCESS, SECRET = "bucketload", "bucketload-dev-secret"
SAMPLES, CLASSES, SIZE, GEN_SEED = 96, 4, "12KB", 7
BIG = 13 << 20  # three 5 MiB parts: the multipart paths of cp, ckpt and the Python writer
PART = "5MiB"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`bucketload serve` on a free loopback port over `root`."""

    def __init__(self, binary: str, root: Path, faults: list[str], log: Path) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        # The clean and the faulty server serve one root side by side.
        args = [binary, "serve", "--root", str(root), "--shared-root", "--addr",
                f"127.0.0.1:{self.port}", *faults]
        self.log = open(log, "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(500):  # at most 10 s
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}; see {log}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"the server on port {self.port} did not start; see {log}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@dataclass
class Result:
    op: str
    seed: int
    verdict: str
    detail: str = ""


class Matrix:
    def __init__(self, binary: str, python: str, work: Path, rate: float) -> None:
        self.binary, self.python, self.work, self.rate = binary, python, work, rate
        self.root = work / "root"
        self.clean = Server(binary, self.root, [], work / "clean.log")
        self.s3 = boto3.client(
            "s3", endpoint_url=self.clean.endpoint, aws_access_key_id=ACCESS,
            aws_secret_access_key=SECRET, region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
        self.results: list[Result] = []

    # --- running commands ---------------------------------------------------------------

    def env(self, endpoint: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ACCESS_KEY_ID=ACCESS, AWS_SECRET_ACCESS_KEY=SECRET,
                   AWS_ENDPOINT_URL=endpoint, AWS_REGION="us-east-1", RUST_LOG="error")
        return env

    def run(self, endpoint: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([self.binary, *args], env=self.env(endpoint), capture_output=True,
                              text=True, timeout=timeout)

    def setup(self, *args: str) -> str:
        done = self.run(self.clean.endpoint, *args)
        if done.returncode != 0:
            raise RuntimeError(f"setup `bucketload {' '.join(args)}` failed:\n{done.stderr}")
        return done.stdout

    # --- reading back through the clean server ------------------------------------------

    def objects(self, bucket: str, prefix: str) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            for obj in page.get("Contents", []):
                key = obj["Key"]
                out[key[len(prefix):]] = self.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        return out

    def object(self, bucket: str, key: str) -> bytes | None:
        try:
            return self.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except self.s3.exceptions.NoSuchKey:
            return None

    # --- verdicts -----------------------------------------------------------------------

    def record(self, op: str, seed: int, done: subprocess.CompletedProcess, whole: bool,
               detail: str = "", effect: bool = True, intact: bool = True) -> None:
        """`whole`: the operation's effect is there and byte-exact. `effect`: the operation
        changes something whose presence makes a non-zero exit false (writes, downloads).
        `intact`: what was there before is still whole, if the effect is not."""
        code = done.returncode
        if code < 0 or code == 101:
            verdict = "crash"
        elif code == 0:
            verdict = "ok" if whole else "false success"
        elif whole and effect:
            verdict = "false failure"
        elif not whole and not intact:
            verdict = "damage"
        else:
            verdict = "failure"
        if verdict != "ok":
            err = done.stderr.strip().splitlines()
            detail = f"{detail} exit {code}: {err[-1] if err else ''}".strip()
        self.results.append(Result(op, seed, verdict, detail))
        print(f"  seed {seed} {op:<22} {verdict}{(' — ' + detail) if verdict != 'ok' else ''}",
              flush=True)

    # --- the reference data, written through the clean server ---------------------------

    def prepare(self) -> None:
        self.local = self.work / "local"
        self.setup("gen", str(self.local / "files"), "--samples", str(SAMPLES), "--classes",
                   str(CLASSES), "--size", SIZE, "--seed", str(GEN_SEED))
        (self.local / "big.bin").write_bytes(os.urandom(BIG))
        self.setup("gen", "s3://fm-ref/files", "--samples", str(SAMPLES), "--classes",
                   str(CLASSES), "--size", SIZE, "--seed", str(GEN_SEED))
        self.setup("manifest", "s3://fm-ref/files")
        self.setup("shard", "s3://fm-ref/files", "s3://fm-ref/shards", "--samples-per-shard", "25")
        self.ref_files = {k: v for k, v in self.objects("fm-ref", "files/").items()
                          if not k.startswith("_bucketload/")}
        self.ref_bytes = sum(len(v) for v in self.ref_files.values())
        assert len(self.ref_files) == SAMPLES, len(self.ref_files)
        self.ref_loader = self.python_digest(self.clean.endpoint)

    # --- the operations -----------------------------------------------------------------

    def run_seed(self, seed: int) -> None:
        rate = str(self.rate)
        faults = ["--fault-rate", rate, "--reset-rate", rate, "--truncate-rate", rate,
                  "--seed", str(seed)]
        bad = Server(self.binary, self.root, faults, self.work / f"faulty-{seed}.log")
        try:
            bucket = f"fm-s{seed}"
            self.s3.create_bucket(Bucket=bucket)
            for op in (self.gen, self.cp_up, self.cp_down, self.shard, self.read, self.ckpt,
                       self.python_api, self.mount):
                op(bad.endpoint, bucket, seed)
        finally:
            bad.stop()

    def gen(self, ep: str, bucket: str, seed: int) -> None:
        done = self.run(ep, "gen", f"s3://{bucket}/gen", "--samples", str(SAMPLES), "--classes",
                        str(CLASSES), "--size", SIZE, "--seed", str(GEN_SEED))
        got = self.objects(bucket, "gen/")
        self.record("gen", seed, done, got == self.ref_files, diff(got, self.ref_files))

    def cp_up(self, ep: str, bucket: str, seed: int) -> None:
        done = self.run(ep, "cp", "-r", str(self.local), f"s3://{bucket}/up", "--part-size", PART)
        want = local_tree(self.local)
        got = self.objects(bucket, "up/")
        self.record("cp up", seed, done, got == want, diff(got, want))

    def cp_down(self, ep: str, bucket: str, seed: int) -> None:
        dst = self.work / f"down-{seed}"
        done = self.run(ep, "cp", "-r", "s3://fm-ref/files", str(dst), "--part-size", PART)
        got = {k: v for k, v in local_tree(dst).items() if not k.startswith("_bucketload/")}
        self.record("cp down", seed, done, got == self.ref_files, diff(got, self.ref_files))
        shutil.rmtree(dst, ignore_errors=True)

    def shard(self, ep: str, bucket: str, seed: int) -> None:
        done = self.run(ep, "shard", "s3://fm-ref/files", f"s3://{bucket}/shards",
                        "--samples-per-shard", "25")
        members = self.shard_members(bucket, "shards/")
        verified = self.run(self.clean.endpoint, "verify", f"s3://{bucket}/shards")
        want = {k.rsplit(".", 1)[0]: v for k, v in self.ref_files.items()}
        whole = verified.returncode == 0 and members == want
        self.record("shard", seed, done, whole, "" if whole else
                    f"verify exit {verified.returncode}; {diff(members, want)}")

    def shard_members(self, bucket: str, prefix: str) -> dict[str, bytes]:
        """The image member of every sample in the tar shards under `prefix`."""
        out: dict[str, bytes] = {}
        for key, body in self.objects(bucket, prefix).items():
            if not key.endswith(".tar"):
                continue
            with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                for m in tar.getmembers():
                    if m.isfile() and not m.name.endswith(".cls"):
                        f = tar.extractfile(m)
                        out[m.name.rsplit(".", 1)[0]] = f.read() if f else b""
        return out

    def read(self, ep: str, bucket: str, seed: int) -> None:
        cases = [("read files", "s3://fm-ref/files", ["--format", "files"]),
                 ("read shards", "s3://fm-ref/shards", ["--format", "shards"]),
                 ("read indexed", "s3://fm-ref/shards", ["--format", "indexed"]),
                 ("read files --cache", "s3://fm-ref/files",
                  ["--format", "files", "--cache", str(self.work / f"cache-{seed}"),
                   "--epochs", "2"])]
        for name, uri, extra in cases:
            done = self.run(ep, "read", uri, "--json", *extra)
            whole, detail = read_report(done.stdout, self.ref_bytes) if done.returncode == 0 \
                else (False, "")
            self.record(name, seed, done, whole, detail, effect=False)
        done = self.run(ep, "read", "s3://fm-ref/shards", "--decode", "--batch-size", "16",
                        "--image-size", "32", "--json")
        whole = done.returncode == 0 and f'"samples": {SAMPLES}' in done.stdout
        self.record("read --decode", seed, done, whole, effect=False)

    def ckpt(self, ep: str, bucket: str, seed: int) -> None:
        old, new = os.urandom(6 << 20), (self.local / "big.bin").read_bytes()
        self.s3.put_object(Bucket=bucket, Key="ckpt/c.pt", Body=old)
        done = self.run(ep, "ckpt", "save", str(self.local / "big.bin"), f"s3://{bucket}/ckpt/c.pt",
                        "--part-size", PART)
        got = self.object(bucket, "ckpt/c.pt")
        self.record("ckpt save", seed, done, got == new, intact=got == old)
        self.s3.put_object(Bucket=bucket, Key="ckpt/l.pt", Body=new)
        dst = self.work / f"loaded-{seed}.pt"
        done = self.run(ep, "ckpt", "load", f"s3://{bucket}/ckpt/l.pt", str(dst),
                        "--part-size", PART)
        self.record("ckpt load", seed, done, dst.exists() and dst.read_bytes() == new)
        dst.unlink(missing_ok=True)

    def python_api(self, ep: str, bucket: str, seed: int) -> None:
        done = self.python_run(ep, bucket)
        try:
            got = json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            got = {}
        ref = self.ref_loader
        for op, part, effect in (("python Loader", "loader", False),
                                 ("python S3Iterable", "iterable", False),
                                 ("python ckpt save", "save", True),
                                 ("python ckpt load", "load", False)):
            outcome = got.get(part, {})
            failed = "error" in outcome or not got
            code = done.returncode if done.returncode != 0 else int(failed)
            run = subprocess.CompletedProcess([], code, "", outcome.get("error", done.stderr))
            if part == "save":
                body = self.object(bucket, "py/ckpt.pt")
                whole = body is not None and sha(body) == outcome.get("sha")
            elif part == "load":
                whole = outcome.get("sha") is not None and outcome.get("sha") == got["save"].get("sha")
            elif part == "iterable":
                whole = outcome.get("digest") == digest_of(self.ref_files)
            else:
                whole = outcome.get("digest") == ref["loader"]["digest"]
            self.record(op, seed, run, whole, effect=effect)

    def mount(self, ep: str, bucket: str, seed: int) -> None:
        """Through `bucketload mount`: `cp` and a shell redirect over existing objects, and reads
        of every file, each checked like the commands above."""
        if not Path("/dev/fuse").exists() or shutil.which("fusermount3") is None:
            print(f"  seed {seed} mount                  not run: no /dev/fuse or fusermount3")
            return
        big = self.local / "big.bin"
        old = b"old content"
        for key in ("mnt/big.bin", "mnt/small.jpg"):
            self.s3.put_object(Bucket=bucket, Key=key, Body=old)
        small = self.local / "files" / sorted(self.ref_files)[0]
        with Mounted(self, ep, f"s3://{bucket}/mnt", ["--allow-overwrite"]) as mnt:
            done = subprocess.run(["cp", str(big), str(mnt / "big.bin")], capture_output=True,
                                  text=True, timeout=600)
            got = self.object(bucket, "mnt/big.bin")
            self.record("mount cp", seed, done, got == big.read_bytes(), intact=got == old)
            done = subprocess.run(["bash", "-c", f"cat '{small}' > '{mnt / 'small.jpg'}'"],
                                  capture_output=True, text=True, timeout=600)
            got = self.object(bucket, "mnt/small.jpg")
            self.record("mount shell redirect", seed, done, got == small.read_bytes(),
                        intact=got == old)
        with Mounted(self, ep, "s3://fm-ref/files", ["--read-only"]) as mnt:
            keys = sorted(self.ref_files)
            script = ("import sys, pathlib; r = pathlib.Path(sys.argv[1]); "
                      "[sys.stdout.buffer.write((r / k).read_bytes()) for k in sys.argv[2:]]")
            read = subprocess.run([sys.executable, "-c", script, str(mnt), *keys],
                                  capture_output=True, timeout=600)
            want = b"".join(self.ref_files[k] for k in keys)
            done = subprocess.CompletedProcess(read.args, read.returncode, "",
                                               read.stderr.decode(errors="replace"))
            self.record("mount read", seed, done, read.stdout == want, effect=False)

    def python_digest(self, ep: str) -> dict[str, str]:
        done = self.python_run(ep, "fm-ref")
        got = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
        if done.returncode != 0 or any("error" in v for v in got.values()):
            raise RuntimeError(f"the Python reference run failed: {got}\n{done.stderr}")
        return got

    def python_run(self, ep: str, bucket: str) -> subprocess.CompletedProcess:
        return subprocess.run([self.python, "-c", PY_CLIENT, bucket], env=self.env(ep),
                              capture_output=True, text=True, timeout=600)

    def summary(self, allow_failures: bool) -> int:
        counts = collections.Counter(r.verdict for r in self.results)
        print("\nfault matrix:", ", ".join(f"{counts[v]} {v}" for v in VERDICTS))
        failing = DEFECTS if allow_failures else (*DEFECTS, "failure")
        bad = [r for r in self.results if r.verdict in failing]
        for r in bad:
            print(f"  {r.verdict}: seed {r.seed} {r.op}: {r.detail}")
        mismatches = sum(1 for r in bad if r.verdict == "false success")
        print(f"byte mismatches or missing data with exit 0: {mismatches}; "
              f"false failures: {counts['false failure']}; damage: {counts['damage']}; "
              f"crashes: {counts['crash']}; "
              f"honest failures: {counts['failure']}")
        return 1 if bad else 0

    def close(self) -> None:
        self.clean.stop()


class Mounted:
    """`bucketload mount URI DIR` (it returns once mounted) until the `with` block ends."""

    def __init__(self, matrix: Matrix, endpoint: str, uri: str, extra: list[str]) -> None:
        self.matrix, self.endpoint, self.uri, self.extra = matrix, endpoint, uri, extra
        self.dir = Path(tempfile.mkdtemp(prefix="mnt-", dir=matrix.work))

    def __enter__(self) -> Path:
        done = self.matrix.run(self.endpoint, "mount", self.uri, str(self.dir), *self.extra)
        if done.returncode != 0:
            raise RuntimeError(f"mount {self.uri} failed: {done.stderr}")
        return self.dir

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["fusermount3", "-u", "-z", str(self.dir)], capture_output=True)
        for _ in range(1000):  # at most 10 s
            if str(self.dir) not in Path("/proc/self/mounts").read_text():
                return
            time.sleep(0.01)


VERDICTS = ("ok", "failure", "false success", "false failure", "damage", "crash")
DEFECTS = ("false success", "false failure", "damage", "crash")

# The Python side, run in its own process against one endpoint: the decoded batches of
# `bucketload.Loader` over the shards (deterministic for a seed), the raw objects of
# `S3IterableDataset`, and a checkpoint saved with `bucketload.checkpoint.save` then loaded.
PY_CLIENT = textwrap.dedent("""
    import hashlib, json, os, sys
    import bucketload
    from bucketload.s3torch import S3IterableDataset
    bucket, out = sys.argv[1], {}

    def attempt(name, fn):
        try:
            out[name] = fn()
        except Exception as e:
            out[name] = {"error": f"{type(e).__name__}: {e}"}

    def loader():
        h, n = hashlib.sha256(), 0
        loader = bucketload.Loader("s3://fm-ref/shards", batch_size=16, image_size=32, seed=3)
        for images, labels in loader:
            h.update(images.numpy().tobytes())
            h.update(labels.numpy().tobytes())
            n += len(labels)
        return {"digest": f"{n}:{h.hexdigest()}"}

    def iterable():
        objs = {}
        for r in S3IterableDataset.from_prefix("s3://fm-ref/files/"):
            if "/_bucketload/" not in r.key:
                objs[r.key.split("files/", 1)[1]] = r.read()
        return {"digest": hashlib.sha256(b"".join(
            k.encode() + b"\\0" + hashlib.sha256(v).digest()
            for k, v in sorted(objs.items()))).hexdigest()}

    data = os.urandom(13 << 20)

    def save():
        with bucketload.checkpoint.Writer(f"s3://{bucket}/py/ckpt.pt") as w:
            w.write(data)
        return {"sha": hashlib.sha256(data).hexdigest()}

    def load():
        with bucketload.checkpoint.Reader(f"s3://{bucket}/py/ckpt.pt") as r:
            return {"sha": hashlib.sha256(r.read()).hexdigest()}

    attempt("loader", loader)
    attempt("iterable", iterable)
    if bucket != "fm-ref":
        attempt("save", save)
        attempt("load", load)
    print(json.dumps(out))
""")


def sha(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def digest_of(objs: dict[str, bytes]) -> str:
    return hashlib.sha256(b"".join(k.encode() + b"\0" + hashlib.sha256(v).digest()
                                   for k, v in sorted(objs.items()))).hexdigest()


def local_tree(root: Path) -> dict[str, bytes]:
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def diff(got: dict[str, bytes], want: dict[str, bytes]) -> str:
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    wrong = sorted(k for k in set(got) & set(want) if got[k] != want[k])
    parts = [f"{len(x)} {what} (first {x[0]})" for x, what in
             ((missing, "missing"), (extra, "extra"), (wrong, "differ")) if x]
    return "; ".join(parts)


def read_report(stdout: str, want_bytes: int) -> tuple[bool, str]:
    try:
        report = json.loads(stdout)
    except ValueError:
        return False, "no JSON report"
    for e in report["epochs"]:
        if e["samples"] != SAMPLES:
            return False, f"epoch {e['epoch']}: {e['samples']} samples of {SAMPLES}"
    files = report["format"] == "files"
    if files and any(e["bytes"] != want_bytes for e in report["epochs"]):
        return False, f"bytes {[e['bytes'] for e in report['epochs']]} != {want_bytes}"
    return True, ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--rate", type=float, default=0.15)
    parser.add_argument("--bin", default=os.environ.get("BUCKETLOAD_BIN", "target/debug/bucketload"))
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--allow-failures", action="store_true",
                        help="count honest failures (non-zero exit, nothing taken effect) without failing")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bucketload-faults-"))
    started = time.monotonic()
    matrix = Matrix(os.path.abspath(args.bin), sys.executable, work, args.rate)
    try:
        matrix.prepare()
        for seed in args.seeds:
            print(f"seed {seed}: error, reset and truncate rates {args.rate} each", flush=True)
            matrix.run_seed(seed)
        status = matrix.summary(args.allow_failures)
    finally:
        matrix.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"({time.monotonic() - started:.0f} s)")
    return status


if __name__ == "__main__":
    sys.exit(main())
