"""ACL reads, owner-only ACL writes, the public access block, object ownership and the
versioning status on `bucketload serve`, checked with boto3 against the embedded server and
moto's server. One key pair and no public access: every object and bucket belongs to the
owner, with the owner's FULL_CONTROL as its only grant; an ACL that would grant anyone else
anything is refused with 501 and changes nothing."""

from __future__ import annotations

from test_cli_dataset import moto  # noqa: F401  (a fixture)
from test_server_fidelity import _error


def test_acls_name_the_owner_as_listings_do(store):
    _, s3, bucket = store
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    listed = s3.list_objects(Bucket=bucket)["Contents"][0]["Owner"]
    for acl in (s3.get_object_acl(Bucket=bucket, Key="k"), s3.get_bucket_acl(Bucket=bucket)):
        assert acl["Owner"]["ID"] == listed["ID"]
        assert [(g["Grantee"]["ID"], g["Permission"]) for g in acl["Grants"]] == \
            [(listed["ID"], "FULL_CONTROL")]
    assert _error(s3.get_object_acl, Bucket=bucket, Key="absent")[0] == 404


def test_owner_only_acls_are_accepted_and_others_refused(store):
    name, s3, bucket = store
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    s3.put_bucket_acl(Bucket=bucket, ACL="private")
    s3.put_object_acl(Bucket=bucket, Key="k", ACL="bucket-owner-full-control")
    if name == "moto":
        return  # moto applies public ACLs; this server cannot open anything to anyone
    assert _error(s3.put_object_acl, Bucket=bucket, Key="k", ACL="public-read") == \
        (501, "NotImplemented")
    assert _error(s3.put_bucket_acl, Bucket=bucket, GrantRead="uri=http://acs.amazonaws.com/groups/global/AllUsers") == \
        (501, "NotImplemented")
    grants = s3.get_object_acl(Bucket=bucket, Key="k")["Grants"]
    assert [g["Permission"] for g in grants] == ["FULL_CONTROL"]


def test_public_access_block_is_stored(store):
    _, s3, bucket = store
    assert _error(s3.get_public_access_block, Bucket=bucket) == \
        (404, "NoSuchPublicAccessBlockConfiguration")
    config = {"BlockPublicAcls": True, "IgnorePublicAcls": False, "BlockPublicPolicy": True,
              "RestrictPublicBuckets": False}
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration=config)
    assert s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"] == config
    s3.delete_public_access_block(Bucket=bucket)
    assert _error(s3.get_public_access_block, Bucket=bucket)[0] == 404


def test_ownership_controls_are_stored(store):
    _, s3, bucket = store
    assert _error(s3.get_bucket_ownership_controls, Bucket=bucket) == \
        (404, "OwnershipControlsNotFoundError")
    s3.put_bucket_ownership_controls(Bucket=bucket, OwnershipControls={
        "Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]})
    rules = s3.get_bucket_ownership_controls(Bucket=bucket)["OwnershipControls"]["Rules"]
    assert rules == [{"ObjectOwnership": "BucketOwnerEnforced"}]
    s3.delete_bucket_ownership_controls(Bucket=bucket)
    assert _error(s3.get_bucket_ownership_controls, Bucket=bucket)[0] == 404


def test_versioning_status_of_a_bucket_that_never_had_it(store):
    _, s3, bucket = store
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
    assert _error(s3.get_bucket_versioning, Bucket=f"{bucket}-absent")[0] == 404


def test_create_bucket_object_ownership_is_kept(store):
    _, s3, bucket = store
    s3.create_bucket(Bucket=f"{bucket}-w", ObjectOwnership="ObjectWriter")
    rules = s3.get_bucket_ownership_controls(Bucket=f"{bucket}-w")["OwnershipControls"]["Rules"]
    assert rules == [{"ObjectOwnership": "ObjectWriter"}]


def test_object_lock_requests_on_a_bucket_without_lock(store):
    """No bucket has object lock here (CreateBucket refuses it): S3's answers for such a bucket,
    and nothing changes."""
    _, s3, bucket = store
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    assert _error(s3.get_object_lock_configuration, Bucket=bucket) == \
        (404, "ObjectLockConfigurationNotFoundError")
    assert _error(s3.put_object_legal_hold, Bucket=bucket, Key="k",
                  LegalHold={"Status": "ON"}) == (400, "InvalidRequest")
    import datetime
    until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
    assert _error(s3.put_object_retention, Bucket=bucket, Key="k", Retention={
        "Mode": "GOVERNANCE", "RetainUntilDate": until}) == (400, "InvalidRequest")
    s3.delete_object(Bucket=bucket, Key="k")


def test_configurations_a_bucket_cannot_have_are_not_found(store):
    """Lifecycle, CORS and policies are refused (501) when set, so reading one answers S3's
    not-found, and deleting one changes nothing."""
    name, s3, bucket = store
    assert _error(s3.get_bucket_lifecycle_configuration, Bucket=bucket) == \
        (404, "NoSuchLifecycleConfiguration")
    assert _error(s3.get_bucket_cors, Bucket=bucket) == (404, "NoSuchCORSConfiguration")
    assert _error(s3.get_bucket_policy, Bucket=bucket) == (404, "NoSuchBucketPolicy")
    s3.delete_bucket_lifecycle(Bucket=bucket)
    s3.delete_bucket_cors(Bucket=bucket)
    s3.delete_bucket_policy(Bucket=bucket)
    if name == "bucketload":
        assert _error(s3.put_bucket_cors, Bucket=bucket, CORSConfiguration={
            "CORSRules": [{"AllowedMethods": ["GET"], "AllowedOrigins": ["*"]}]}) == \
            (501, "NotImplemented")
