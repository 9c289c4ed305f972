//! What `kmirror failover` reads from both clusters: per chosen partition the source's end
//! and the flow's stored progress, the consumer groups and their offsets, the offset syncs,
//! the target's ends and groups, and the topic ACLs — and from them each group's readiness
//! (`flow::cutover::readiness`).

use crate::config::ResolvedFlow;
use crate::flow::checkpoints::read_checkpoints;
use crate::flow::cutover::control::ControlState;
use crate::flow::cutover::readiness::{
    self, GroupReadiness, PartitionReadiness, Placement, ReadAccess,
};
use crate::flow::offset_syncs::store::OffsetSyncStore;
use crate::flow::plugins::{FlowPlugins, InternalTopics};
use crate::flow::{OWN_GROUP_PREFIX, Routes, progress_group};
use crate::kafka::acls::AclBinding;
use crate::kafka::{Cluster, Committed};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// (source topic, partition).
pub(super) type Tp = (String, i32);

/// The flow as the failover works on it.
pub(super) struct Opened {
    pub flow: ResolvedFlow,
    pub source: Cluster,
    pub target: Cluster,
    /// The chosen topics' routes.
    pub routes: Routes,
    pub internal: InternalTopics,
    pub plugins: FlowPlugins,
    pub control_topic: String,
}

impl Opened {
    /// Every chosen partition, as (source topic, partition).
    pub fn partitions(&self) -> Vec<Tp> {
        self.routes
            .iter()
            .flat_map(|(t, r)| (0..r.partitions).map(move |p| (t.clone(), p)))
            .collect()
    }

    /// The source topic a target topic mirrors.
    pub fn source_of(&self, target_topic: &str) -> Option<&str> {
        self.routes
            .iter()
            .find(|(_, r)| r.target == target_topic)
            .map(|(s, _)| s.as_str())
    }
}

/// Per chosen partition: the source's end and the flow's stored progress (what is on the
/// target: the next source offset to mirror).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Position {
    pub end: Option<i64>,
    pub mirrored: Option<i64>,
}

/// Reads the source's ends and the flow's stored progress of the chosen partitions. The
/// progress is in the flow's group on the source; an exactly-once flow's is on the target
/// (keyed by the target topic), with a copy on the source: the larger counts.
pub(super) async fn positions(o: &Opened) -> Result<BTreeMap<Tp, Position>, String> {
    let partitions = o.partitions();
    let group = progress_group(&o.source.alias, &o.target.alias);
    let client = o.source.group_client(&group).map_err(|e| e.to_string())?;
    let ends = o
        .source
        .end_offsets(&client, &partitions)
        .await
        .map_err(|e| e.to_string())?;
    let stored = o
        .source
        .committed(&client, &group, &partitions)
        .await
        .map_err(|e| e.to_string())?;
    let mut out: BTreeMap<Tp, Position> = partitions
        .iter()
        .map(|tp| (tp.clone(), Position::default()))
        .collect();
    for (tp, end) in ends {
        if let Some(p) = out.get_mut(&tp) {
            p.end = Some(end);
        }
    }
    for c in stored {
        if let Some(p) = out.get_mut(&(c.topic, c.partition)) {
            p.mirrored = Some(c.offset);
        }
    }
    if o.flow.settings.exactly_once.is_some() {
        let client = o.target.group_client(&group).map_err(|e| e.to_string())?;
        let on_target: Vec<Tp> = partitions
            .iter()
            .filter_map(|(t, p)| Some((o.routes.get(t)?.target.clone(), *p)))
            .collect();
        let stored = o
            .target
            .committed(&client, &group, &on_target)
            .await
            .map_err(|e| e.to_string())?;
        for c in stored {
            let Some(source) = o.source_of(&c.topic) else {
                continue;
            };
            if let Some(p) = out.get_mut(&(source.to_string(), c.partition)) {
                p.mirrored = Some(p.mirrored.map_or(c.offset, |m| m.max(c.offset)));
            }
        }
    }
    Ok(out)
}

/// The records of a source range that are not on the target: how many, and the oldest one's
/// timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tail {
    pub records: i64,
    pub oldest_ms: Option<i64>,
}

/// How long probing tails may take in all; partitions left are counted by their offsets.
const PROBE_BUDGET: Duration = Duration::from_secs(10);

/// The consumer [`tails`] reads with (`read_committed`, as the mirror reads; the ends
/// [`positions`] gives are the last stable offsets), or `None` when none can be made.
pub(super) fn tail_reader(source: &Cluster) -> Option<StreamConsumer> {
    source
        .consumer(
            &format!("{OWN_GROUP_PREFIX}failover"),
            // A range below the log start (retention) is an error, counted by its
            // offsets, never a jump to the end that would count it empty.
            &[
                ("enable.partition.eof", "true"),
                ("auto.offset.reset", "error"),
            ],
        )
        .ok()
}

