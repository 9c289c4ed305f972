"""prefix-policy: a kmirror replication policy in Python.

`orders` mirrored from `us-west` becomes `prod-us-west.orders` on the target, and the name
reverses exactly. Configuration: `prefix` (default `prod-`) marks remote topics, `separator`
(default `.`) separates the source alias from the topic. Multi-hop names nest:
`prod-b.prod-a.orders` came from `b`, which had it from `a`. Internal topics follow MM2.

Build: `kmirror plugin build`  Check: `kmirror plugin check prefix-policy.wasm`
"""

from typing import List, Optional, Tuple

from componentize_py_types import Err
from wit_world import exports

# The configuration, set once by `configure`. Module state, not instance state: the
# bindings may create a new `ReplicationPolicy` object for each call.
SETTINGS = {"prefix": "prod-", "separator": "."}


def split(topic: str) -> Optional[Tuple[str, str]]:
    """(source alias, upstream topic) of a remote name."""
    prefix, separator = SETTINGS["prefix"], SETTINGS["separator"]
    if not topic.startswith(prefix):
        return None
    alias, sep, upstream = topic[len(prefix):].partition(separator)
    return (alias, upstream) if sep and upstream else None


class ReplicationPolicy(exports.ReplicationPolicy):
    def configure(self, config: List[Tuple[str, str]]) -> None:
        for key, value in config:
            if key not in SETTINGS:
                raise Err(f"prefix-policy: unknown key `{key}`; known keys: {', '.join(SETTINGS)}")
            SETTINGS[key] = value
        if not SETTINGS["prefix"] or not SETTINGS["separator"]:
            raise Err("prefix-policy: `prefix` and `separator` must not be empty")

    # The naming scheme: change these three.

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{SETTINGS['prefix']}{source_alias}{SETTINGS['separator']}{topic}"

    def topic_source(self, topic: str) -> Optional[str]:
        found = split(topic)
        return found[0] if found else None

    def upstream_topic(self, topic: str) -> Optional[str]:
        found = split(topic)
        return found[1] if found else None

    # MM2's rules for the rest.

    def original_topic(self, topic: str) -> str:
        for _ in range(len(topic) + 1):
            upstream = self.upstream_topic(topic)
            if upstream is None or upstream == topic:
                break
            topic = upstream
        return topic

    def heartbeats_topic(self) -> str:
        return "heartbeats"

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        return f"mm2-offset-syncs.{cluster_alias}.internal"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        return f"{cluster_alias}.checkpoints.internal"

    def is_heartbeats_topic(self, topic: str) -> bool:
        return self.original_topic(topic) == "heartbeats"

    def is_checkpoints_topic(self, topic: str) -> bool:
        return topic.endswith(".checkpoints.internal")

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(".internal") and (
            topic.startswith("mm2") or self.is_checkpoints_topic(topic)
        )

    def is_internal_topic(self, topic: str) -> bool:
        return (
            topic.startswith("__")
            or topic.startswith(".")
            or topic.endswith(".internal")
            or topic.endswith("-internal")
            or self.is_mm2_internal_topic(topic)
        )

    def format_remote_topics(self, source_alias: str, topics: List[str]) -> List[str]:
        return [self.format_remote_topic(source_alias, t) for t in topics]
