"""Helpers of scripts/conformance.sh: write an s3tests.conf for a server, and compare the
JUnit results of two servers.

    harness.py conf --endpoint http://127.0.0.1:PORT --main KEY:SECRET --alt KEY:SECRET \
        --tenant KEY:SECRET --out FILE
    harness.py compare --junit NAME=FILE --junit NAME=FILE --csv FILE --markdown FILE \
        [--command CMD --suite-commit SHA]
"""

from __future__ import annotations

import argparse
import collections
import csv
import datetime
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import urlsplit

import boto3

CONF = """\
[DEFAULT]
host = {host}
port = {port}
is_secure = False
ssl_verify = False

[fixtures]
bucket prefix = s3t-{{random}}-

{users}
"""

USER = """\
[{section}]
display_name = {display_name}
user_id = {user_id}
email = {email}
access_key = {key}
secret_key = {secret}
"""

OUTCOMES = ("passed", "failed", "error", "skipped")


def _owner(endpoint: str, key: str, secret: str) -> dict:
    """The main user as the server names it (the owner ListBuckets reports)."""
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name="us-east-1",
    )
    return client.list_buckets().get("Owner", {})


def write_conf(args: argparse.Namespace) -> None:
    url = urlsplit(args.endpoint)
    users = []
    roles = [("s3 main", args.main), ("s3 alt", args.alt), ("s3 tenant", args.tenant)]
    # The IAM sections are read by the suite's configure() even when no IAM test runs; they
    # get the main user's keys (no selected test uses them).
    roles += [("iam", args.main), ("iam root", args.main), ("iam alt root", args.main)]
    for section, pair in roles:
        key, secret = pair.split(":", 1)
        owner = _owner(args.endpoint, key, secret) if section.startswith("s3 ") else {}
        name = section.replace(" ", "-")
        users.append(
            USER.format(
                section=section,
                display_name=owner.get("DisplayName", name),
                user_id=owner.get("ID", name),
                email=f"{name}@example.com",
                key=key,
                secret=secret,
            )
            + ("tenant = conformance\n" if section == "s3 tenant" else "")
        )
    text = CONF.format(host=url.hostname, port=url.port, users="\n".join(users))
    Path(args.out).write_text(text)


def _outcome(case: ET.Element) -> tuple[str, str]:
    """passed/failed/error/skipped of one <testcase>, and the first line of its message.

    A test whose body passed but whose setup or teardown failed is an error.
    """
    for tag, outcome in (("error", "error"), ("failure", "failed"), ("skipped", "skipped")):
        node = case.find(tag)
        if node is not None:
            message = (node.get("message") or node.text or "").strip().splitlines()
            return outcome, (message[0] if message else "")[:200]
    return "passed", ""


