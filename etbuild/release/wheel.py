"""A trimmed runtime as a wheel: `pip install` puts its `etbuild` package on a device or server.

The wheel (PEP 427, pure Python, tag `py3-none-any`) holds the runtime's files under
`etbuild/` and a `.dist-info` with METADATA (depending on numpy and flatbuffers, all the
runtime imports), WHEEL and RECORD (sha256 of every file). Its bytes are a function of its
contents and `epoch`: entries sorted, every timestamp `epoch` (not before 1980, zip's start),
modes 0644, no paths from the build machine.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import time
import zipfile
from collections.abc import Mapping

REQUIRES = ("numpy>=1.26", "flatbuffers>=24.3")
ZIP_EPOCH = 315532800  # 1980-01-01T00:00:00Z


def normalized(name: str) -> str:
    """A distribution name as wheel file names spell it (PEP 427/503)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_filename(dist: str, version: str) -> str:
    return f"{normalized(dist)}-{version}-py3-none-any.whl"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _dist_info(dist: str, version: str, summary: str) -> dict[str, bytes]:
    metadata = "".join([
        "Metadata-Version: 2.1\n", f"Name: {dist}\n", f"Version: {version}\n", f"Summary: {summary}\n",
        "Requires-Python: >=3.10\n", *[f"Requires-Dist: {r}\n" for r in REQUIRES],
    ])
    wheel = "Wheel-Version: 1.0\nGenerator: etbuild\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    return {"METADATA": metadata.encode(), "WHEEL": wheel.encode()}


def runtime_wheel(files: Mapping[str, bytes], dist: str, version: str, summary: str, epoch: int) -> bytes:
    """The wheel's bytes: `files` (path in the wheel -> bytes) plus its dist-info."""
    info_dir = f"{normalized(dist)}-{version}.dist-info"
    entries = dict(sorted(files.items()))
    entries.update({f"{info_dir}/{name}": data for name, data in _dist_info(dist, version, summary).items()})
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in entries.items())
    entries[f"{info_dir}/RECORD"] = (record + f"{info_dir}/RECORD,,\n").encode()
    stamp = time.gmtime(max(epoch, ZIP_EPOCH))[:6]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in entries.items():
            info = zipfile.ZipInfo(path, date_time=stamp)
            info.compress_type, info.external_attr, info.create_system = zipfile.ZIP_DEFLATED, 0o644 << 16, 3
            zf.writestr(info, data)
    return buf.getvalue()


def installed_bytes(files: Mapping[str, bytes]) -> int:
    """Bytes the runtime's files take once installed (dist-info left out)."""
    return sum(len(data) for data in files.values())
