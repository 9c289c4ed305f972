"""regex-filter: a kmirror topic filter in Python.

Mirrors the topics matching `topics` (default `.*`) except those matching `topics.exclude`
(default: MM2's `.*[\-\.]internal, .*\.replica, __.*`). Comma-separated regexes, each
matching the whole name; excludes win.

Build: `kmirror plugin build`  Check: `kmirror plugin check regex-filter.wasm`
"""

import re
from typing import List, Optional, Pattern, Tuple

from componentize_py_types import Err
from wit_world import exports

DEFAULTS = {"topics": ".*", "topics.exclude": r".*[\-\.]internal, .*\.replica, __.*"}


def pattern_list(key: str, text: str) -> Optional[Pattern[str]]:
    """One regex matching any of the comma-separated patterns, or None for an empty list."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        return None
    try:
        return re.compile("|".join(f"(?:{p})" for p in parts))
    except re.error as e:
        raise Err(f"regex-filter: `{key}`: invalid regex list `{text}`: {e}")


# The compiled lists, set by `configure`. Module state, not instance state: the bindings
# may create a new `TopicFilter` object for each call.
PATTERNS = {
    "include": pattern_list("topics", DEFAULTS["topics"]),
    "exclude": pattern_list("topics.exclude", DEFAULTS["topics.exclude"]),
}


class TopicFilter(exports.TopicFilter):
    def configure(self, config: List[Tuple[str, str]]) -> None:
        values = dict(DEFAULTS)
        for key, value in config:
            if key not in DEFAULTS:
                raise Err(f"regex-filter: unknown key `{key}`; known keys: {', '.join(DEFAULTS)}")
            values[key] = value
        PATTERNS["include"] = pattern_list("topics", values["topics"])
        PATTERNS["exclude"] = pattern_list("topics.exclude", values["topics.exclude"])

    def should_replicate_topic(self, topic: str) -> bool:
        included = PATTERNS["include"] is not None and PATTERNS["include"].fullmatch(topic) is not None
        excluded = PATTERNS["exclude"] is not None and PATTERNS["exclude"].fullmatch(topic) is not None
        return included and not excluded

    def should_replicate_topics(self, topics: List[str]) -> List[bool]:
        return [self.should_replicate_topic(t) for t in topics]
