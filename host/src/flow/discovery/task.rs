//! The discovery loop: lists both clusters at start and every `refresh_topics_interval`,
//! decides new source topics through the plugins (cached per name, so a plugin is asked
//! about each name once), applies the plan to the target and publishes the routes.

use super::rules::{self, Action, Decision, Plan, Problem, SkipReason, Snapshot};
use crate::flow::Routes;
use crate::flow::plugins::FlowPlugins;
use crate::flow::telemetry::{Counter, FlowTelemetry};
use crate::kafka::{Cluster, TopicSpec};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// What the discovery loop works with.
pub struct DiscoveryContext {
    /// The source cluster.
    pub source: Cluster,
    /// The target cluster.
    pub target: Cluster,
    /// The flow's plugins.
    pub plugins: FlowPlugins,
    /// How often to list.
    pub interval: Duration,
    /// Replication factor of created topics (`None`: the broker's default).
    pub replication_factor: Option<i32>,
    /// Whether created topics get the source's filtered configs.
    pub sync_topic_configs: bool,
    /// Counters and status.
    pub telemetry: Arc<FlowTelemetry>,
    /// The replication policy's name, for messages.
    pub policy_name: String,
    /// Whether this instance leads the flow (only the leader changes the target).
    pub leader: watch::Receiver<bool>,
}