/// Reads each range [from, end) of the source (`read_committed`): the records there (a
/// range of transaction markers or aborted records holds none) and the oldest one's
/// timestamp. Past [`PROBE_BUDGET`] a range counts as `end - from` records of unknown age.
pub(super) async fn tails(
    reader: Option<&StreamConsumer>,
    ranges: &[(Tp, i64, i64)],
) -> BTreeMap<(Tp, i64), Tail> {
    let mut out = BTreeMap::new();
    let started = Instant::now();
    for (tp, from, end) in ranges {
        let counted = Tail {
            records: (end - from).max(0),
            oldest_ms: None,
        };
        let tail = match reader {
            Some(r) if from < end && started.elapsed() < PROBE_BUDGET => {
                let left = PROBE_BUDGET.saturating_sub(started.elapsed());
                probe(r, tp, *from, *end, left).await.unwrap_or(counted)
            }
            _ => counted,
        };
        out.insert((tp.clone(), *from), tail);
    }
    out
}

async fn probe(
    reader: &StreamConsumer,
    (topic, partition): &Tp,
    from: i64,
    end: i64,
    left: Duration,
) -> Option<Tail> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, *partition, Offset::Offset(from))
        .ok()?;
    reader.assign(&tpl).ok()?;
    let deadline = tokio::time::Instant::now() + left.min(Duration::from_secs(3));
    let mut tail = Tail {
        records: 0,
        oldest_ms: None,
    };
    loop {
        match tokio::time::timeout_at(deadline, reader.recv()).await {
            Err(_) => return None,
            Ok(Err(rdkafka::error::KafkaError::PartitionEOF(p))) if p == *partition => {
                return Some(tail);
            }
            Ok(Err(_)) => return None,
            Ok(Ok(m)) => {
                if m.topic() != topic || m.partition() != *partition || m.offset() < from {
                    continue;
                }
                if m.offset() >= end {
                    return Some(tail);
                }
                tail.records += 1;
                if tail.oldest_ms.is_none() {
                    tail.oldest_ms = m.timestamp().to_millis();
                }
                if m.offset() + 1 >= end {
                    return Some(tail);
                }
            }
        }
    }
}

/// Each group's offsets on the chosen partitions: the groups asked for, or every group on
/// the source the flow's group filter accepts that committed on one. `Err` when the source
/// cannot be read.
pub(super) async fn source_offsets(
    o: &Opened,
    asked: &[String],
) -> Result<BTreeMap<String, Vec<Committed>>, String> {
    let names: Vec<String> = if asked.is_empty() {
        let listed = o.source.groups().await.map_err(|e| e.to_string())?;
        let names: Vec<String> = listed
            .into_iter()
            .map(|g| g.name)
            .filter(|g| !g.starts_with(OWN_GROUP_PREFIX))
            .collect();
        o.plugins
            .accept_groups(names)
            .await
            .map_err(|e| format!("the group filter: {e}"))?
    } else {
        asked.to_vec()
    };
    let offsets = o
        .source
        .committed_of_groups(&names)
        .await
        .map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for name in names {
        let committed = match offsets.get(&name) {
            Some(Ok(c)) => c.clone(),
            Some(Err(e)) => return Err(format!("group {name}: {e}")),
            None => Vec::new(),
        };
        let chosen: Vec<Committed> = committed
            .into_iter()
            .filter(|c| {
                o.routes
                    .get(&c.topic)
                    .is_some_and(|r| c.partition < r.partitions)
            })
            .collect();
        if !chosen.is_empty() || !asked.is_empty() {
            out.insert(name, chosen);
        }
    }
    Ok(out)
}

/// Each group's offsets from its last checkpoints (when the source cannot be read): the
/// source offsets they were made from, on the chosen partitions.
pub(super) async fn checkpointed_offsets(
    o: &Opened,
    asked: &[String],
) -> Result<BTreeMap<String, Vec<Committed>>, String> {
    let read = read_checkpoints(&o.target, &o.internal.checkpoints, Duration::from_secs(30))
        .await
        .map_err(|e| e.to_string())?;
    if !read.complete {
        return Err(format!(
            "{} on cluster {} not read to its end within 30s",
            o.internal.checkpoints, o.target.alias
        ));
    }
    let mut out: BTreeMap<String, Vec<Committed>> = BTreeMap::new();
    for c in read.last.into_values() {
        if !asked.is_empty() && !asked.contains(&c.group) {
            continue;
        }
        let Some(source) = o.source_of(&c.topic) else {
            continue;
        };
        out.entry(c.group.clone()).or_default().push(Committed {
            topic: source.to_string(),
            partition: c.partition,
            offset: c.upstream,
            metadata: c.metadata,
        });
    }
    for g in asked {
        out.entry(g.clone()).or_default();
    }
    Ok(out)
}

