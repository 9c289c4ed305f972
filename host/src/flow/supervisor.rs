//! Runs one flow: creates its internal topics, runs discovery every
//! `refresh_topics_interval` (the first pass at once), applies the plan to the target,
//! hands the partition set to the replicator (restarting it from stored progress after
//! a failure) and emits heartbeats, until shutdown.

use super::FlowStats;
use super::checkpointer::{self, CheckpointContext, CheckpointSettings, SharedStore};
use super::discovery::{self, Action, Decision, Problem};
use super::replicate::{self, Assignment, ReplicatorSettings};
use crate::config::validate::ResolvedFlow;
use crate::config::{StartOffset, SyncsLocation};
use crate::kafka::{Cluster, KafkaError, TopicSpec};
use crate::plugin::PluginError;
use crate::policy::{
    ConfigPropertyFilter, GroupFilter, ReplicationPolicy, RoleHandle, TopicFilter,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Why a flow could not start.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    /// A Kafka client could not be created.
    #[error("flow {flow}: {source}")]
    Kafka {
        /// The flow.
        flow: String,
        /// The error.
        source: KafkaError,
    },
    /// The replication policy failed to name the internal topics.
    #[error("flow {flow}: {source}")]
    Plugin {
        /// The flow.
        flow: String,
        /// The error.
        source: PluginError,
    },
}

/// The flow's own consumer group on the source, holding replication progress.
pub fn progress_group(source: &str, target: &str) -> String {
    format!("kmirror.{source}.{target}")
}

struct Roles {
    filter: Arc<dyn TopicFilter>,
    groups: Arc<dyn GroupFilter>,
    policy: Arc<dyn ReplicationPolicy>,
    configs: Arc<dyn ConfigPropertyFilter>,
}

fn roles(flow: &ResolvedFlow) -> Option<Roles> {
    match (
        &flow.topic_filter.handle,
        &flow.group_filter.handle,
        &flow.replication_policy.handle,
        &flow.config_property_filter.handle,
    ) {
        (
            RoleHandle::TopicFilter(f),
            RoleHandle::GroupFilter(g),
            RoleHandle::ReplicationPolicy(p),
            RoleHandle::ConfigPropertyFilter(c),
        ) => Some(Roles {
            filter: f.clone(),
            groups: g.clone(),
            policy: p.clone(),
            configs: c.clone(),
        }),
        _ => None,
    }
}

