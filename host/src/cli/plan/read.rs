//! Reading a flow's plan from both clusters as they are now: topics listed, decided with
//! the flow's plugins, groups and topic ACLs described — nothing is written anywhere.

use super::rows::{self, AclRows, FlowPlan, GroupRow, TopicRow};
use crate::config::ResolvedFlow;
use crate::flow::discovery::rules;
use crate::flow::plugins::FlowPlugins;
use crate::flow::{OWN_GROUP_PREFIX, Routes, acls};
use crate::kafka::{Cluster, TopicPartitions};

/// The topics both clusters list now, read-only.
struct Listing {
    source: TopicPartitions,
    target: TopicPartitions,
}

async fn list(source: &Cluster, target: &Cluster) -> Result<Listing, String> {
    let (s, t) = tokio::join!(source.topics(), target.topics());
    Ok(Listing {
        source: s.map_err(|e| e.to_string())?,
        target: t.map_err(|e| e.to_string())?,
    })
}

/// Decides every listed source topic with `flow`'s plugins and plans against the target.
async fn decide(flow: &ResolvedFlow, listing: &Listing) -> Result<(Vec<TopicRow>, Routes), String> {
    let plugins = FlowPlugins::for_flow(flow);
    let internal = plugins.internal_topics().await.map_err(|e| e.to_string())?;
    let plugins = plugins.reserving(&internal);
    let topics: Vec<String> = listing.source.keys().cloned().collect();
    let decided = plugins
        .batch(&topics, rules::decide_with)
        .await
        .map_err(|e| e.to_string())?;
    let plan = rules::plan(
        &listing.source,
        &listing.target,
        &decided.decisions,
        &Routes::new(),
    );
    Ok((
        rows::rows(&listing.source, &listing.target, &decided, &plan),
        plan.mirror,
    ))
}

/// The topic ACLs the flow's ACL sync would change, with its rules and plugins (read-only:
/// DescribeAcls on both clusters).
async fn acl_rows(
    flow: &ResolvedFlow,
    source: &Cluster,
    target: &Cluster,
    mirrored: &Routes,
    delete: bool,
) -> AclRows {
    let note = |e: &dyn std::fmt::Display| AclRows {
        note: Some(e.to_string()),
        ..AclRows::default()
    };
    let (s, t) = match tokio::join!(source.topic_acls(), target.topic_acls()) {
        (Ok(s), Ok(t)) => (s, t),
        (Err(e), _) | (_, Err(e)) => return note(&e),
    };
    let plugins = FlowPlugins::for_flow(flow);
    let plugins = match plugins.internal_topics().await {
        Ok(internal) => plugins.reserving(&internal),
        Err(e) => return note(&e),
    };
    // Deletion goes only as far as the flow's ledger on the target says it created.
    let synced = if delete {
        use crate::flow::acls::clusters::AclClusters;
        let live = crate::flow::discovery::clusters::Live {
            source: source.clone(),
            target: target.clone(),
        };
        match live.synced().await {
            Ok(fold) => Some(fold.synced),
            Err(e) => return note(&format!("the ACL ledger: {e}")),
        }
    } else {
        None
    };
    match acls::task::planned(&plugins, &s, &t, mirrored, synced.as_ref()).await {
        Ok(p) => AclRows {
            create: p.plan.create,
            delete: p.plan.delete,
            note: p
                .failed
                .first()
                .map(|(topic, e)| format!("topic {topic}: {e}")),
        },
        Err(e) => note(&e),
    }
}

/// The groups the flow would checkpoint: accepted by the group filter, with committed
/// offsets on mirrored partitions.
async fn groups(
    flow: &ResolvedFlow,
    source: &Cluster,
    mirrored: &Routes,
    out: &mut FlowPlan,
) -> Result<(), String> {
    let listed: Vec<String> = source
        .groups()
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|g| g.name)
        .filter(|n| !n.starts_with(OWN_GROUP_PREFIX))
        .collect();
    let plugins = FlowPlugins::for_flow(flow);
    let total = listed.len();
    let accepted = plugins
        .accept_groups(listed)
        .await
        .map_err(|e| e.to_string())?;
    out.filtered_groups = total - accepted.len();
    let offsets = source
        .committed_of_groups(&accepted)
        .await
        .map_err(|e| e.to_string())?;
    let mut checkpointed = Vec::new();
    for (group, committed) in offsets {
        match committed {
            Ok(c) => {
                let partitions = c
                    .iter()
                    .filter(|c| {
                        mirrored
                            .get(&c.topic)
                            .is_some_and(|r| c.partition < r.partitions)
                    })
                    .count();
                if partitions > 0 {
                    checkpointed.push(GroupRow { group, partitions });
                } else {
                    out.groups_without_offsets.push(group);
                }
            }
            Err(e) => out.errors.push(format!("group {group}: {e}")),
        }
    }
    out.checkpointed_groups = Some(checkpointed);
    Ok(())
}

/// A flow's plan (with what a reload to `candidate` would change); what could not be
/// read is in its errors.
pub async fn plan_flow(flow: &ResolvedFlow, candidate: Option<&ResolvedFlow>) -> FlowPlan {
    let mut out = FlowPlan {
        flow: flow.name.clone(),
        topics: Vec::new(),
        checkpointed_groups: None,
        groups_without_offsets: Vec::new(),
        filtered_groups: 0,
        errors: Vec::new(),
        acls: None,
        transforms: flow
            .slots
            .transforms
            .iter()
            .map(|(source, config)| {
                let pairs: Vec<String> = config
                    .entries()
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                (source.short_name(), pairs.join(", "))
            })
            .collect(),
        on_transform_error: format!("{:?}", flow.settings.on_transform_error).to_lowercase(),
        candidate: None,
    };
    let clusters = Cluster::new(&flow.source).and_then(|s| Ok((s, Cluster::new(&flow.target)?)));
    let (source, target) = match clusters {
        Ok(c) => c,
        Err(e) => {
            out.errors.push(e.to_string());
            return out;
        }
    };
    let listing = match list(&source, &target).await {
        Ok(l) => l,
        Err(e) => {
            out.errors.push(e);
            return out;
        }
    };
    let mirrored = match decide(flow, &listing).await {
        Ok((rows, mirrored)) => {
            out.topics = rows;
            mirrored
        }
        Err(e) => {
            out.errors.push(e);
            return out;
        }
    };
    if flow.settings.checkpoints.is_some()
        && let Err(e) = groups(flow, &source, &mirrored, &mut out).await
    {
        out.errors.push(e);
    }
    if let Some(acl) = flow.settings.sync_topic_acls {
        out.acls = Some(acl_rows(flow, &source, &target, &mirrored, acl.delete).await);
    }
    if let Some(candidate) = candidate {
        match decide(candidate, &listing).await {
            Ok((rows, _)) => out.candidate = Some(rows::changes(&out.topics, &rows)),
            Err(e) => out.errors.push(format!("with the candidate: {e}")),
        }
    }
    out
}
