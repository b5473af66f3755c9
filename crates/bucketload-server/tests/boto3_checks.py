"""Bucket and multipart operations against the bucketload server, checked with boto3.

Run by tests/server_boto3.rs with ENDPOINT set; exits non-zero on the first failure.
"""
import hashlib
import os
import sys

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

s3 = boto3.client(
    "s3",
    endpoint_url=os.environ["ENDPOINT"],
    aws_access_key_id="bucketload",
    aws_secret_access_key="bucketload-dev-secret",
    region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
)


def error_code(fn, **kwargs):
    try:
        fn(**kwargs)
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    return None


s3.create_bucket(Bucket="alpha")
s3.create_bucket(Bucket="beta")
# Creating one's own bucket again: 200 in us-east-1 (no location constraint), 409 elsewhere.
s3.create_bucket(Bucket="alpha")
assert error_code(
    s3.create_bucket, Bucket="alpha", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
) == ("BucketAlreadyOwnedByYou", 409)
names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
assert names == ["alpha", "beta", "bkt"], names
s3.head_bucket(Bucket="alpha")
assert error_code(s3.head_bucket, Bucket="missing")[1] == 404
assert error_code(s3.get_object, Bucket="missing", Key="k") == ("NoSuchBucket", 404)
assert error_code(s3.get_object, Bucket="alpha", Key="k") == ("NoSuchKey", 404)

body = b"hello boto3"
put = s3.put_object(Bucket="alpha", Key="dir/obj", Body=body, ContentType="text/plain", Metadata={"origin": "test"})
assert put["ETag"] == '"%s"' % hashlib.md5(body).hexdigest(), put["ETag"]
head = s3.head_object(Bucket="alpha", Key="dir/obj")
assert head["ContentType"] == "text/plain", head
assert head["Metadata"] == {"origin": "test"}, head["Metadata"]
assert head["ContentLength"] == len(body)
assert error_code(s3.get_object, Bucket="alpha", Key="dir/obj", Range="bytes=100-200") == ("InvalidRange", 416)
got = s3.get_object(Bucket="alpha", Key="dir/obj", Range="bytes=6-")
assert got["Body"].read() == b"boto3" and got["ContentRange"] == "bytes 6-10/11", got["ContentRange"]

listing = s3.list_objects_v2(Bucket="alpha")
assert [(o["Key"], o["ETag"], o["Size"]) for o in listing["Contents"]] == [("dir/obj", put["ETag"], len(body))]
assert listing["KeyCount"] == 1 and not listing["IsTruncated"]

assert error_code(s3.delete_bucket, Bucket="alpha") == ("BucketNotEmpty", 409)

# Multipart: ListMultipartUploads and ListParts see the upload until it completes.
upload = s3.create_multipart_upload(Bucket="alpha", Key="mp/big", ContentType="application/x-tar")
uid = upload["UploadId"]
part1 = b"a" * (5 * 1024 * 1024)
part2 = b"tail"
e1 = s3.upload_part(Bucket="alpha", Key="mp/big", UploadId=uid, PartNumber=1, Body=part1)["ETag"]
e2 = s3.upload_part(Bucket="alpha", Key="mp/big", UploadId=uid, PartNumber=2, Body=part2)["ETag"]
uploads = s3.list_multipart_uploads(Bucket="alpha")["Uploads"]
assert [(u["Key"], u["UploadId"]) for u in uploads] == [("mp/big", uid)], uploads
parts = s3.list_parts(Bucket="alpha", Key="mp/big", UploadId=uid)["Parts"]
assert [(p["PartNumber"], p["ETag"], p["Size"]) for p in parts] == [(1, e1, len(part1)), (2, e2, len(part2))], parts
assert error_code(
    s3.complete_multipart_upload, Bucket="alpha", Key="mp/big", UploadId=uid,
    MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": e2}, {"PartNumber": 1, "ETag": e1}]},
)[0] == "InvalidPartOrder"
done = s3.complete_multipart_upload(
    Bucket="alpha", Key="mp/big", UploadId=uid,
    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]},
)
md5s = hashlib.md5(part1).digest() + hashlib.md5(part2).digest()
assert done["ETag"] == '"%s-2"' % hashlib.md5(md5s).hexdigest(), done["ETag"]
assert s3.head_object(Bucket="alpha", Key="mp/big")["ContentType"] == "application/x-tar"
assert "Uploads" not in s3.list_multipart_uploads(Bucket="alpha") or not s3.list_multipart_uploads(Bucket="alpha")["Uploads"]
assert error_code(s3.list_parts, Bucket="alpha", Key="mp/big", UploadId=uid) == ("NoSuchUpload", 404)

