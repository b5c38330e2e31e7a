"""The object storage port over S3 and IAM (boto3): a bucket per tenant; each tenant an IAM
user whose inline policy allows its bucket and nothing else."""

from __future__ import annotations

import json
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from gpulease.ports.object_store import AccessKey, ObjectStoreError

# Past its quota: what a tenant may still do to make room (no PutObject: no upload, in
# one part or many). Actions every S3 with an IAM API knows (SeaweedFS refuses a policy
# naming one it does not).
READ_AND_DELETE = ["s3:GetObject", "s3:ListBucket", "s3:DeleteObject", "s3:GetBucketLocation"]
# Under its quota: objects only (uploads in one part or many included). Never `s3:*`: that
# lets a key set a bucket policy, which outlives the quota's block and can open the bucket
# to anyone; the bucket's access is the platform's to set.
READ_AND_WRITE = [*READ_AND_DELETE, "s3:PutObject"]


def bucket_policy(bucket: str, writable: bool = True, prefix: str | None = None) -> str:
    if prefix is None:
        return json.dumps({"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Action": READ_AND_WRITE if writable else READ_AND_DELETE,
            "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]}]})
    # one run's key: the objects under its prefix; listing the bucket names keys only
    objects = ["s3:GetObject", "s3:DeleteObject"] + (["s3:PutObject"] if writable else [])
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": objects,
         "Resource": [f"arn:aws:s3:::{bucket}/{prefix.strip('/')}/*"]},
        {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
         "Resource": [f"arn:aws:s3:::{bucket}"]}]})


class S3Store:
    def __init__(self, endpoint: str, access_key: str, secret_key: str,
                 region: str = "us-east-1", iam_endpoint: str | None = None) -> None:
        self.endpoint = endpoint
        common: dict[str, Any] = dict(aws_access_key_id=access_key,
                                      aws_secret_access_key=secret_key, region_name=region,
                                      config=Config(retries={"max_attempts": 2},
                                                    connect_timeout=5, read_timeout=30,
                                                    s3={"addressing_style": "path"}))
        self._s3 = boto3.client("s3", endpoint_url=endpoint, **common)
        self._iam = boto3.client("iam", endpoint_url=iam_endpoint or endpoint, **common)

    def _call(self, what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise ObjectStoreError(f"object store refused {what}: {error.get('Code')} "
                                   f"{error.get('Message', '')}".strip()) from None
        except BotoCoreError as exc:
            raise ObjectStoreError(f"object store at {self.endpoint} did not answer {what}: "
                                   f"{exc}") from None

    def ensure_bucket(self, bucket: str) -> None:
        try:
            self._s3.head_bucket(Bucket=bucket)
            return
        except ClientError:
            pass
        except BotoCoreError as exc:
            raise ObjectStoreError(f"object store at {self.endpoint} did not answer: "
                                   f"{exc}") from None
        self._call("to create the bucket", self._s3.create_bucket, Bucket=bucket)

    def create_key(self, user: str, bucket: str, prefix: str | None = None) -> AccessKey:
        try:
            self._iam.create_user(UserName=user)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "EntityAlreadyExists":
                raise ObjectStoreError(f"object store refused the user {user}: "
                                       f"{exc.response.get('Error', {})}") from None
        if prefix is None:
            self.set_writable(user, bucket, True)
        else:
            self._call("the run's policy", self._iam.put_user_policy, UserName=user,
                       PolicyName=f"{bucket}-only",
                       PolicyDocument=bucket_policy(bucket, True, prefix))
        made = self._call("a new key", self._iam.create_access_key, UserName=user)
        key = made["AccessKey"]
        return AccessKey(str(key["AccessKeyId"]), str(key["SecretAccessKey"]))

    def set_writable(self, user: str, bucket: str, writable: bool) -> None:
        self._call("the bucket policy", self._iam.put_user_policy, UserName=user,
                   PolicyName=f"{bucket}-only", PolicyDocument=bucket_policy(bucket, writable))
        try:  # a bucket policy (set by a key of an older release) would override the block
            self._s3.delete_bucket_policy(Bucket=bucket)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("NoSuchBucketPolicy",
                                                                  "NoSuchBucket"):
                raise ObjectStoreError(f"object store refused to remove {bucket}'s bucket "
                                       f"policy: {exc.response.get('Error', {})}") from None
        except BotoCoreError as exc:
            raise ObjectStoreError(f"object store at {self.endpoint} did not answer: "
                                   f"{exc}") from None

    def delete_key(self, user: str, access_key_id: str) -> None:
        self._call("to delete the key", self._iam.delete_access_key, UserName=user,
                   AccessKeyId=access_key_id)

    def delete_user(self, user: str) -> None:
        keys = self._call("the user's keys", self._iam.list_access_keys, UserName=user)
        if keys.get("AccessKeyMetadata"):
            return  # a key of it is still in use (a run started again)
        policies = self._call("the user's policies", self._iam.list_user_policies,
                              UserName=user)
        for name in policies.get("PolicyNames", []):
            self._call("to delete the policy", self._iam.delete_user_policy, UserName=user,
                       PolicyName=name)
        self._call("to delete the user", self._iam.delete_user, UserName=user)

    def bucket_bytes(self, bucket: str) -> int:
        total = 0
        pages = self._s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        try:
            for page in pages:
                total += sum(int(o.get("Size", 0)) for o in page.get("Contents", []))
        except (ClientError, BotoCoreError) as exc:
            raise ObjectStoreError(f"object store could not list {bucket}: {exc}") from None
        return total
