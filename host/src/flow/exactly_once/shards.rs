//! How an exactly-once flow's partitions are spread over its shards. A shard is the unit
//! of ownership and of fencing: it has one transactional id, fixed for the flow's life, so
//! whichever instance takes a shard over calls `init_transactions` with the id the
//! previous owner used, which aborts that owner's open transaction and fences it for good
//! (MM2 does the same per task). The mapping of a partition to its shard depends only on
//! the source topic, the partition and the shard count — never on which instances run —
//! so every instance agrees on it without talking.

use crate::flow::Routes;

/// The shard of `partition` of source `topic`, out of `shards` (FNV-1a of the topic, then
/// the partition: a topic's partitions are spread round the shards).
pub fn shard_of(topic: &str, partition: i32, shards: u32) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in topic.bytes() {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    (hash.wrapping_add(partition as u32)) % shards.max(1)
}

/// The transactional id of `shard` of the flow `source` -> `target`.
pub fn transactional_id(source: &str, target: &str, shard: u32) -> String {
    format!("kmirror.{source}.{target}.{shard}")
}

/// The shards topic of the flow (on the target): as many partitions as the flow has
/// shards; the shards group's members are assigned its partitions, each one a shard.
pub fn shards_topic(source: &str) -> String {
    format!("kmirror-shards.{source}.internal")
}

/// The group sharing the shards (on the target).
pub fn shards_group(source: &str, target: &str) -> String {
    format!("{}.shards", crate::flow::progress_group(source, target))
}

/// One routed partition of a shard: the source topic, the partition, the target topic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ShardPartition {
    /// The source topic.
    pub source: String,
    /// The partition (the same number on both sides).
    pub partition: i32,
    /// The target topic.
    pub target: String,
}

/// The routed partitions of `shard` (routes with no partition yet — the target topic is
/// still to be created — have none).
pub fn partitions_of(routes: &Routes, shard: u32, shards: u32) -> Vec<ShardPartition> {
    let mut out = Vec::new();
    for (topic, route) in routes {
        for partition in 0..route.partitions {
            if shard_of(topic, partition, shards) == shard {
                out.push(ShardPartition {
                    source: topic.clone(),
                    partition,
                    target: route.target.clone(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::Route;

    #[test]
    fn every_partition_has_exactly_one_shard_and_the_shards_share_them() {
        let mut routes = Routes::new();
        routes.insert("orders".into(), Route::new("primary.orders", 12));
        routes.insert("events".into(), Route::new("primary.events", 5));
        routes.insert("pending".into(), Route::new("primary.pending", 0));
        let shards = 4;
        let all: Vec<Vec<ShardPartition>> = (0..shards)
            .map(|s| partitions_of(&routes, s, shards))
            .collect();
        let total: usize = all.iter().map(Vec::len).sum();
        assert_eq!(
            total, 17,
            "every routed partition once, none of a topic not created yet"
        );
        let mut seen = std::collections::BTreeSet::new();
        for p in all.iter().flatten() {
            assert!(seen.insert((p.source.clone(), p.partition)), "{p:?} twice");
        }
        // A topic's consecutive partitions land on consecutive shards.
        for s in &all {
            assert!(!s.is_empty(), "no shard is left empty: {all:?}");
        }
        let o: Vec<u32> = (0..4).map(|p| shard_of("orders", p, shards)).collect();
        let distinct: std::collections::BTreeSet<_> = o.iter().collect();
        assert_eq!(distinct.len(), 4, "{o:?}");
    }

    #[test]
    fn the_mapping_is_fixed_for_a_given_shard_count() {
        // Instances agree without talking, across versions: pinned values.
        assert_eq!(shard_of("orders", 0, 8), shard_of("orders", 0, 8));
        assert_eq!(shard_of("orders", 3, 1), 0);
        let pinned: Vec<u32> = (0..4).map(|p| shard_of("orders", p, 8)).collect();
        let fnv = 0x811c_9dc5u32;
        let mut h = fnv;
        for b in b"orders" {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
        let expect: Vec<u32> = (0..4).map(|p| h.wrapping_add(p) % 8).collect();
        assert_eq!(pinned, expect);
        assert_eq!(
            transactional_id("primary", "backup", 3),
            "kmirror.primary.backup.3"
        );
        assert_eq!(shards_topic("primary"), "kmirror-shards.primary.internal");
        assert_eq!(
            shards_group("primary", "backup"),
            "kmirror.primary.backup.shards"
        );
    }
}