# CopyObject keeps metadata unless told to replace it.
s3.copy_object(Bucket="beta", Key="copy", CopySource={"Bucket": "alpha", "Key": "dir/obj"})
assert s3.head_object(Bucket="beta", Key="copy")["Metadata"] == {"origin": "test"}

s3.copy_object(
    Bucket="beta", Key="replaced", CopySource={"Bucket": "alpha", "Key": "dir/obj"},
    MetadataDirective="REPLACE", ContentType="application/json", Metadata={"fresh": "1"},
)
replaced = s3.head_object(Bucket="beta", Key="replaced")
assert replaced["Metadata"] == {"fresh": "1"} and replaced["ContentType"] == "application/json", replaced
assert replaced["ETag"] == put["ETag"], replaced["ETag"]
s3.delete_object(Bucket="beta", Key="replaced")

# UploadPartCopy: parts copied from ranges of existing objects, with and without a range.
source = bytes(range(256)) * (10 * 1024 * 4 + 3)  # 10 MiB + 768 bytes
s3.put_object(Bucket="alpha", Key="src/big", Body=source)
cid = s3.create_multipart_upload(Bucket="beta", Key="assembled")["UploadId"]
cut = 5 * 1024 * 1024
c1 = s3.upload_part_copy(Bucket="beta", Key="assembled", UploadId=cid, PartNumber=1,
                         CopySource={"Bucket": "alpha", "Key": "src/big"},
                         CopySourceRange="bytes=0-%d" % (cut - 1))["CopyPartResult"]["ETag"]
assert c1 == '"%s"' % hashlib.md5(source[:cut]).hexdigest(), c1
c2 = s3.upload_part_copy(Bucket="beta", Key="assembled", UploadId=cid, PartNumber=2,
                         CopySource="alpha/src/big", CopySourceRange="bytes=%d-%d" % (cut, len(source) - 1),
                         )["CopyPartResult"]["ETag"]
c3 = s3.upload_part_copy(Bucket="beta", Key="assembled", UploadId=cid, PartNumber=3,
                         CopySource={"Bucket": "alpha", "Key": "dir/obj"})["CopyPartResult"]["ETag"]
assert c3 == put["ETag"], c3
assert error_code(
    s3.upload_part_copy, Bucket="beta", Key="assembled", UploadId=cid, PartNumber=4,
    CopySource={"Bucket": "alpha", "Key": "src/big"}, CopySourceRange="bytes=0-%d" % len(source),
) == ("InvalidRange", 416)
assert error_code(
    s3.upload_part_copy, Bucket="beta", Key="assembled", UploadId=cid, PartNumber=4,
    CopySource={"Bucket": "alpha", "Key": "missing"},
)[0] == "NoSuchKey"
assert error_code(
    s3.upload_part_copy, Bucket="beta", Key="assembled", UploadId=cid, PartNumber=4,
    CopySource={"Bucket": "alpha", "Key": "src/big"}, CopySourceIfMatch='"0000"',
) == ("PreconditionFailed", 412)
assert error_code(
    s3.upload_part_copy, Bucket="beta", Key="assembled", UploadId="ffff", PartNumber=1,
    CopySource={"Bucket": "alpha", "Key": "src/big"},
)[0] == "NoSuchUpload"
s3.complete_multipart_upload(
    Bucket="beta", Key="assembled", UploadId=cid,
    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": c1}, {"PartNumber": 2, "ETag": c2},
                               {"PartNumber": 3, "ETag": c3}]},
)
assert s3.get_object(Bucket="beta", Key="assembled")["Body"].read() == source + body
s3.delete_objects(Bucket="beta", Delete={"Objects": [{"Key": "assembled"}]})
s3.delete_object(Bucket="alpha", Key="src/big")

deleted = s3.delete_objects(Bucket="alpha", Delete={"Objects": [{"Key": "dir/obj"}, {"Key": "mp/big"}, {"Key": "never"}]})
assert sorted(d["Key"] for d in deleted["Deleted"]) == ["dir/obj", "mp/big", "never"], deleted
s3.delete_object(Bucket="beta", Key="copy")
s3.delete_bucket(Bucket="alpha")
s3.delete_bucket(Bucket="beta")
assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["bkt"]

bad = boto3.client(
    "s3", endpoint_url=os.environ["ENDPOINT"], aws_access_key_id="bucketload",
    aws_secret_access_key="wrong", region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
)
assert error_code(bad.list_buckets)[1] == 403
print("boto3 checks passed")
sys.exit(0)
