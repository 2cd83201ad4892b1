"""Where a shared cache keeps its bytes: a local directory or an S3-compatible bucket.

A store maps names (`cas/ab/ab12…`, `ac/<key>.json`) to bytes, and writes each name once:
`put_once` returns False when the name exists and leaves it as it is. A local store writes
to a temporary name and links it into place (a reader never sees half an entry); a bucket
uses a conditional put (`If-None-Match: *`), which S3 and its compatibles answer with 412
when the key exists.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from etbuild.errors import UsageError
from etbuild.extras import require
from etbuild.fsutil import temp_name


class Store(Protocol):
    """Named bytes, each name written once."""

    url: str

    def get(self, name: str) -> bytes | None:
        """The bytes stored under `name`, or None."""

    def put_once(self, name: str, data: bytes) -> bool:
        """Store `data` under `name` unless it exists; whether it was written."""

    def delete(self, name: str) -> None:
        """Remove `name` (nothing if absent)."""


class LocalStore:
    """A directory, possibly shared (NFS and the like): `<root>/<name>`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self.url = str(self.root)

    def get(self, name: str) -> bytes | None:
        try:
            return (self.root / name).read_bytes()
        except FileNotFoundError:
            return None

    def put_once(self, name: str, data: bytes) -> bool:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_name(path)
        tmp.write_bytes(data)
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink()

    def delete(self, name: str) -> None:
        (self.root / name).unlink(missing_ok=True)


class S3Store:
    """A bucket of an S3-compatible service: `s3://bucket/prefix?endpoint=http://host:port`.

    Credentials come from boto3's usual places (environment, config files, instance roles);
    the endpoint defaults to AWS (or `AWS_ENDPOINT_URL`). One client per process, made on first use.
    """

    def __init__(self, bucket: str, prefix: str = "", endpoint: str | None = None) -> None:
        self.bucket, self.prefix, self.endpoint = bucket, prefix.strip("/"), endpoint
        query = f"?endpoint={endpoint}" if endpoint else ""
        self.url = f"s3://{bucket}/{self.prefix}{query}"
        self._client: Any = None
        self._pid = 0

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None, "_pid": 0}

    def _s3(self) -> Any:
        if self._client is None or self._pid != os.getpid():
            boto3 = require("boto3", "cache-s3")
            self._client, self._pid = boto3.client("s3", endpoint_url=self.endpoint), os.getpid()
        return self._client

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def get(self, name: str) -> bytes | None:
        try:
            return self._s3().get_object(Bucket=self.bucket, Key=self._key(name))["Body"].read()
        except self._s3().exceptions.NoSuchKey:
            return None

    def put_once(self, name: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        try:
            self._s3().put_object(Bucket=self.bucket, Key=self._key(name), Body=data, IfNoneMatch="*")
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise

    def delete(self, name: str) -> None:
        self._s3().delete_object(Bucket=self.bucket, Key=self._key(name))


def open_store(url: str) -> Store:
    """The store a `--cache` value names: a directory path, `file://DIR` or `s3://BUCKET/PREFIX`."""
    parts = urlsplit(url)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise UsageError(f"cache {url!r}: expected s3://BUCKET[/PREFIX][?endpoint=URL]")
        endpoint = parse_qs(parts.query).get("endpoint", [None])[0]
        return S3Store(parts.netloc, parts.path, endpoint)
    if parts.scheme == "file":
        return LocalStore(parts.path)
    if parts.scheme and len(parts.scheme) > 1:
        raise UsageError(f"cache {url!r}: unknown scheme {parts.scheme!r}; expected a directory, file:// or s3://")
    return LocalStore(url)
