"""json-mask: a kmirror record transform in Python.

Replaces the values of `fields` (comma-separated dotted paths, e.g. `card.number,email`;
an array on the way applies the rest of the path to each element) in JSON record values
with `mask` (default `***`). A value that is not JSON, or has none of the fields, passes
unchanged (counted as kept). The masked value is written back compactly, non-ASCII as
escapes (the Rust `json_mask.wasm` keeps the value's text instead); a value nested too deep
for Python's parser fails the transform (`on_transform_error`).

Build: `kmirror plugin build`  Check: `kmirror plugin check json-mask.wasm`
"""

import json
from typing import Any, List, Tuple

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.record_transform import (
    Outcome,
    Outcome_Keep,
    Outcome_Rewrite,
    Rewritten,
    SourceRecord,
)

# Set by `configure` (module state: the bindings may create a new object for each call).
SETTINGS: dict = {"paths": [], "mask": "***"}


def mask_at(node: Any, path: List[str], mask: str) -> bool:
    """Masks the value at `path` under `node`; whether anything was masked."""
    if isinstance(node, list):
        return any([mask_at(item, path, mask) for item in node])
    if not isinstance(node, dict) or path[0] not in node:
        return False
    if len(path) == 1:
        node[path[0]] = mask
        return True
    return mask_at(node[path[0]], path[1:], mask)


def not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def outcome(record: SourceRecord) -> Outcome:
    if record.value is None:
        return Outcome_Keep()
    try:
        # Decoded here: json.loads would guess an encoding from the first bytes (UTF-16 or
        # UTF-32 among them), which this Python does not carry.
        document = json.loads(record.value.decode("utf-8"), parse_constant=not_json)
    except ValueError:  # not JSON (UnicodeDecodeError and JSONDecodeError included)
        return Outcome_Keep()
    masked = [mask_at(document, p, SETTINGS["mask"]) for p in SETTINGS["paths"]]
    if not any(masked):
        return Outcome_Keep()
    # ASCII with escapes: every string json.loads accepts (lone surrogates included) is
    # written back as valid JSON.
    value = json.dumps(document, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    return Outcome_Rewrite(Rewritten(key=record.key, value=value, headers=record.headers))


class RecordTransform(exports.RecordTransform):
    def configure(self, config: List[Tuple[str, str]]) -> None:
        paths, mask = [], "***"
        for key, value in config:
            if key == "fields":
                for field in (f.strip() for f in value.split(",")):
                    if not field:
                        continue
                    path = field.split(".")
                    if any(part == "" for part in path):
                        raise Err(f"json-mask: `fields`: `{field}` has an empty part")
                    paths.append(path)
            elif key == "mask":
                mask = value
            else:
                raise Err(f"json-mask: unknown key `{key}`; known keys: fields, mask")
        if not paths:
            raise Err("json-mask: `fields` is required (comma-separated dotted paths)")
        SETTINGS["paths"], SETTINGS["mask"] = paths, mask

    def transform(self, records: List[SourceRecord]) -> List[Outcome]:
        return [outcome(r) for r in records]