/// Runs discovery until `shutdown`, publishing every change of the routes on `routes`.
pub async fn run(
    ctx: DiscoveryContext,
    routes: watch::Sender<Routes>,
    shutdown: CancellationToken,
) {
    let interval = ctx.interval;
    let generation = ctx.plugins.generation();
    let mut discovery = Discovery {
        ctx,
        decisions: BTreeMap::new(),
        undecided: BTreeMap::new(),
        mirrored: Routes::new(),
        generation,
    };
    loop {
        if let Some(next) = discovery.pass().await {
            routes.send_if_modified(|current| {
                let changed = *current != next;
                *current = next;
                changed
            });
        }
        discovery.ctx.telemetry.tick("discovery", interval);
        tokio::select! {
            _ = shutdown.cancelled() => {
                discovery.ctx.telemetry.loop_ended("discovery");
                return;
            }
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

/// How long a topic a plugin failed on waits before it is asked again.
const RETRY_UNDECIDED: Duration = Duration::from_secs(60);

struct Discovery {
    ctx: DiscoveryContext,
    /// Topics a plugin failed on: when to ask again, and the error.
    undecided: BTreeMap<String, (Instant, String)>,
    /// Cached per name; a plugin is asked about each name once.
    decisions: BTreeMap<String, Decision>,
    /// What the last pass mirrored.
    mirrored: Routes,
    /// The plugins' generation the decisions were made with.
    generation: u64,
}

impl Discovery {
    /// One pass; `None` when a cluster could not be listed (the last routes stay).
    async fn pass(&mut self) -> Option<Routes> {
        let telemetry = self.ctx.telemetry.clone();
        let (src, dst) = (&self.ctx.source, &self.ctx.target);
        let (source, target) = tokio::join!(src.topics(), dst.topics());
        let listed = |cluster: &Cluster, operation, r| match r {
            Ok(t) => {
                telemetry.reached(&cluster.alias);
                Some(t)
            }
            Err(e) => {
                telemetry.unreachable(&cluster.alias, &e);
                telemetry.note_error(operation, crate::kafka::KafkaError::kind(&e), &e);
                None
            }
        };
        let source = listed(src, "list source topics", source);
        let target = listed(dst, "list target topics", target);
        let (source, mut target) = (source?, target?);
        let generation = self.ctx.plugins.generation();
        if generation != self.generation {
            // The plugins were replaced: every topic is decided again by the new ones.
            tracing::info!(flow = %telemetry.flow, topics = self.decisions.len(), generation, "plugins replaced; deciding every topic again");
            self.decisions.clear();
            self.undecided.clear();
            self.generation = generation;
        }
        let now = Instant::now();
        self.undecided
            .retain(|t, (retry_at, _)| source.contains_key(t) && *retry_at > now);
        let new: Vec<String> = source
            .keys()
            .filter(|t| !self.decisions.contains_key(*t) && !self.undecided.contains_key(*t))
            .cloned()
            .collect();
        if !new.is_empty() {
            // Fail safe: an undecided topic is not mirrored; it is asked again later.
            match self.ctx.plugins.batch(&new, rules::decide_with).await {
                // Decided by plugins replaced meanwhile: decided again next pass.
                Ok(_) if self.ctx.plugins.generation() != self.generation => {}
                Ok(decided) => {
                    for (topic, e) in decided.failed {
                        telemetry.add(Counter::UndecidedTopics, 1);
                        telemetry.note_error("decide a topic", e.kind(), &e);
                        self.undecided
                            .insert(topic, (now + RETRY_UNDECIDED, e.to_string()));
                    }
                    for (topic, d) in &decided.decisions {
                        if matches!(d, Decision::Skip(SkipReason::InvalidName(_))) {
                            telemetry.add(Counter::RefusedNames, 1);
                            tracing::error!(flow = %telemetry.flow, topic = %topic, plugin = %self.ctx.policy_name, "the replication policy gave an unusable name; the topic is not mirrored");
                        }
                    }
                    self.decisions.extend(decided.decisions);
                }
                Err(e) => telemetry.note_error("topic filter / replication policy", e.kind(), &e),
            }
        }
        let mut plan = rules::plan(&source, &target, &self.decisions, &self.mirrored);
        if !*self.ctx.leader.borrow() {
            rules::without_changes(&mut plan);
        }
        for (topic, (_, error)) in &self.undecided {
            plan.problems.push(Problem::Undecided {
                source: topic.clone(),
                error: error.clone(),
            });
        }
        self.apply(&mut plan, &mut target).await;
        for problem in &plan.problems {
            self.report(problem);
        }
        let problems: Vec<String> = plan.problems.iter().map(rules::describe).collect();
        telemetry.update(|s| {
            s.state = "running";
            s.mirrored = plan.mirror.clone();
            s.problems = problems;
            s.last_discovery_ms = Some(crate::flow::telemetry::now_ms());
        });
        if plan.mirror != self.mirrored {
            let names: Vec<String> = plan
                .mirror
                .iter()
                .map(|(s, r)| format!("{s}->{}[{}]", r.target, r.partitions))
                .collect();
            tracing::info!(flow = %telemetry.flow, topics = plan.mirror.len(), mirroring = %names.join(", "), "mirrored topics changed");
        }
        self.mirrored = plan.mirror.clone();
        Some(plan.mirror)
    }

    /// Creates and grows target topics; what could not be done is not replicated.
    async fn apply(&self, plan: &mut Plan, target: &mut Snapshot) {
        let telemetry = &self.ctx.telemetry;
        let mut specs = Vec::new();
        for action in &plan.actions {
            match action {
                Action::CreateTopic {
                    source,
                    target: name,
                    partitions,
                } => specs.push(TopicSpec {
                    name: name.clone(),
                    partitions: *partitions,
                    replication_factor: self.ctx.replication_factor,
                    configs: self.configs_for(source).await,
                }),
                Action::AddPartitions {
                    source,
                    target: name,
                    from,
                    to,
                } => match self.ctx.target.add_partitions(name, *to).await {
                    Ok(()) => {
                        tracing::info!(flow = %telemetry.flow, topic = %name, from, to, "added partitions to the target");
                        target.insert(name.clone(), *to);
                    }
                    Err(e) => {
                        telemetry.note_error("add partitions", e.kind(), &e);
                        // Replicate the partitions the target has.
                        if let Some(route) = plan.mirror.get_mut(source) {
                            route.partitions = *from;
                        }
                    }
                },
            }
        }
        if specs.is_empty() {
            return;
        }
        for (name, result) in self.ctx.target.create_topics(&specs).await {
            match result {
                Ok(()) => {
                    tracing::info!(flow = %telemetry.flow, topic = %name, "created target topic")
                }
                Err(e) => {
                    telemetry.note_error("create topic", e.kind(), &e);
                    plan.mirror.retain(|_, r| r.target != name);
                }
            }
        }
    }

    /// The source topic's configs that pass the config-property filter.
    async fn configs_for(&self, topic: &str) -> Vec<(String, String)> {
        if !self.ctx.sync_topic_configs {
            return Vec::new();
        }
        let telemetry = &self.ctx.telemetry;
        let entries = match self.ctx.source.topic_configs(topic).await {
            Ok(e) => e,
            Err(e) => {
                telemetry.note_error("describe topic configs", e.kind(), &e);
                return Vec::new();
            }
        };
        self.ctx
            .plugins
            .filter_configs(entries)
            .await
            .unwrap_or_else(|e| {
                telemetry.note_error("config-property filter", e.kind(), &e);
                Vec::new()
            })
    }

    fn report(&self, problem: &Problem) {
        let telemetry = &self.ctx.telemetry;
        if !telemetry.first_time(&format!("{problem:?}")) {
            return;
        }
        let text = rules::describe(problem);
        match problem {
            Problem::Collision { .. } => tracing::error!(flow = %telemetry.flow, "{text}"),
            _ => tracing::warn!(flow = %telemetry.flow, "{text}"),
        }
    }
}
