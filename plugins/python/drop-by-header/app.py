"""drop-by-header: a kmirror record transform in Python.

Drops every record carrying the header `header` (with exactly the UTF-8 value `value`, if
given); keeps every other record as it is. Without `header` every record is kept.

Build: `kmirror plugin build`  Check: `kmirror plugin check drop-by-header.wasm`
"""

from typing import List, Optional, Tuple

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.record_transform import (
    Outcome,
    Outcome_Drop,
    Outcome_Keep,
    SourceRecord,
)

# Set by `configure`. Module state, not instance state: the bindings may create a new
# `RecordTransform` object for each call.
SETTINGS: dict = {"header": None, "value": None}


def carries(record: SourceRecord, name: str, value: Optional[bytes]) -> bool:
    return any(h.key == name and (value is None or h.value == value) for h in record.headers)


class RecordTransform(exports.RecordTransform):
    def configure(self, config: List[Tuple[str, str]]) -> None:
        settings: dict = {"header": None, "value": None}
        for key, value in config:
            if key not in settings:
                raise Err(f"drop-by-header: unknown key `{key}`; known keys: header, value")
            settings[key] = value
        if settings["header"] == "":
            raise Err("drop-by-header: `header` is empty")
        if settings["value"] is not None and settings["header"] is None:
            raise Err("drop-by-header: `value` needs `header`")
        SETTINGS["header"] = settings["header"]
        SETTINGS["value"] = None if settings["value"] is None else settings["value"].encode()

    def transform(self, records: List[SourceRecord]) -> List[Outcome]:
        name, value = SETTINGS["header"], SETTINGS["value"]
        if name is None:
            return [Outcome_Keep() for _ in records]
        return [Outcome_Drop() if carries(r, name, value) else Outcome_Keep() for r in records]