/// The topic ACLs of a cluster, or why there are none to check with.
pub(super) async fn acls(cluster: &Cluster) -> Result<Vec<AclBinding>, String> {
    cluster.topic_acls().await.map_err(|e| {
        if e.is_not_served() {
            format!("cluster {} serves no ACLs", cluster.alias)
        } else {
            e.to_string()
        }
    })
}

/// What the readiness of the groups is computed from.
pub(super) struct Facts<'a> {
    pub opened: &'a Opened,
    pub store: &'a OffsetSyncStore,
    /// Per chosen partition: where the source and the mirror are.
    pub positions: &'a BTreeMap<Tp, Position>,
    /// The unmirrored records after each group's position, by (partition, from).
    pub tails: &'a BTreeMap<(Tp, i64), Tail>,
    /// The target partitions' ends, by (target topic, partition).
    pub target_ends: &'a BTreeMap<Tp, i64>,
    pub source_acls: &'a Result<Vec<AclBinding>, String>,
    pub target_acls: &'a Result<Vec<AclBinding>, String>,
    pub control: &'a ControlState,
    pub now_ms: i64,
}

/// Where the tail of a group's partition starts: the later of its offset and the mirror's.
pub(super) fn tail_start(g: i64, position: &Position) -> Option<i64> {
    position.mirrored.map(|m| g.max(m))
}

/// One group's readiness; `active` its state on the target when it has members there.
pub(super) fn group_readiness(
    f: &Facts<'_>,
    group: &str,
    offsets: &[Committed],
    active: Option<String>,
) -> GroupReadiness {
    let mut partitions: Vec<PartitionReadiness> = offsets
        .iter()
        .filter_map(|c| {
            let route = f.opened.routes.get(&c.topic)?;
            let tp = (c.topic.clone(), c.partition);
            let position = f.positions.get(&tp).copied().unwrap_or_default();
            let bound = f
                .target_ends
                .get(&(route.target.clone(), c.partition))
                .copied();
            let placement = readiness::place(f.store, &c.topic, c.partition, c.offset, bound);
            let tail = tail_start(c.offset, &position)
                .and_then(|from| f.tails.get(&(tp.clone(), from)))
                .map(|t| (t.records, t.oldest_ms))
                .or_else(|| {
                    readiness::tail(c.offset, position.mirrored, position.end).map(|r| (r, None))
                });
            let access = match (f.source_acls, f.target_acls) {
                (Ok(s), Ok(t)) => readiness::read_access(s, t, &c.topic, &route.target),
                (Err(why), _) | (_, Err(why)) => ReadAccess::Unknown { why: why.clone() },
            };
            Some(PartitionReadiness {
                topic: c.topic.clone(),
                target_topic: route.target.clone(),
                partition: c.partition,
                source_offset: c.offset,
                placement,
                tail: tail.map(|t| t.0),
                tail_seconds: tail
                    .and_then(|t| t.1)
                    .map(|oldest| ((f.now_ms - oldest) / 1000).max(0)),
                access,
            })
        })
        .collect();
    partitions.sort_by(|a, b| (&a.target_topic, a.partition).cmp(&(&b.target_topic, b.partition)));
    GroupReadiness {
        group: group.to_string(),
        active_on_target: active,
        failed_over: f.control.groups.contains_key(group),
        partitions,
    }
}

/// The target offsets a group's failover commits: its placed partitions, as checkpoints.
pub(super) fn checkpoints_of(
    g: &GroupReadiness,
    metadata: &BTreeMap<Tp, String>,
) -> Vec<crate::formats::Checkpoint> {
    g.partitions
        .iter()
        .filter_map(|p| {
            let offset = match p.placement {
                Placement::Exact { offset } | Placement::Approximate { offset, .. } => offset,
                Placement::Unplaced => return None,
            };
            Some(crate::formats::Checkpoint {
                group: g.group.clone(),
                topic: p.target_topic.clone(),
                partition: p.partition,
                upstream: p.source_offset,
                downstream: offset,
                metadata: metadata
                    .get(&(p.topic.clone(), p.partition))
                    .cloned()
                    .unwrap_or_default(),
            })
        })
        .collect()
}
