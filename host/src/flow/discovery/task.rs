//! The discovery loop: lists both clusters at start and every `refresh_topics_interval`,
//! decides new source topics through the plugins (cached per name, so a plugin is asked
//! about each name once), applies the plan to the target and publishes the routes.
//!
//! Only the leader changes the target. A topic is created only with its configs (when
//! they are copied): if they cannot be read or filtered, it waits. What could not be done
//! (a creation, a growth, a config sync, a name another flow of this daemon also uses) is
//! a problem that makes the flow degraded, and is tried again at the next pass. Every
//! `sync_topic_configs_interval` the leader syncs existing target topics' configs (MM2's
//! `sync.topic.configs`). A pass whose plugins were replaced while it ran is dropped before
//! it publishes anything, so a reload review always sees what is mirrored.

use super::claims::TargetClaims;
use super::clusters::Clusters;
use super::rules::{self, Action, Decision, Plan, Problem, SkipReason, Snapshot};
use crate::flow::Routes;
use crate::flow::cutover::control::{FailedBack, FailedOver, TopicFailedOver};
use crate::flow::plugins::FlowPlugins;
use crate::flow::telemetry::{Counter, FlowTelemetry};
use crate::kafka::{Creation, KafkaError, TopicSpec};
use futures::FutureExt;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// What the discovery loop works with.
pub struct DiscoveryContext<C> {
    /// The source and target clusters.
    pub clusters: C,
    /// The flow's plugins.
    pub plugins: FlowPlugins,
    /// How often to list.
    pub interval: Duration,
    /// Replication factor of created topics (`None`: the broker's default).
    pub replication_factor: Option<i32>,
    /// How often existing target topics' configs are synced; `None`: configs are not
    /// copied at all (not even to created topics).
    pub sync_topic_configs: Option<Duration>,
    /// Counters and status.
    pub telemetry: Arc<FlowTelemetry>,
    /// The replication policy's name, for messages.
    pub policy_name: String,
    /// Whether this instance leads the flow (only the leader changes the target).
    pub leader: watch::Receiver<bool>,
    /// The target topics the daemon's flows mirror into.
    pub claims: TargetClaims,
    /// The source topics failed over (never mirrored), from the failover control topic;
    /// `None` until it was read to its end: no pass publishes before.
    pub failed_over: watch::Receiver<FailedOver>,
    /// The source topics failed back (mirrored into the topic they were mirrored from,
    /// from where the failover left them), from the same topic.
    pub failed_back: watch::Receiver<FailedBack>,
}

/// Runs discovery until `shutdown`, publishing every change of the routes on `routes`.
pub async fn run<C: Clusters>(
    ctx: DiscoveryContext<C>,
    routes: watch::Sender<Routes>,
    shutdown: CancellationToken,
) {
    let interval = ctx.interval;
    let mut leader = ctx.leader.clone();
    let mut failed_over = ctx.failed_over.clone();
    let mut failed_back = ctx.failed_back.clone();
    let mut discovery = Discovery::new(ctx);
    loop {
        let led = *leader.borrow_and_update();
        // A change seen by this pass wakes no other.
        failed_over.borrow_and_update();
        failed_back.borrow_and_update();
        // Passes begin every interval, however long one takes (at 10,000 topics a pass,
        // its config-sync slice included, takes about a second: counted from its end, a
        // new topic waited that much longer).
        let began = tokio::time::Instant::now();
        discovery.pass(&routes).await;
        discovery.ctx.telemetry.tick("discovery", interval);
        tokio::select! {
            _ = shutdown.cancelled() => {
                discovery.ctx.telemetry.loop_ended("discovery");
                discovery.ctx.claims.release(&discovery.ctx.telemetry.flow);
                return;
            }
            _ = tokio::time::sleep_until(began + interval) => {}
            // A new leader creates what followers could not route at once, not an interval
            // later (at a first start this is most of the wait for the first record).
            Ok(()) = leader.wait_for(|leads| *leads).map(|r| r.map(drop)), if !led => {}
            // A failover stops its topics now, not an interval later; the control topic
            // read for the first time lets a held first pass run at once.
            Ok(()) = failed_over.changed() => {}
            // A failback starts its topic now too.
            Ok(()) = failed_back.changed() => {}
        }
    }
}

