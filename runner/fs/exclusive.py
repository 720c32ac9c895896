"""Create-if-absent: the one atomic primitive that drivers sharing a store rely on (runner.coord.claims).

`create(path, data)` makes `path` hold `data` and returns True, or returns False and changes nothing
when `path` already exists; of several processes creating one path, exactly one gets True, and no
reader ever sees the file half-written.

    local path   link(2) of a complete, private temporary file: the kernel refuses (EEXIST) to make a
                 name that exists, and never replaces one (rename would)
    S3           PUT with `If-None-Match: *` (S3 conditional writes, 2024; moto implements it): the
                 server answers 412 Precondition Failed when the key exists. pyarrow's S3FileSystem
                 sends no conditional header, so this one write goes through boto3.

Other filesystems (gs://, a filesystem object handed to ResultStore) have none here: `for_root`
returns None and drivers there do not share work (each computes what it planned), and a second
writing command is refused (runner.coord.sole_writer).
"""

from __future__ import annotations

import functools
import os
import uuid
from typing import Any, Protocol
from urllib.parse import parse_qs, urlparse

import pyarrow.fs as pafs


class ExclusiveCreate(Protocol):
    name: str  # the primitive, for `convgrid status` and the docs

    def create(self, path: str, data: bytes) -> bool: ...


class LocalLink:
    """link(2) of a complete temporary file: atomic, never replaces."""

    name = "link(2) of a complete temp file (EEXIST if taken)"

    def create(self, path: str, data: bytes) -> bool:
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as handle:
            handle.write(data)
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)


class S3IfNoneMatch:
    """PUT with If-None-Match: * through boto3, to the endpoint, region and credentials of the root URI
    (credentials from the same environment pyarrow reads: AWS_ACCESS_KEY_ID, ~/.aws, ...)."""

    name = "S3 PUT with If-None-Match: * (412 if taken)"

    def __init__(self, uri: str) -> None:
        parsed = urlparse(uri)
        query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        self.options: dict[str, Any] = {}
        if "endpoint_override" in query:
            endpoint = query["endpoint_override"]
            scheme = query.get("scheme", "https")
            self.options["endpoint_url"] = endpoint if "://" in endpoint else f"{scheme}://{endpoint}"
        if "region" in query:
            self.options["region_name"] = query["region"]

    @functools.cached_property
    def client(self) -> Any:
        """Made at the first create: every store on S3 has this primitive (its writers' lock is built on
        it), and a reader that never writes should not pay for importing boto3."""
        import boto3  # only an S3 root needs it

        return boto3.client("s3", **self.options)

    def create(self, path: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        bucket, _, key = path.partition("/")
        try:
            self.client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            return True
        except ClientError as exc:
            error = exc.response.get("Error", {})
            # 409 ConditionalRequestConflict: a concurrent conditional PUT of the same key is in progress
            if error.get("Code") in ("PreconditionFailed", "ConditionalRequestConflict") or exc.response.get(
                "ResponseMetadata", {}
            ).get("HTTPStatusCode") in (409, 412):
                return False
            raise

    def first_after(self, prefix: str, path: str) -> str | None:
        """The first key (as `bucket/key`) under `prefix` that sorts after `path`, or None: one listing of
        one key (runner.coord.fenced_commits asks whether any commit record follows its own)."""
        bucket, _, key = path.partition("/")
        _, _, under = prefix.partition("/")
        found = self.client.list_objects_v2(Bucket=bucket, Prefix=under, StartAfter=key, MaxKeys=1)
        contents = found.get("Contents") or []
        return f"{bucket}/{contents[0]['Key']}" if contents else None


def for_root(root: str, fs: pafs.FileSystem) -> ExclusiveCreate | None:
    """The create-if-absent of this results root, or None where there is none."""
    if isinstance(fs, pafs.LocalFileSystem):
        return LocalLink()
    if isinstance(fs, pafs.S3FileSystem) and str(root).startswith("s3://"):
        return S3IfNoneMatch(str(root))
    return None
