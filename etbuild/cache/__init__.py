"""A shared, content-addressed cache of stage outputs: a local directory or an S3-compatible bucket.

    cache = open_cache("s3://builds/etbuild?endpoint=http://127.0.0.1:9000")   # or a directory
    key = stage_key("plan", versions(), fields, inputs)
    cache.restore(key, Path("build/mlp")) or (run the stage, then) cache.save(key, "plan", root, outputs)

Keys (`keys`) cover the stage, etbuild's source, the tool versions, the recipe sections read
and the input digests; entries and blobs (`cache`) are write-once and checked on read; stores
(`store`) keep the bytes.
"""

from etbuild.cache.cache import Cache, CorruptEntry, Entry
from etbuild.cache.keys import canonical, code_digest, portable, sha256, stage_key, tool_versions, versions
from etbuild.cache.store import LocalStore, S3Store, Store, open_store


def open_cache(url: str) -> Cache:
    """The cache at `url`: a directory, `file://DIR`, or `s3://BUCKET/PREFIX[?endpoint=URL]`."""
    return Cache(open_store(url))


__all__ = [
    "Cache",
    "CorruptEntry",
    "Entry",
    "LocalStore",
    "S3Store",
    "Store",
    "canonical",
    "code_digest",
    "open_cache",
    "open_store",
    "portable",
    "sha256",
    "stage_key",
    "tool_versions",
    "versions",
]