/// Target topics whose configs are synced at the same time at most.
const CONFIG_SYNCS_AT_ONCE: usize = 8;
/// How long one pass spends syncing configs at most (the round goes on at the next).
const CONFIG_SYNC_SLICE: Duration = Duration::from_millis(500);

/// How often the leader compares the mirrored source topics' ids (a recreated topic).
const RECREATION_CHECK: Duration = Duration::from_secs(30);

/// How long a target topic this loop created or grew counts as created or grown while the
/// target's listing does not show it yet: a broker of a multi-broker cluster lags the
/// controller (at 10,000 new topics on two busy brokers, for more than a pass), and asking
/// again to create thousands of topics that exist held the next pass for 73 s. Past this, a
/// topic still not listed is taken as deleted meanwhile and created again.
const UNLISTED_TRUSTED: Duration = Duration::from_secs(300);

/// How long a topic a plugin failed on waits before it is asked again.
const RETRY_UNDECIDED: Duration = Duration::from_secs(60);

/// One flow's discovery state.
pub struct Discovery<C> {
    /// What it works with.
    pub ctx: DiscoveryContext<C>,
    /// Topics a plugin failed on: when to ask again, and the error.
    undecided: BTreeMap<String, (Instant, String)>,
    /// Cached per name; a plugin is asked about each name once.
    decisions: BTreeMap<String, Decision>,
    /// What the last published pass mirrored.
    mirrored: Routes,
    /// The plugins' generation the decisions were made with.
    generation: u64,
    /// When the last round of syncing existing target topics' configs began.
    configs_synced: Option<Instant>,
    /// The (source, target) topics the round has still to sync.
    config_queue: std::collections::VecDeque<(String, String)>,
    /// What the config sync could not do, by target topic, until it is tried again.
    config_failures: BTreeMap<String, Problem>,
    /// The last topic id seen of each mirrored source topic (kept after the topic goes, so
    /// that its creation again is seen).
    topic_ids: BTreeMap<String, String>,
    /// When the topic ids were last asked for.
    ids_asked: Option<Instant>,
    /// Target topics this loop created or grew, with their partitions then, until a listing
    /// shows them so (see [`UNLISTED_TRUSTED`]).
    made: BTreeMap<String, (i32, Instant)>,
    /// The source topics failed over that the last pass left out.
    withheld: Arc<BTreeMap<String, TopicFailedOver>>,
}

impl<C: Clusters> Discovery<C> {
    /// Discovery with nothing decided yet.
    pub fn new(ctx: DiscoveryContext<C>) -> Self {
        let generation = ctx.plugins.generation();
        Discovery {
            ctx,
            undecided: BTreeMap::new(),
            decisions: BTreeMap::new(),
            mirrored: Routes::new(),
            generation,
            configs_synced: None,
            config_queue: Default::default(),
            config_failures: BTreeMap::new(),
            topic_ids: BTreeMap::new(),
            ids_asked: None,
            made: BTreeMap::new(),
            withheld: Arc::default(),
        }
    }