def read_junit(path: str) -> dict[str, tuple[str, str, str]]:
    """test -> (outcome, message, server errors recorded by conformance_plugin)."""
    results: dict[str, tuple[str, str, str]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome, message = _outcome(case)
        errors = "; ".join(
            p.get("value", "") for p in case.iter("property") if p.get("name") == "server_5xx"
        )
        # A failing call with a teardown error makes two <testcase>s: the worse outcome wins.
        if name in results:
            old = results[name]
            if old[0] in ("failed", "error"):
                outcome, message = old[0], old[1]
            errors = errors or old[2]
        results[name] = (outcome, message, errors)
    return results


def _area(test: str) -> str:
    """A coarse area from the test's name: test_bucket_listv2_delimiter_basic -> bucket_listv2."""
    words = test.split("::")[-1].split("[")[0].removeprefix("test_").split("_")
    return "_".join(words[:2])


# What a failure is about, from the operation or header a 501 names, else from the test's name
# and message: (group, regular expression), first match wins.
REFUSED = [
    ("If-None-Match with an ETag on PutObject (S3 answers 501 too)", r"\(501, 'NotImplemented'\)"),
    ("object lock", r"object.lock|ObjectLock|LegalHold|Retention"),
    ("versioning", r"Versioning|ObjectVersions"),
    ("ACLs and grants", r"Acl|x-amz-acl|x-amz-grant"),
    ("bucket policies, public access block, ownership controls",
     r"Policy|PublicAccessBlock|OwnershipControls"),
    ("tagging", r"Tagging|x-amz-tagging"),
    ("lifecycle configuration", r"Lifecycle"),
    ("ListObjects v1", r"ListObjects operation"),
    ("bucket encryption configuration", r"Encryption|ServerSideEn"),
    ("GetObjectAttributes", r"GetObjectAttributes"),
    ("CORS configuration", r"Cors"),
]
OTHER = [
    ("POST object uploads (HTML forms)", r"test_post_object"),
    ("Authorization edited before signing (no effect; fails on any server)", r"bad_authorization"),
    ("versioning headers on unversioned buckets (x-amz-delete-marker)", r"delete_marker"),
    ("CreateBucket of one's own bucket (us-east-1 S3 answers 200)", r"test_bucket_create_exists |recreate_not_overriding"),
    ("ListBuckets pagination (max-buckets)", r"list_buckets_paginated"),
    ("uploads without Content-Length (Transfer-Encoding: chunked)",
     r"chunked_transfer|contentlength_none"),
    ("RequestId in error bodies", r"requestid"),
    ("multipart: a part re-sent while the first send is in flight", r"resend_first"),
    ("501 where the test expects an earlier error (400 bad rule, 404 no bucket...)",
     r"assert 501 =="),
    ("ACLs", r"_acl"),
    ("checksums not returned (x-amz-checksum-*, ChecksumAlgorithm)", r"[Cc]hecksum|cksum"),
    ("signature version 2", r"SignatureDoesNotMatch|_v2$"),
    ("Date / X-Amz-Date handling", r"amz_date|x-amz-date"),
    ("a key that is also a prefix (foo/bar and foo/bar/xyzzy)", r"conflicts with another key"),
    ("listing details (encoding-type, empty delimiter, fetch-owner, empty token)",
     r"test_bucket_list"),
    ("conditional GET by date; ETag of a 304", r"test_get_object_if"),
    ("headers not stored or returned (Cache-Control, Expires, Content-Encoding, "
     "non-ASCII metadata)", r"cache_control|write_expires|content_encoding|unicode_metadata"),
    ("a second user (one key pair, no permissions)",
     r"not_owned|nonowner|bucket_policy_multipart|authorization"),
    ("error codes (partNumber, copy range, expired presigned URL...)",
     r"assert \d+ ==|assert '"),
]


def failure_group(test: str, message: str) -> str:
    name = test.split("::")[-1]
    if "NotImplemented" in message and not name.startswith("test_post_object"):
        rules = [(f"refused (501): {g}", rx) for g, rx in REFUSED]
        text = message
    else:
        rules, text = OTHER, f"{name} {message}"
    return next((g for g, rx in rules if re.search(rx, text)), "other")


def compare(args: argparse.Namespace) -> None:
    servers = []
    for spec in args.junit:
        name, path = spec.split("=", 1)
        servers.append((name, read_junit(path)))
    names = sorted(set().union(*(r.keys() for _, r in servers)))
    (first, a), (second, b) = servers
    missing = ("missing", "", "")

    print(f"{'server':<12} {'tests':>6} " + " ".join(f"{o:>8}" for o in OUTCOMES) + "  pass rate")
    for name, results in servers:
        counts = collections.Counter(r[0] for r in results.values())
        rate = 100 * counts["passed"] / max(1, len(results))
        print(
            f"{name:<12} {len(results):>6} "
            + " ".join(f"{counts[o]:>8}" for o in OUTCOMES)
            + f"  {rate:.1f}%"
        )
    only_b = [t for t in names if b.get(t, missing)[0] == "passed" != a.get(t, missing)[0]]
    only_a = [t for t in names if a.get(t, missing)[0] == "passed" != b.get(t, missing)[0]]
    print(f"passing on {second} but not on {first}: {len(only_b)}")
    print(f"passing on {first} but not on {second}: {len(only_a)}")
    for name, results in servers:
        bad = [t for t in names if results.get(t, missing)[2]]
        timeouts = [t for t in names if "Timeout" in results.get(t, missing)[1]]
        print(f"{name}: tests that saw a 5xx answer or a broken connection: {len(bad)}")
        for t in bad:
            print(f"    {t.split('::')[-1]}: {results[t][2][:160]}")
        print(f"{name}: tests stopped by the per-test timeout: {len(timeouts)}")
        for t in timeouts:
            print(f"    {t.split('::')[-1]}")

    with open(args.csv, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(
            ["test", "area"]
            + [f"{n}_{c}" for n in (first, second) for c in ("outcome", "message", "server_5xx")]
        )
        for t in names:
            w.writerow([t, _area(t), *a.get(t, missing), *b.get(t, missing)])

    lines = [
        "# S3 conformance: per-test comparison",
        "",
        f"Generated by `scripts/conformance.sh` on {datetime.date.today().isoformat()}"
        + (f", s3-tests commit `{args.suite_commit}`" if args.suite_commit else "")
        + ". Every selected test with each server's outcome, the first line of each failure "
        + "and any 5xx answer is in "
        + f"[{Path(args.csv).name}]({Path(args.csv).name}); see docs/SERVER.md, Conformance.",
        "",
    ]
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for t in names:
        if a.get(t, missing)[0] not in ("passed", "skipped"):
            groups[failure_group(t, a.get(t, missing)[1])].append(t)
    lines += [
        f"## What the tests failing on {first} are about",
        "",
        f"| failures on {first} | tests | of which pass on {second} |",
        "|---|---:|---:|",
    ]
    for group, tests in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        pb = sum(b.get(t, missing)[0] == "passed" for t in tests)
        lines.append(f"| {group} | {len(tests)} | {pb} |")
    lines += ["", "## By area (from the test names)", ""]
    lines += [f"| area | tests | {first} passed | {second} passed |", "|---|---:|---:|---:|"]
    by_area: dict[str, list[str]] = collections.defaultdict(list)
    for t in names:
        by_area[_area(t)].append(t)
    for area, tests in sorted(by_area.items()):
        pa = sum(a.get(t, missing)[0] == "passed" for t in tests)
        pb = sum(b.get(t, missing)[0] == "passed" for t in tests)
        lines.append(f"| {area} | {len(tests)} | {pa} | {pb} |")
    lines.append("")
    for title, tests, results, server in (
        (f"Passing on {second}, not on {first}", only_b, a, first),
        (f"Passing on {first}, not on {second}", only_a, b, second),
    ):
        lines += [f"## {title} ({len(tests)})", "", f"| test | {server}: outcome, message |"]
        lines.append("|---|---|")
        for t in tests:
            o, m, _ = results.get(t, missing)
            m = m.replace("|", "/")
            lines.append(f"| `{t.split('::')[-1]}` | {o}: {m} |")
        lines.append("")
    Path(args.markdown).write_text("\n".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("conf", help="write an s3tests.conf")
    c.add_argument("--endpoint", required=True)
    for role in ("main", "alt", "tenant"):
        c.add_argument(f"--{role}", required=True, metavar="KEY:SECRET")
    c.add_argument("--out", required=True)
    r = sub.add_parser("compare", help="compare the JUnit files of two servers")
    r.add_argument("--junit", action="append", required=True, metavar="NAME=FILE")
    r.add_argument("--csv", required=True)
    r.add_argument("--markdown", required=True)
    r.add_argument("--suite-commit", default="")
    args = parser.parse_args()
    if args.command == "conf":
        write_conf(args)
    else:
        if len(args.junit) != 2:
            parser.error("compare takes exactly two --junit")
        compare(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