/// Retries `f` with backoff until it succeeds or `shutdown`; `None` on shutdown.
async fn retry<T, F, Fut>(
    what: &str,
    stats: &FlowStats,
    shutdown: &CancellationToken,
    mut f: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, KafkaError>>,
{
    let mut backoff = Duration::from_millis(200);
    loop {
        match f().await {
            Ok(v) => return Some(v),
            Err(e) => stats.note_error(what, &e.to_string()),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

/// Runs `flow` until `shutdown`.
pub async fn run(
    flow: Arc<ResolvedFlow>,
    stats: Arc<FlowStats>,
    shutdown: CancellationToken,
) -> Result<(), FlowError> {
    let name = flow.name.clone();
    let kafka = |source| FlowError::Kafka {
        flow: name.clone(),
        source,
    };
    let source = Cluster::new(&flow.source).map_err(kafka)?;
    let target = Cluster::new(&flow.target).map_err(kafka)?;
    let syncs_cluster = match flow.settings.offset_syncs_topic_location {
        SyncsLocation::Source => source.clone(),
        SyncsLocation::Target => target.clone(),
    };
    let Some(roles) = roles(&flow) else {
        unreachable!("config validation gives every slot its role")
    };
    let plugin = |source| FlowError::Plugin {
        flow: name.clone(),
        source,
    };
    let (policy, target_alias) = (roles.policy.clone(), flow.target.alias.clone());
    let source_alias = flow.source.alias.clone();
    let (syncs_topic, heartbeats_topic, checkpoints_topic) = super::plugin_call(move || {
        Ok((
            policy.offset_syncs_topic(&target_alias)?,
            policy.heartbeats_topic()?,
            policy.checkpoints_topic(&source_alias)?,
        ))
    })
    .await
    .map_err(plugin)?;
    let rf = flow.settings.replication_factor.unwrap_or(-1);

    tracing::info!(flow = %name, offset_syncs = %syncs_topic, heartbeats = %heartbeats_topic, "starting flow");
    let syncs_ready = retry("create the offset-syncs topic", &stats, &shutdown, || {
        syncs_cluster.ensure_internal_topic(&syncs_topic, rf)
    });
    if syncs_ready.await.is_none() {
        return Ok(());
    }

    let (assign_tx, assign_rx) = watch::channel(Assignment::new());
    let checkpoints = flow.settings.emit_checkpoints_enabled.then(|| {
        let shared = Arc::new(SharedStore::default());
        let reader = tokio::spawn(checkpointer::read_syncs(
            syncs_cluster.clone(),
            syncs_topic.clone(),
            shared.clone(),
            stats.clone(),
            shutdown.clone(),
        ));
        let settings = CheckpointSettings {
            source_alias: flow.source.alias.clone(),
            target_alias: flow.target.alias.clone(),
            checkpoints_topic: checkpoints_topic.clone(),
            emit_interval: flow.settings.emit_checkpoints_interval,
            refresh_groups_interval: flow.settings.refresh_groups_interval,
            sync_group_offsets: flow
                .settings
                .sync_group_offsets
                .then_some(flow.settings.sync_group_offsets_interval),
        };
        let (source, target, stats, shutdown) = (
            source.clone(),
            target.clone(),
            stats.clone(),
            shutdown.clone(),
        );
        let (groups, policy, assignment) = (
            roles.groups.clone(),
            roles.policy.clone(),
            assign_rx.clone(),
        );
        let emitter = tokio::spawn(async move {
            let ready = retry("create the checkpoints topic", &stats, &shutdown, || {
                target.ensure_internal_topic(&checkpoints_topic, rf)
            });
            if ready.await.is_some() {
                let ctx = CheckpointContext {
                    source,
                    target,
                    settings,
                    groups,
                    policy,
                    shared,
                    assignment,
                    stats,
                };
                checkpointer::run(ctx, shutdown).await;
            }
        });
        (reader, emitter)
    });
    let settings = ReplicatorSettings {
        flow: name.clone(),
        progress_group: progress_group(&flow.source.alias, &flow.target.alias),
        syncs_topic,
        offset_lag_max: flow.settings.offset_lag_max,
        flush_interval: flow.settings.offset_flush_interval,
        start_offset: match flow.settings.start_offset {
            StartOffset::Earliest => "earliest",
            StartOffset::Latest => "latest",
        },
        max_in_flight: 10_000,
    };
    let replicator = {
        let (source, target, syncs_cluster) =
            (source.clone(), target.clone(), syncs_cluster.clone());
        let (shutdown, stats) = (shutdown.clone(), stats.clone());
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(500);
            loop {
                let run = replicate::run(
                    &source,
                    &target,
                    &syncs_cluster,
                    settings.clone(),
                    assign_rx.clone(),
                    shutdown.clone(),
                    stats.clone(),
                );
                match run.await {
                    Ok(()) => return,
                    Err(e) => {
                        tracing::error!(flow = %settings.flow, error = %e, "replication stopped; restarting from stored progress")
                    }
                }
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        })
    };
    let heartbeats = flow.settings.emit_heartbeats_enabled.then(|| {
        let (target, shutdown, stats) = (target.clone(), shutdown.clone(), stats.clone());
        let (alias, interval) = (
            flow.source.alias.clone(),
            flow.settings.emit_heartbeats_interval,
        );
        tokio::spawn(async move {
            let ready = retry("create the heartbeats topic", &stats, &shutdown, || {
                target.ensure_internal_topic(&heartbeats_topic, rf)
            });
            if ready.await.is_some() {
                super::heartbeat::run(
                    &target,
                    &alias,
                    &heartbeats_topic,
                    interval,
                    shutdown,
                    stats,
                )
                .await;
            }
        })
    });

    let mut discovery = Discovery {
        flow: flow.clone(),
        roles,
        source,
        target,
        stats: stats.clone(),
        decisions: BTreeMap::new(),
        mirrored: BTreeMap::new(),
    };
    loop {
        if let Some(assignment) = discovery.pass().await {
            assign_tx.send_if_modified(|current| {
                let changed = *current != assignment;
                *current = assignment;
                changed
            });
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(flow.settings.refresh_topics_interval) => {}
        }
    }
    let _ = replicator.await;
    if let Some((reader, emitter)) = checkpoints {
        let _ = reader.await;
        let _ = emitter.await;
    }
    if let Some(h) = heartbeats {
        let _ = h.await;
    }
    stats.update(|s| s.state = "stopped");
    tracing::info!(flow = %name, records = stats.records.load(std::sync::atomic::Ordering::Relaxed), "flow stopped");
    Ok(())
}

struct Discovery {
    flow: Arc<ResolvedFlow>,
    roles: Roles,
    source: Cluster,
    target: Cluster,
    stats: Arc<FlowStats>,
    /// Cached per name; a plugin is asked about each name once.
    decisions: BTreeMap<String, Decision>,
    /// What the last pass mirrored.
    mirrored: BTreeMap<String, (String, i32)>,
}

impl Discovery {
    /// One pass; `None` when a cluster could not be listed (the last assignment stays).
    async fn pass(&mut self) -> Option<Assignment> {
        let source = match self.source.topics().await {
            Ok(s) => s,
            Err(e) => return self.failed("list source topics", &e.to_string()),
        };
        let mut target = match self.target.topics().await {
            Ok(t) => t,
            Err(e) => return self.failed("list target topics", &e.to_string()),
        };
        let new: Vec<String> = source
            .keys()
            .filter(|t| !self.decisions.contains_key(*t))
            .cloned()
            .collect();
        if !new.is_empty() {
            let (filter, policy) = (self.roles.filter.clone(), self.roles.policy.clone());
            let (src, tgt) = (
                self.flow.source.alias.clone(),
                self.flow.target.alias.clone(),
            );
            // Fail safe: an undecided topic is not mirrored; it is asked again next pass.
            match super::plugin_call(move || {
                discovery::decide_all(&new, &*filter, &*policy, &src, &tgt)
            })
            .await
            {
                Ok(decided) => self.decisions.extend(decided),
                Err(e) => self
                    .stats
                    .note_error("topic filter / replication policy", &e.to_string()),
            }
        }
        let mut plan = discovery::plan(&source, &target, &self.decisions, &self.mirrored);
        self.apply(&mut plan, &mut target).await;
        for problem in &plan.problems {
            self.report(problem);
        }
        let problems: Vec<String> = plan.problems.iter().map(describe).collect();
        self.stats.update(|s| {
            s.state = "running";
            s.mirrored = plan.mirror.clone();
            s.problems = problems;
        });
        if plan.mirror != self.mirrored {
            let names: Vec<String> = plan
                .mirror
                .iter()
                .map(|(s, (t, n))| format!("{s}->{t}[{n}]"))
                .collect();
            tracing::info!(flow = %self.flow.name, topics = plan.mirror.len(), mirroring = %names.join(", "), "mirrored topics changed");
        }
        self.mirrored = plan.mirror.clone();
        Some(plan.mirror)
    }

    fn failed<T>(&self, what: &str, message: &str) -> Option<T> {
        self.stats.note_error(what, message);
        None
    }

    /// Creates and grows target topics; what could not be done is not replicated.
    async fn apply(&self, plan: &mut discovery::Plan, target: &mut discovery::Snapshot) {
        let mut specs = Vec::new();
        for action in &plan.actions {
            match action {
                Action::CreateTopic {
                    source,
                    target: name,
                    partitions,
                } => {
                    let configs = self.configs_for(source).await;
                    let rf = self.flow.settings.replication_factor.unwrap_or(-1);
                    specs.push(TopicSpec {
                        name: name.clone(),
                        partitions: *partitions,
                        replication_factor: rf,
                        configs,
                    });
                }
                Action::AddPartitions {
                    source,
                    target: name,
                    from,
                    to,
                } => match self.target.add_partitions(name, *to).await {
                    Ok(()) => {
                        tracing::info!(flow = %self.flow.name, topic = %name, from, to, "added partitions to the target");
                        target.insert(name.clone(), *to);
                    }
                    Err(e) => {
                        self.stats.note_error("add partitions", &e.to_string());
                        // Replicate the partitions the target has.
                        if let Some(m) = plan.mirror.get_mut(source) {
                            m.1 = *from;
                        }
                    }
                },
            }
        }
        if specs.is_empty() {
            return;
        }
        for (name, result) in self.target.create_topics(&specs).await {
            match result {
                Ok(()) => {
                    tracing::info!(flow = %self.flow.name, topic = %name, "created target topic")
                }
                Err(e) => {
                    self.stats.note_error("create topic", &e.to_string());
                    plan.mirror.retain(|_, (t, _)| *t != name);
                }
            }
        }
    }

    /// The source topic's configs that pass the config-property filter.
    async fn configs_for(&self, topic: &str) -> Vec<(String, String)> {
        if !self.flow.settings.sync_topic_configs {
            return Vec::new();
        }
        let entries = match self.source.topic_configs(topic).await {
            Ok(e) => e,
            Err(e) => {
                self.stats
                    .note_error("describe topic configs", &e.to_string());
                return Vec::new();
            }
        };
        let filter = self.roles.configs.clone();
        let kept = super::plugin_call(move || {
            let mut kept = Vec::new();
            for e in entries {
                if filter.should_replicate_config_property(&e.name)?
                    && (!e.is_default || filter.should_replicate_source_default(&e.name)?)
                {
                    kept.push((e.name, e.value));
                }
            }
            Ok(kept)
        });
        kept.await.unwrap_or_else(|e| {
            self.stats
                .note_error("config-property filter", &e.to_string());
            Vec::new()
        })
    }

    fn report(&self, problem: &Problem) {
        if !self.stats.first_time(&format!("{problem:?}")) {
            return;
        }
        let text = describe(problem);
        match problem {
            Problem::Collision { .. } => tracing::error!(flow = %self.flow.name, "{text}"),
            _ => tracing::warn!(flow = %self.flow.name, "{text}"),
        }
    }
}

/// A problem in words, for logs and `/status`.
pub fn describe(problem: &Problem) -> String {
    match problem {
        Problem::Collision { target, sources } => {
            format!(
                "source topics {} all map to target topic {target}; none of them is mirrored",
                sources.join(", ")
            )
        }
        Problem::SourceVanished { source, target } => {
            format!("source topic {source} vanished; target topic {target} is kept")
        }
        Problem::SourceShrank { source, from, to } => {
            format!(
                "source topic {source} shrank from {from} to {to} partitions; the target keeps its partitions"
            )
        }
        Problem::TargetLarger {
            target,
            source_partitions,
            target_partitions,
        } => format!(
            "target topic {target} has {target_partitions} partitions, more than the source's {source_partitions}"
        ),
    }
}