    /// One pass; publishes on `routes` what it mirrors, unless a cluster could not be
    /// listed (the last routes stay) or the plugins were replaced while it ran (it is
    /// dropped; the next pass decides again). Returns whether it published.
    pub async fn pass(&mut self, routes: &watch::Sender<Routes>) -> bool {
        let telemetry = self.ctx.telemetry.clone();
        let generation = self.ctx.plugins.generation();
        let Some(failed_over) = self.failed_over().await else {
            return false;
        };
        // Stopped at once, whatever the listing below does (a pass that cannot list keeps
        // the last routes).
        self.stop_failed_over(&failed_over, routes);
        let began = Instant::now();
        let (source, target) = tokio::join!(
            self.ctx.clusters.source_topics(),
            self.ctx.clusters.target_topics()
        );
        let source = self.listed(true, "list source topics", source);
        let target = self.listed(false, "list target topics", target);
        let (Some(source), Some(mut target)) = (source, target) else {
            return false;
        };
        // The configs are synced only for what the listing shows (a lagging broker would not
        // describe the others yet); creations and growths see what this loop made too.
        let listed_target = target.clone();
        self.trust_made(&mut target);
        if generation != self.generation {
            // The plugins were replaced: every topic is decided again by the new ones.
            tracing::info!(flow = %telemetry.flow, topics = self.decisions.len(), generation, "plugins replaced; deciding every topic again");
            self.decisions.clear();
            self.undecided.clear();
            self.generation = generation;
        }
        let listed = began.elapsed();
        self.decide_new(&source).await;
        let failed_back = self.ctx.failed_back.borrow().clone();
        let mut refused = Vec::new();
        let decisions = rules::with_failed_back(
            &self.decisions,
            &failed_back,
            (&source, &target),
            &mut refused,
        );
        let mut plan = rules::plan(&source, &target, &decisions, &self.mirrored);
        plan.problems.extend(refused);
        rules::start_failed_back(&mut plan.mirror, &failed_back);
        // Claimed first: a failed-over topic's target name stays this flow's (its
        // applications write there now), so no other flow of the daemon takes it.
        self.refuse_claimed(&mut plan);
        self.withhold(&mut plan, failed_over);
        let leader = *self.ctx.leader.borrow();
        if !leader {
            rules::without_changes(&mut plan);
        }
        for (topic, (_, error)) in &self.undecided {
            plan.problems.push(Problem::Undecided {
                source: topic.clone(),
                error: error.clone(),
            });
        }
        if self.ctx.plugins.generation() != generation {
            // Replaced while deciding: create nothing under the old plugins' names.
            tracing::info!(flow = %telemetry.flow, "plugins replaced during the pass; it is dropped and decided again");
            return false;
        }
        let decided = began.elapsed();
        self.apply(&mut plan, &mut target).await;
        // What the last config sync could not do is reported until it is tried again.
        plan.problems.extend(self.config_failures.values().cloned());
        let mirror = plan.mirror.clone();
        let published = self.publish(plan, generation, routes);
        let applied = began.elapsed();
        if published && leader {
            self.check_recreated(&mirror).await;
            self.sync_configs(&mirror, &listed_target).await;
        }
        // Where a pass's time goes (a new topic waits for all of it but the last two steps).
        tracing::debug!(flow = %telemetry.flow, source_topics = source.len(), listed = ?listed, decided = ?decided - listed, applied_and_published = ?applied - decided, ids_and_configs = ?began.elapsed() - applied, "discovery pass");
        published
    }

    /// Compares the mirrored source topics' ids with the ones seen before, at most every
    /// [`RECREATION_CHECK`] (DescribeTopics names every mirrored topic: at 10,000 topics a
    /// request as large as the listing): a topic deleted and created again under its name
    /// (between two checks, or within one) is reported — a warning,
    /// `kmirror_source_topics_recreated_total` and `source_recreated` in `/status`. What the
    /// old topic held that was not mirrored before it was deleted is gone; the new one is
    /// mirrored into the same target topic.
    async fn check_recreated(&mut self, mirror: &Routes) {
        let now = Instant::now();
        if self
            .ids_asked
            .is_some_and(|at| now.duration_since(at) < RECREATION_CHECK)
        {
            return;
        }
        self.ids_asked = Some(now);
        let telemetry = self.ctx.telemetry.clone();
        let names: Vec<String> = mirror.keys().cloned().collect();
        let asked = names.len();
        let ids = match self.ctx.clusters.source_topic_ids(names).await {
            Ok(ids) => ids,
            Err(e) => {
                // Not an error of the mirror: only this report is missing. Said once per
                // run; asked again at the next check.
                if telemetry.first_time("discovery: source topic ids") {
                    tracing::warn!(flow = %telemetry.flow, cluster = %self.ctx.clusters.source_alias(), error = %e, "cannot read the source topics' ids (DescribeTopics), so a source topic deleted and created again is not reported until they can be read");
                }
                return;
            }
        };
        if asked > 0
            && ids.is_empty()
            && telemetry.first_time("discovery: the source serves no topic ids")
        {
            tracing::warn!(flow = %telemetry.flow, cluster = %self.ctx.clusters.source_alias(), "the source gives no topic ids, so a source topic deleted and created again is not reported");
        }
        for (topic, id) in ids {
            match self.topic_ids.get(&topic) {
                Some(before) if *before != id => {
                    let target = mirror.get(&topic).map_or("", |r| r.target.as_str());
                    tracing::warn!(flow = %telemetry.flow, cluster = %self.ctx.clusters.source_alias(), topic = %topic, target = %target, topic_id_before = %before, topic_id = %id, "the source topic was deleted and created again: records of the old topic not mirrored before its deletion are gone, and the new topic is mirrored into the same target topic, after the old one's records (a range the mirror could not read is reported in source_truncated)");
                    telemetry.source_recreated(&topic, target, before, &id);
                }
                _ => {}
            }
            self.topic_ids.insert(topic, id);
        }
    }

