"""The devtools schemas (`bundled_program.fbs`, `etdump.fbs` in etbuild.schema), parsed once.

Their Python types are written out beside each container (`etdump_format`, `bundle_format`), typed, one
dataclass per table, as every schema is mirrored (etbuild.runtime.format.mirror).
"""

from __future__ import annotations

from functools import cache

from etbuild.runtime.format.fbs import Schema, load_schema


@cache
def devtools_schema(file_name: str) -> Schema:
    """A schema of etbuild.schema, parsed once."""
    from etbuild.schema import SCHEMA_DIR

    return load_schema(SCHEMA_DIR / file_name)
