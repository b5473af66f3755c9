"""The embedded server's S3 Express One Zone sessions, checked with boto3's own S3 Express
support (it calls CreateSession itself, signs for `s3express` and sends
`x-amz-s3session-token`), and with raw requests for what boto3 never sends.

A bucket named `base--zone--x-s3` is a directory bucket; every other bucket is untouched.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import urllib.request
import uuid
import xml.etree.ElementTree as ET

import botocore.exceptions
import pytest
from conftest import ACCESS_KEY, SECRET_KEY, make_client, start_server, stop_server

NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def express_client(endpoint: str, key: str = ACCESS_KEY, secret: str = SECRET_KEY, **cfg):
    """boto3 as a user of a directory bucket configures it: no addressing style forced."""
    return make_client(endpoint, key, secret, addressing=None, **cfg)


def directory_bucket() -> str:
    return f"t{uuid.uuid4().hex[:10]}--use1-az4--x-s3"


def counters(endpoint: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{endpoint}/_bucketload/counters") as response:
        return json.load(response)


def sign(method: str, url: str, key: str, secret: str, service: str,
         headers: dict[str, str] | None = None) -> urllib.request.Request:
    """A request signed with SigV4 by this test itself (for requests boto3 never sends)."""
    parsed = urllib.parse.urlsplit(url)
    now = datetime.datetime.now(datetime.UTC)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    all_headers = {"host": parsed.netloc, "x-amz-date": amz_date,
                   "x-amz-content-sha256": hashlib.sha256(b"").hexdigest(),
                   **{k.lower(): v for k, v in (headers or {}).items()}}
    names = sorted(all_headers)
    query = "&".join(sorted(
        f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
        for k, v in urllib.parse.parse_qsl(parsed.query, keep_blank_values=True)))
    canonical = "\n".join([method, parsed.path or "/", query,
                           "".join(f"{n}:{all_headers[n]}\n" for n in names),
                           ";".join(names), all_headers["x-amz-content-sha256"]])
    scope = f"{day}/us-east-1/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    k = ("AWS4" + secret).encode()
    for part in (day, "us-east-1", service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    all_headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={key}/{scope}, "
                                    f"SignedHeaders={';'.join(names)}, Signature={signature}")
    return urllib.request.Request(url, method=method, headers=all_headers)


def send(request: urllib.request.Request) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def error_code(body: bytes) -> str:
    return ET.fromstring(body).findtext("Code") or ""


def create_session(endpoint: str, bucket: str, mode: str | None = None) -> dict[str, str]:
    headers = {"x-amz-create-session-mode": mode} if mode else {}
    status, body = send(sign("GET", f"{endpoint}/{bucket}?session", ACCESS_KEY, SECRET_KEY,
                             "s3express", headers))
    assert status == 200, body
    creds = ET.fromstring(body).find(f"{NS}Credentials")
    assert creds is not None, body
    return {child.tag.removeprefix(NS): child.text or "" for child in creds}


def with_session(method: str, url: str, session: dict[str, str], service: str = "s3express",
                 token: str | None = None) -> urllib.request.Request:
    return sign(method, url, session["AccessKeyId"], session["SecretAccessKey"], service,
                {"x-amz-s3session-token": token if token is not None else session["SessionToken"]})


def test_boto3_works_on_a_directory_bucket_through_sessions(server):
    s3 = express_client(server.endpoint)
    bucket = directory_bucket()
    before = counters(server.endpoint).get("CreateSession", 0)
    s3.create_bucket(
        Bucket=bucket,
        CreateBucketConfiguration={
            "Location": {"Type": "AvailabilityZone", "Name": "use1-az4"},
            "Bucket": {"DataRedundancy": "SingleAvailabilityZone", "Type": "Directory"},
        },
    )
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"d/k{i}", Body=b"x" * i)
    assert s3.get_object(Bucket=bucket, Key="d/k3")["Body"].read() == b"xxx"
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="d/")
    assert sorted(o["Key"] for o in listed["Contents"]) == [f"d/k{i}" for i in range(5)]
    s3.delete_object(Bucket=bucket, Key="d/k0")
    assert s3.head_object(Bucket=bucket, Key="d/k4")["ContentLength"] == 4
    # boto3 opened one session for all of it, and it went through CreateSession.
    assert counters(server.endpoint).get("CreateSession", 0) - before == 1
    # The same objects, seen through a second, independent session.
    other = create_session(server.endpoint, bucket)
    status, body = send(with_session("GET", f"{server.endpoint}/{bucket}/d/k4", other))
    assert (status, body) == (200, b"xxxx")


def test_general_purpose_buckets_need_no_session(server):
    s3 = make_client(server.endpoint)
    name = f"general-{uuid.uuid4().hex[:8]}"
    before = counters(server.endpoint).get("CreateSession", 0)
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="k", Body=b"v")
    assert s3.get_object(Bucket=name, Key="k")["Body"].read() == b"v"
    assert counters(server.endpoint).get("CreateSession", 0) == before


def test_directory_bucket_requests_without_a_valid_session_are_refused(server):
    bucket = directory_bucket()
    express_client(server.endpoint).create_bucket(Bucket=bucket)
    url = f"{server.endpoint}/{bucket}/k"
    # Signed with the ordinary key and no session, as for a general purpose bucket.
    status, body = send(sign("PUT", url, ACCESS_KEY, SECRET_KEY, "s3"))
    assert (status, error_code(body)) == (403, "AccessDenied")
    assert b"CreateSession" in body
    session = create_session(server.endpoint, bucket)
    # An unknown token, and a known key with another session's token.
    status, body = send(with_session("GET", url, session, token="not-a-token"))
    assert (status, error_code(body)) == (400, "InvalidToken")
    # A signature made with the wrong secret.
    forged = dict(session, SecretAccessKey="wrong-secret")
    status, body = send(with_session("GET", url, forged))
    assert (status, error_code(body)) == (403, "SignatureDoesNotMatch")
    # A session for another directory bucket.
    elsewhere = directory_bucket()
    express_client(server.endpoint).create_bucket(Bucket=elsewhere)
    status, body = send(with_session("GET", f"{server.endpoint}/{elsewhere}/k", session))
    assert (status, error_code(body)) == (403, "AccessDenied")
    # CreateSession itself with the wrong secret names no session.
    status, body = send(sign("GET", f"{server.endpoint}/{bucket}?session", ACCESS_KEY,
                             "wrong-secret", "s3express"))
    assert (status, error_code(body)) == (403, "SignatureDoesNotMatch")
    # Nothing above wrote anything: boto3 sees an empty bucket.
    assert express_client(server.endpoint).list_objects_v2(Bucket=bucket).get("KeyCount") == 0


def test_session_signed_for_s3_is_accepted_and_read_only_sessions_cannot_write(server):
    bucket = directory_bucket()
    s3 = express_client(server.endpoint)
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"kept")
    session = create_session(server.endpoint, bucket)
    status, body = send(with_session("GET", f"{server.endpoint}/{bucket}/k", session, "s3"))
    assert (status, body) == (200, b"kept")
    read_only = create_session(server.endpoint, bucket, "ReadOnly")
    status, body = send(with_session("GET", f"{server.endpoint}/{bucket}/k", read_only))
    assert (status, body) == (200, b"kept")
    status, body = send(with_session("DELETE", f"{server.endpoint}/{bucket}/k", read_only))
    assert (status, error_code(body)) == (403, "AccessDenied")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"kept"


def test_an_expired_session_is_refused(tmp_path):
    srv = start_server(tmp_path, "--session-ttl", "0s")
    try:
        bucket = directory_bucket()
        # CreateBucket is a control-plane request: the ordinary key, no session.
        status, body = send(sign("PUT", f"{srv.endpoint}/{bucket}", ACCESS_KEY, SECRET_KEY,
                                 "s3express"))
        assert status == 200, body
        session = create_session(srv.endpoint, bucket)
        status, body = send(with_session("GET", f"{srv.endpoint}/{bucket}/k", session))
        assert (status, error_code(body)) == (400, "ExpiredToken")
    finally:
        stop_server(srv)


def test_presigned_urls_on_directory_buckets_are_refused_clearly(server):
    s3 = express_client(server.endpoint)
    bucket = directory_bucket()
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"})
    status, body = send(urllib.request.Request(url))
    assert status in (403, 501), body
    assert error_code(body) in ("NotImplemented", "AccessDenied"), body


def test_create_session_refuses_an_unknown_mode(server):
    bucket = directory_bucket()
    express_client(server.endpoint).create_bucket(Bucket=bucket)
    status, body = send(sign("GET", f"{server.endpoint}/{bucket}?session", ACCESS_KEY,
                             SECRET_KEY, "s3express", {"x-amz-create-session-mode": "Sometimes"}))
    assert (status, error_code(body)) == (400, "InvalidArgument")


def test_boto3_client_errors_name_the_cause(server):
    s3 = express_client(server.endpoint, secret="wrong")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.list_objects_v2(Bucket=directory_bucket())
    assert e.value.response["Error"]["Code"] in ("SignatureDoesNotMatch", "AccessDenied")


def test_copies_are_signed_with_the_ordinary_key_as_boto3_signs_them(server):
    """boto3 opens no session for CopyObject and UploadPartCopy (S3 authorizes them with IAM
    credentials), so the server takes them signed with its own key."""
    s3 = express_client(server.endpoint)
    bucket = directory_bucket()
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="src/a", Body=b"copied bytes")
    s3.copy_object(Bucket=bucket, Key="dst/a", CopySource={"Bucket": bucket, "Key": "src/a"})
    assert s3.get_object(Bucket=bucket, Key="dst/a")["Body"].read() == b"copied bytes"
    upload = s3.create_multipart_upload(Bucket=bucket, Key="dst/b")["UploadId"]
    part = s3.upload_part_copy(Bucket=bucket, Key="dst/b", UploadId=upload, PartNumber=1,
                               CopySource={"Bucket": bucket, "Key": "src/a"})
    s3.complete_multipart_upload(
        Bucket=bucket, Key="dst/b", UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["CopyPartResult"]["ETag"]}]})
    assert s3.get_object(Bucket=bucket, Key="dst/b")["Body"].read() == b"copied bytes"
    # Signed with the ordinary key but with a wrong secret: refused.
    status, body = send(sign("PUT", f"{server.endpoint}/{bucket}/dst/c", ACCESS_KEY, "wrong",
                             "s3express", {"x-amz-copy-source": f"/{bucket}/src/a"}))
    assert (status, error_code(body)) == (403, "SignatureDoesNotMatch")