    fn listed(
        &self,
        source: bool,
        operation: &'static str,
        listed: Result<Snapshot, KafkaError>,
    ) -> Option<Snapshot> {
        let telemetry = &self.ctx.telemetry;
        let alias = if source {
            self.ctx.clusters.source_alias()
        } else {
            self.ctx.clusters.target_alias()
        };
        match listed {
            Ok(t) => {
                telemetry.reached(alias);
                Some(t)
            }
            Err(e) => {
                telemetry.unreachable(alias, &e);
                telemetry.note_error(operation, e.kind(), &e);
                None
            }
        }
    }

    /// Decides the source topics not decided yet (fail safe: an undecided topic is not
    /// mirrored; it is asked again later).
    async fn decide_new(&mut self, source: &Snapshot) {
        let telemetry = self.ctx.telemetry.clone();
        let now = Instant::now();
        self.undecided
            .retain(|t, (retry_at, _)| source.contains_key(t) && *retry_at > now);
        let new: Vec<String> = source
            .keys()
            .filter(|t| !self.decisions.contains_key(*t) && !self.undecided.contains_key(*t))
            .cloned()
            .collect();
        if new.is_empty() {
            return;
        }
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

    /// The source topics failed over, once the control topic was read to its end (waited
    /// for a little at a first pass); `None`: not read yet (the reader reports why), so the
    /// pass publishes nothing.
    async fn failed_over(&mut self) -> Option<Arc<BTreeMap<String, TopicFailedOver>>> {
        let wait = self.ctx.interval.min(Duration::from_secs(5));
        let read = tokio::time::timeout(wait, self.ctx.failed_over.wait_for(Option::is_some));
        match read.await {
            Ok(Ok(f)) => f.clone(),
            // The reader stopped (the flow stops) or has not read it yet.
            _ => {
                tracing::debug!(flow = %self.ctx.telemetry.flow, "the failover control topic is not read yet; the pass waits");
                None
            }
        }
    }

    /// Removes the topics failed over from the routes published last, and publishes them
    /// if that changed them.
    fn stop_failed_over(
        &mut self,
        failed_over: &BTreeMap<String, TopicFailedOver>,
        routes: &watch::Sender<Routes>,
    ) {
        if !self.mirrored.keys().any(|t| failed_over.contains_key(t)) {
            return;
        }
        let _publishing = self.ctx.plugins.publishing();
        let stopped: Vec<&str> = self
            .mirrored
            .keys()
            .filter(|t| failed_over.contains_key(*t))
            .map(String::as_str)
            .collect();
        tracing::info!(flow = %self.ctx.telemetry.flow, topics = %stopped.join(", "), "topics failed over: no longer mirrored");
        self.mirrored.retain(|t, _| !failed_over.contains_key(t));
        let mirror = self.mirrored.clone();
        self.ctx.telemetry.update(|s| {
            s.mirrored.retain(|t, _| !failed_over.contains_key(t));
            for (t, f) in failed_over {
                let shown = crate::flow::telemetry::FailedOverStatus {
                    target: f.target_topic.clone(),
                    at_ms: f.at_ms,
                };
                s.failed_over.insert(t.clone(), shown);
            }
        });
        routes.send_replace(mirror);
    }

    /// Leaves out every topic failed over (the failover wrote it to the control topic):
    /// not mirrored, its target topic neither created nor grown, and no problem reported
    /// about it.
    fn withhold(&mut self, plan: &mut Plan, failed_over: Arc<BTreeMap<String, TopicFailedOver>>) {
        if !failed_over.is_empty() {
            let targets: BTreeSet<String> = plan
                .mirror
                .iter()
                .filter(|(s, _)| failed_over.contains_key(*s))
                .map(|(_, r)| r.target.clone())
                .chain(failed_over.values().map(|f| f.target_topic.clone()))
                .collect();
            plan.mirror
                .retain(|source, _| !failed_over.contains_key(source));
            plan.actions.retain(|a| match a {
                Action::CreateTopic { source, .. } | Action::AddPartitions { source, .. } => {
                    !failed_over.contains_key(source)
                }
            });
            plan.problems
                .retain(|p| !rules::concerns(p, &|t| failed_over.contains_key(t), &targets));
        }
        if failed_over != self.withheld {
            let names: Vec<&str> = failed_over.keys().map(String::as_str).collect();
            tracing::info!(flow = %self.ctx.telemetry.flow, topics = %names.join(", "), "the topics failed over (not mirrored) changed");
            self.withheld = failed_over;
        }
    }

    /// Leaves out every topic whose target name another flow of this daemon also wants.
    fn refuse_claimed(&self, plan: &mut Plan) {
        let wanted: BTreeSet<String> = plan.mirror.values().map(|r| r.target.clone()).collect();
        let conflicts = self.ctx.claims.claim(
            &self.ctx.telemetry.flow,
            self.ctx.clusters.target_alias(),
            wanted,
        );
        if conflicts.is_empty() {
            return;
        }
        let refused: Vec<(String, String)> = plan
            .mirror
            .iter()
            .filter(|(_, r)| conflicts.contains_key(&r.target))
            .map(|(s, r)| (s.clone(), r.target.clone()))
            .collect();
        for (source, target) in refused {
            plan.mirror.remove(&source);
            plan.actions.retain(|a| match a {
                Action::CreateTopic { source: s, .. } | Action::AddPartitions { source: s, .. } => {
                    *s != source
                }
            });
            let flows = conflicts.get(&target).cloned().unwrap_or_default();
            plan.problems.push(Problem::OtherFlow {
                source,
                target,
                flows,
            });
        }
    }

    /// Adds to the target's listing what this loop made and the listing does not show yet
    /// (a lagging broker answered), for [`UNLISTED_TRUSTED`]; forgets what it shows.
    fn trust_made(&mut self, target: &mut Snapshot) {
        let now = Instant::now();
        self.made.retain(|name, (partitions, at)| {
            let listed = target.get(name).copied().unwrap_or(0);
            if listed >= *partitions || now.duration_since(*at) >= UNLISTED_TRUSTED {
                return false;
            }
            target.insert(name.clone(), *partitions);
            true
        });
    }

    /// Creates and grows target topics; what could not be done is not replicated, and is
    /// a problem until it works.
    async fn apply(&mut self, plan: &mut Plan, target: &mut Snapshot) {
        let telemetry = self.ctx.telemetry.clone();
        let mut specs = Vec::new();
        for action in std::mem::take(&mut plan.actions) {
            match action {
                Action::CreateTopic {
                    source,
                    target: name,
                    partitions,
                } => match self.configs_for(&source).await {
                    Ok(configs) => specs.push(TopicSpec {
                        name,
                        partitions,
                        replication_factor: self.ctx.replication_factor,
                        configs,
                    }),
                    Err(error) => {
                        plan.mirror.remove(&source);
                        plan.problems
                            .push(Problem::ConfigsUnreadable { source, error });
                    }
                },
                Action::AddPartitions {
                    source,
                    target: name,
                    from,
                    to,
                } => match self.ctx.clusters.add_partitions(name.clone(), to).await {
                    Ok(()) => {
                        tracing::info!(flow = %telemetry.flow, topic = %name, from, to, "added partitions to the target");
                        self.made.insert(name.clone(), (to, Instant::now()));
                        target.insert(name, to);
                    }
                    Err(e) => {
                        telemetry.note_error("add partitions", e.kind(), &e);
                        // Replicate the partitions the target has.
                        if let Some(route) = plan.mirror.get_mut(&source) {
                            route.partitions = from;
                        }
                        plan.problems.push(Problem::GrowFailed {
                            target: name,
                            from,
                            to,
                            error: e.to_string(),
                        });
                    }
                },
            }
        }
        if specs.is_empty() {
            return;
        }
        let asked: BTreeMap<String, i32> = specs
            .iter()
            .map(|s| (s.name.clone(), s.partitions))
            .collect();
        let mut existed = Vec::new();
        for (name, result) in self.ctx.clusters.create_topics(specs).await {
            match result {
                Ok(Creation::Created) => {
                    tracing::info!(flow = %telemetry.flow, topic = %name, "created target topic");
                    if let Some(partitions) = asked.get(&name) {
                        self.made.insert(name, (*partitions, Instant::now()));
                    }
                }
                Ok(Creation::Existed) => existed.push(name),
                Err(e) => {
                    telemetry.note_error("create topic", e.kind(), &e);
                    let sources: Vec<String> = plan
                        .mirror
                        .iter()
                        .filter(|(_, r)| r.target == name)
                        .map(|(s, _)| s.clone())
                        .collect();
                    for source in sources {
                        plan.mirror.remove(&source);
                        plan.problems.push(Problem::CreateFailed {
                            source,
                            target: name.clone(),
                            error: e.to_string(),
                        });
                    }
                }
            }
        }
        if !existed.is_empty() {
            self.cap_to_existing(plan, target, &existed).await;
        }
    }

    /// Topics another client created meanwhile: mirror only the partitions they have (the
    /// next pass grows them if the source has more).
    async fn cap_to_existing(&self, plan: &mut Plan, target: &mut Snapshot, existed: &[String]) {
        let listed = self.ctx.clusters.target_topics().await;
        for name in existed {
            let have = listed.as_ref().ok().and_then(|t| t.get(name)).copied();
            for route in plan.mirror.values_mut().filter(|r| r.target == *name) {
                // Unknown: mirror nothing of it until the next pass lists it.
                route.partitions = have.map_or(0, |h| h.min(route.partitions));
            }
            if let Some(h) = have {
                target.insert(name.clone(), h);
            }
            tracing::info!(flow = %self.ctx.telemetry.flow, topic = %name, partitions = ?have, "the target topic existed already");
        }
        plan.mirror.retain(|_, r| r.partitions > 0);
    }

    /// The source topic's configs that pass the config-property filter; an error when they
    /// cannot be read or filtered (the topic is then not created: MM2 aborts too).
    async fn configs_for(&self, topic: &str) -> Result<Vec<(String, String)>, String> {
        if self.ctx.sync_topic_configs.is_none() {
            return Ok(Vec::new());
        }
        let telemetry = &self.ctx.telemetry;
        let entries = self
            .ctx
            .clusters
            .source_configs(topic.to_string())
            .await
            .map_err(|e| {
                telemetry.note_error("describe topic configs", e.kind(), &e);
                e.to_string()
            })?;
        self.ctx.plugins.filter_configs(entries).await.map_err(|e| {
            telemetry.note_error("config-property filter", e.kind(), &e);
            e.to_string()
        })
    }

    /// Every `sync_topic_configs_interval`, after the pass was published: existing target
    /// topics get the source's filtered configs where they differ (only those keys are set;
    /// the target's other configs are left alone), a few topics at a time — and about
    /// [`CONFIG_SYNC_SLICE`] of each pass (checked between groups of topics), the round
    /// going on at the next passes: a round
    /// over 10,000 topics takes this broker about 18 s, which held a new topic that long
    /// (measured with a single instance: 20.6 s from its creation to its first record,
    /// against 4-6 s).
    async fn sync_configs(&mut self, mirror: &Routes, target: &Snapshot) {
        use futures::StreamExt;
        let Some(every) = self.ctx.sync_topic_configs else {
            return;
        };
        // A failure is reported until its topic is tried again (or no longer mirrored).
        let targets: BTreeSet<&String> = mirror.values().map(|r| &r.target).collect();
        self.config_failures.retain(|t, _| targets.contains(t));
        if self.config_queue.is_empty() {
            if self.configs_synced.is_some_and(|t| t.elapsed() < every) {
                return;
            }
            self.configs_synced = Some(Instant::now());
            self.config_queue = mirror
                .iter()
                .filter(|(_, r)| target.contains_key(&r.target))
                .map(|(s, r)| (s.clone(), r.target.clone()))
                .collect();
        }
        // Checked between groups of a few topics: a pass spends about this long.
        let deadline = Instant::now() + CONFIG_SYNC_SLICE;
        while !self.config_queue.is_empty() && Instant::now() < deadline {
            let take = self.config_queue.len().min(CONFIG_SYNCS_AT_ONCE);
            // Still mirrored there, and still on the target (the round may have begun
            // passes ago).
            let chunk: Vec<(String, String)> = self
                .config_queue
                .drain(..take)
                .filter(|(s, t)| {
                    mirror.get(s).is_some_and(|r| r.target == *t) && target.contains_key(t)
                })
                .collect();
            let this = &*self;
            let outcomes: Vec<(String, Result<(), String>)> = futures::stream::iter(chunk)
                .map(|(source, name)| async move {
                    let outcome = this.sync_one(&source, &name).await;
                    (name, outcome)
                })
                .buffer_unordered(CONFIG_SYNCS_AT_ONCE)
                .collect()
                .await;
            for (name, outcome) in outcomes {
                match outcome {
                    Ok(()) => {
                        self.config_failures.remove(&name);
                    }
                    Err(error) => {
                        let failed = Problem::ConfigSyncFailed {
                            target: name.clone(),
                            error,
                        };
                        self.config_failures.insert(name, failed);
                    }
                }
            }
        }
    }

    async fn sync_one(&self, source: &str, target: &str) -> Result<(), String> {
        let desired = self.configs_for(source).await?;
        let current = self
            .ctx
            .clusters
            .target_configs(target.to_string())
            .await
            .map_err(|e| e.to_string())?;
        let differ: Vec<(String, String)> = desired
            .into_iter()
            .filter(|(k, v)| current.get(k) != Some(v))
            .collect();
        if differ.is_empty() {
            return Ok(());
        }
        let keys: Vec<&str> = differ.iter().map(|(k, _)| k.as_str()).collect();
        tracing::info!(flow = %self.ctx.telemetry.flow, topic = %target, source, configs = %keys.join(", "), "syncing the target topic's configs from the source");
        self.ctx
            .clusters
            .set_target_configs(target.to_string(), differ)
            .await
            .map_err(|e| e.to_string())
    }

    /// Publishes the pass — unless the plugins were replaced since it started, when it is
    /// dropped: its decisions were made by the old ones, and a reload review (which holds
    /// the same lock) must never miss a topic mirrored under an old name.
    fn publish(&mut self, plan: Plan, generation: u64, routes: &watch::Sender<Routes>) -> bool {
        let telemetry = self.ctx.telemetry.clone();
        let _publishing = self.ctx.plugins.publishing();
        if self.ctx.plugins.generation() != generation {
            tracing::info!(flow = %telemetry.flow, "plugins replaced during the pass; it is dropped and decided again");
            return false;
        }
        for problem in &plan.problems {
            self.report(problem);
        }
        let problems: Vec<String> = plan.problems.iter().map(rules::describe).collect();
        let failing: Vec<String> = plan
            .problems
            .iter()
            .filter(|p| rules::degrades(p))
            .map(rules::describe)
            .collect();
        telemetry.update(|s| {
            s.state = "running";
            // A topic the leader has still to create is subscribed to, not yet mirrored.
            s.mirrored = plan
                .mirror
                .iter()
                .filter(|(_, r)| r.partitions > 0)
                .map(|(t, r)| (t.clone(), r.clone()))
                .collect();
            s.problems = problems;
            s.discovery_failures = failing;
            s.failed_over = self
                .withheld
                .iter()
                .map(|(t, f)| {
                    let shown = crate::flow::telemetry::FailedOverStatus {
                        target: f.target_topic.clone(),
                        at_ms: f.at_ms,
                    };
                    (t.clone(), shown)
                })
                .collect();
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
        routes.send_if_modified(|current| {
            let changed = *current != plan.mirror;
            *current = plan.mirror;
            changed
        });
        true
    }

    fn report(&self, problem: &Problem) {
        let telemetry = &self.ctx.telemetry;
        if !telemetry.first_time(&format!("{problem:?}")) {
            return;
        }
        let text = rules::describe(problem);
        match problem {
            Problem::Collision { .. } | Problem::OtherFlow { .. } => {
                tracing::error!(flow = %telemetry.flow, "{text}")
            }
            _ => tracing::warn!(flow = %telemetry.flow, "{text}"),
        }
    }
}

#[cfg(test)]
mod tests;
