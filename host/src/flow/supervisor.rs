//! Wires one flow together and watches it: the internal topics, then discovery, the
//! replication tasks, the leader election and the elected duties as tasks of one set.
//! A task that panics fails the flow (the other tasks are stopped); it is never lost.

use super::discovery::claims::TargetClaims;
use super::discovery::clusters::Live;
use super::discovery::task::DiscoveryContext;
use super::duties::{self, DutiesContext};
use super::leadership::{self, leader_group, leader_topic};
use super::plugins::FlowPlugins;
use super::replication::ReplicatorSettings;
use super::tasks::Tasks;
use super::telemetry::{Counter, FlowTelemetry};
use super::{
    CHECKPOINTS_SINGLE, FlowError, Routes, SYNCS_SINGLE, cutover, discovery, exactly_once,
    ownership, progress_group, replication, retry, single, takeover,
};
use crate::config::{ResolvedFlow, SyncsLocation};
use crate::kafka::Cluster;
use crate::policy::PluginError;
use std::sync::Arc;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Runs `flow` until `shutdown`, calling `plugins` (the flow's roles, which a hot reload
/// may replace while it runs).
pub async fn run(
    flow: Arc<ResolvedFlow>,
    telemetry: Arc<FlowTelemetry>,
    plugins: FlowPlugins,
    claims: TargetClaims,
    shutdown: CancellationToken,
) -> Result<(), FlowError> {
    let name = flow.name.clone();
    let kafka = |source| FlowError::Kafka {
        flow: name.clone(),
        source,
    };
    let (src, dst) = (&flow.source.alias, &flow.target.alias);
    let source = Cluster::new(&flow.source).map_err(kafka)?;
    let target = Cluster::new(&flow.target).map_err(kafka)?;
    let syncs_cluster = match flow.settings.offset_syncs_topic_location {
        SyncsLocation::Source => source.clone(),
        SyncsLocation::Target => target.clone(),
    };
    let plugins = plugins.until(shutdown.clone());
    let topics = match plugins.internal_topics().await {
        Ok(t) => t,
        Err(PluginError::Cancelled { .. }) => return Ok(()),
        Err(source) => {
            return Err(FlowError::Plugin {
                flow: name.clone(),
                source,
            });
        }
    };
    let plugins = plugins.reserving(&topics);
    let rf = flow.settings.replication_factor;
    tracing::info!(flow = %name, offset_syncs = %topics.offset_syncs, heartbeats = %topics.heartbeats, "starting flow");
    let misshapen = |source| FlowError::InternalTopic {
        flow: name.clone(),
        source,
    };
    let created = retry(
        "create the offset-syncs topic",
        &telemetry,
        &shutdown,
        || syncs_cluster.ensure_internal_topic(&topics.offset_syncs, rf, Some(SYNCS_SINGLE)),
    );
    match created.await {
        None => return Ok(()),
        Some(shape) => shape.map_err(misshapen)?,
    }
    // The checkpoints topic is created by the leader; one of the wrong shape is refused by
    // every instance at its start. The failover control topic is created by every instance
    // (`kmirror failover` writes it; discovery reads it before its first pass).
    let control = cutover::control_topic(src);
    let checked = retry("check the checkpoints topic", &telemetry, &shutdown, || {
        target.check_internal_topic(&topics.checkpoints, Some(CHECKPOINTS_SINGLE))
    });
    let created = retry(
        "create the failover control topic",
        &telemetry,
        &shutdown,
        || target.ensure_internal_topic(&control, rf, Some(cutover::control::CONTROL_SINGLE)),
    );
    for shape in <[_; 2]>::from(tokio::join!(checked, created)) {
        match shape {
            None => return Ok(()),
            Some(shape) => shape.map_err(misshapen)?,
        }
    }

    if flow.settings.take_over_from_mm2 {
        let group = progress_group(src, dst);
        // Planned again at every try: an instance started beside this one may have seeded
        // (or begun mirroring) meanwhile, and its progress is then left alone.
        let took = retry(
            "take over from MirrorMaker 2",
            &telemetry,
            &shutdown,
            || takeover::take_over(&source, &target, &group),
        );
        let Some(outcome) = took.await else {
            return Ok(());
        };
        match outcome {
            takeover::Outcome::HasProgress => {
                tracing::info!(flow = %name, "take_over_from_mm2: the flow has progress already; nothing seeded (the setting can be removed)")
            }
            takeover::Outcome::NothingLeft => {
                tracing::info!(flow = %name, topic = %takeover::mm2_offsets_topic(src), "take_over_from_mm2: MirrorMaker 2 left no offsets; nothing seeded")
            }
            takeover::Outcome::Seeded(seeded) => {
                tracing::info!(flow = %name, partitions = seeded.stored, "took over from MirrorMaker 2: progress seeded from its offsets");
                for ((topic, partition), at, why) in &seeded.refused {
                    tracing::warn!(flow = %name, %topic, partition, offset = at, reason = %why, "take_over_from_mm2: Kafka refused to seed this partition's progress (the reason says why); it is mirrored from the flow's stored progress if it has any, else as start_offset says");
                    telemetry.note_error(
                        "take over from MirrorMaker 2",
                        "seed",
                        &format!("{topic} partition {partition} not seeded: {why}"),
                    );
                }
            }
        }
    }

    // The flow's own token: a failed task stops its siblings, not other flows.
    let stop = shutdown.child_token();
    let (routes_tx, routes) = watch::channel(Routes::new());
    let mut tasks = Tasks::default();
    let fs = &flow.settings;
    // Stored positions are committed again well inside the offset retention of the
    // clusters holding them (the source; the target too for exactly-once): asked once, for
    // at most 3 s (unknown: hourly).
    let asked = |c: &Cluster| {
        let c = c.clone();
        async move {
            tokio::time::timeout(std::time::Duration::from_secs(3), c.offsets_retention())
                .await
                .ok()
                .flatten()
        }
    };
    let on_target = async {
        match fs.exactly_once {
            Some(_) => asked(&target).await,
            None => None,
        }
    };
    let (on_source, on_target) = tokio::join!(asked(&source), on_target);
    let retention = [on_source, on_target].into_iter().flatten().min();
    if retention.is_none() {
        tracing::debug!(flow = %name, "the clusters' offsets.retention.minutes is unknown (not served, or no DESCRIBE_CONFIGS): stored positions are committed again hourly");
    }
    let refresh_every = replication::progress::refresh_every(retention);
    if retention.is_some_and(|r| r < std::time::Duration::from_secs(4 * 3600)) {
        tracing::info!(flow = %name, retention_s = retention.map(|r| r.as_secs()), refresh_s = refresh_every.as_secs(), "the clusters keep committed offsets briefly: stored positions are committed again this often");
    }
    let settings = ReplicatorSettings {
        refresh_every,
        offset_lag_max: fs.offset_lag_max,
        flush_interval: fs.offset_flush_interval,
        start_offset: fs.start_offset,
        on_unproducible: fs.on_unproducible,
        on_transform_error: fs.on_transform_error,
        on_source_truncation: fs.on_source_truncation,
        drain_timeout: fs.shutdown_timeout,
        session_timeout: fs.session_timeout,
        ..ReplicatorSettings::new(&name, &progress_group(src, dst), &topics.offset_syncs)
    };
    let clusters = [source.clone(), target.clone(), syncs_cluster.clone()];
    // The tasks leave the group one after another at a stop, within the stop's budget, and
    // rejoin it when the leader finds partitions without an owner.
    let (rejoin_tx, rejoin) = watch::channel(0u64);
    telemetry.transforms_configured(&chain_names(&flow.roles.record_transforms));
    // The chain is read at every batch, even while the flow has none: a plugin file swap
    // or a config reload that adds, changes or removes transforms (or changes
    // `on_transform_error`) takes effect between two batches, never by a restart.
    let live = plugins.clone();
    let mut shared = replication::TaskShared::new(fs.session_timeout, rejoin)
        .with_roles(Arc::new(move || live.chain()));
    let single = fs.single_instance;
    let lease_topic = single::lease_topic(src, dst);
    let lease_id = single::lease_id(src, dst);
    let lease_names = (name.as_str(), lease_topic.as_str(), lease_id.as_str());
    if single {
        // No groups, a lease: refused while instances without the setting run.
        let groups = vec![progress_group(src, dst), leader_group(src, dst)];
        let described = retry("describe the flow's groups", &telemetry, &stop, || {
            single::members(&source, &groups)
        });
        match described.await {
            None => return Ok(()),
            Some(Some(joined)) => return Err(single::joined_error(&name, joined)),
            Some(None) => {}
        }
        let created = retry("create the lease topic", &telemetry, &stop, || {
            source.ensure_internal_topic(&lease_topic, rf, Some(single::LEASE_SINGLE))
        });
        match created.await {
            None => return Ok(()),
            Some(shape) => shape.map_err(misshapen)?,
        }
        let lease =
            single::Lease::take(&source, lease_names, fs.session_timeout, &telemetry, &stop);
        let Some((lease, wait)) = lease.await? else {
            return Ok(());
        };
        // An instance without the setting started at the same moment is noticed within a
        // lease (and again below, before mirroring).
        let epoch = lease.epoch();
        let lease = lease.watching(source.clone(), groups.clone());
        let (running_tx, running) = tokio::sync::mpsc::channel(1);
        let (abandon, producers) = (CancellationToken::new(), replication::Producers::default());
        let tasks_of = (fs.replication_tasks, epoch);
        let term = lease.term_end();
        shared = shared.single(
            tasks_of,
            abandon.clone(),
            running_tx,
            producers.clone(),
            term,
        );
        let held = lease.hold(running, abandon, producers, stop.clone(), telemetry.clone());
        tasks.spawn_fallible("single-instance lease", &stop, held);
        if !wait.is_zero() {
            tracing::info!(flow = %name, wait_ms = wait.as_millis() as u64, "the earlier single instance did not let go of the lease: waiting one lease before mirroring");
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
        if !stop.is_cancelled()
            && let Ok(Some(joined)) = single::members(&source, &groups).await
        {
            tasks.fail(single::joined_error(&name, joined), &stop);
        }
        if stop.is_cancelled() {
            drop(shared);
            return finish(tasks, &name, &stop, &telemetry).await;
        }
    } else {
        // A single instance may have run before: it is fenced, and given its lease's time
        // to stop, before this instance joins the groups.
        fence_a_single_instance(&source, lease_names, fs.session_timeout, &telemetry, &stop).await;
    }
    if !single {
        // Never both delivery modes at once (issue 34 item 3): each record would be
        // committed twice. An instance waits while the other mode's group has members — a
        // rolling update that switches the mode mirrors again once the last instance of
        // the old mode stopped.
        let other = OtherMode::of(fs.exactly_once.is_some(), &source, &target, src, dst);
        if !other.wait_until_gone(&name, &telemetry, &stop).await {
            return finish(tasks, &name, &stop, &telemetry).await;
        }
        if fs.exactly_once.is_none() {
            // Both started at the same moment: the exactly-once side goes on (its shards
            // fence each other; at-least-once progress is taken over where it is larger).
            let watched = other.clone();
            let (flow, stopping) = (name.clone(), stop.clone());
            tasks.spawn_fallible("delivery mode watch", &stop, async move {
                watched.refuse_while_running(&flow, &stopping).await
            });
        }
    }
    if let Some(eos) = fs.exactly_once {
        // Exactly-once: the shards of the flow, shared through a group on the target.
        let ctx = exactly_once::ExactlyOnceContext {
            source: source.clone(),
            target: target.clone(),
            syncs_cluster: match fs.offset_syncs_topic_location {
                SyncsLocation::Source => Some(syncs_cluster.clone()),
                SyncsLocation::Target => None,
            },
            flow: name.clone(),
            source_alias: src.clone(),
            target_alias: dst.clone(),
            progress_group: progress_group(src, dst),
            syncs_topic: topics.offset_syncs.clone(),
            shards: eos.shards,
            replication_factor: rf,
            settings: exactly_once::shard::ShardSettings {
                transaction_interval: eos.transaction_interval,
                max_records: eos.max_records,
                max_bytes: eos.max_bytes,
                start_offset: fs.start_offset,
                on_unproducible: fs.on_unproducible,
                on_transform_error: fs.on_transform_error,
                on_source_truncation: fs.on_source_truncation,
                retry_paused_every: settings.retry_paused_every,
                offset_lag_max: fs.offset_lag_max,
                flush_interval: fs.offset_flush_interval,
                refresh_every,
            },
            session_timeout: fs.session_timeout,
            drain_timeout: fs.shutdown_timeout,
            routes: routes.clone(),
            telemetry: telemetry.clone(),
            roles: shared.roles.clone(),
        };
        tasks.spawn("exactly-once shards", exactly_once::run(ctx, stop.clone()));
    } else {
        for member in 0..fs.replication_tasks {
            let settings = ReplicatorSettings {
                member,
                ..settings.clone()
            };
            let run = replication::run_restarting(
                clusters.clone(),
                settings,
                routes.clone(),
                stop.clone(),
                telemetry.clone(),
                shared.clone(),
            );
            tasks.spawn("replication", run);
        }
    }
    drop(shared); // the tasks hold the rest: a single instance's lease waits for them
    // Elected duties: on the one instance that holds the control group's partition — a
    // single instance does them from its start (no election, no ownership reports).
    let (leader_tx, leader) = watch::channel(single);
    let _leader = if single {
        Some(leader_tx)
    } else {
        let groups = (leader_group(src, dst), leader_topic(dst));
        let created = retry("create the control topic", &telemetry, &stop, || {
            source.ensure_internal_topic(&groups.1, rf, Some(leadership::CONTROL_SINGLE))
        });
        match created.await {
            None => return Ok(()),
            Some(shape) => shape.map_err(misshapen)?,
        }
        let ownership = ownership::OwnershipContext {
            source: source.clone(),
            control_topic: groups.1.clone(),
            progress_group: progress_group(src, dst),
            session_timeout: fs.session_timeout,
            routes: routes.clone(),
            leader: leader.clone(),
            telemetry: telemetry.clone(),
            rejoin: rejoin_tx,
        };
        tasks.spawn("ownership", ownership::run(ownership, stop.clone()));
        let election = leadership::run(
            source.clone(),
            name.clone(),
            groups,
            fs.session_timeout,
            leader_tx,
            telemetry.clone(),
            stop.clone(),
        );
        tasks.spawn("leader election", election);
        None
    };
    let duties = DutiesContext {
        flow: flow.clone(),
        source: source.clone(),
        target: target.clone(),
        syncs_cluster,
        topics: topics.clone(),
        plugins: plugins.clone(),
        routes: routes.clone(),
        telemetry: telemetry.clone(),
    };
    tasks.spawn(
        "elected duties",
        duties::run(duties, leader.clone(), stop.clone()),
    );
    let (failed_over_tx, failed_over) = watch::channel(None);
    let (failed_back_tx, failed_back) = watch::channel(Arc::default());
    tasks.spawn(
        "failover control",
        cutover::control::run(
            target.clone(),
            control,
            telemetry.clone(),
            (failed_over_tx, failed_back_tx),
            stop.clone(),
        ),
    );
    let ctx = DiscoveryContext {
        clusters: Live { source, target },
        plugins,
        interval: flow.settings.refresh_topics_interval,
        replication_factor: rf,
        sync_topic_configs: flow.settings.sync_topic_configs,
        telemetry: telemetry.clone(),
        policy_name: flow.slots.replication_policy.to_string(),
        leader,
        claims,
        failed_over,
        failed_back,
    };
    tasks.spawn(
        "discovery",
        discovery::task::run(ctx, routes_tx, stop.clone()),
    );

    finish(tasks, &name, &stop, &telemetry).await
}

/// Waits for the flow's tasks and reports how it ended.
async fn finish(
    tasks: Tasks,
    name: &str,
    stop: &CancellationToken,
    telemetry: &FlowTelemetry,
) -> Result<(), FlowError> {
    let result = tasks.join(name, stop).await;
    let state = if result.is_ok() { "stopped" } else { "failed" };
    telemetry.update(|s| s.state = state);
    tracing::info!(flow = %name, records = telemetry.count(Counter::Records), "flow stopped");
    result
}

/// The names of a record-transform chain's links, in order.
pub fn chain_names(chain: &[crate::policy::ChainLink]) -> Vec<String> {
    chain.iter().map(|l| l.name.clone()).collect()
}

/// The flow's instances in the other delivery mode, seen through their group: the
/// at-least-once replicators' group on the source, or the exactly-once shards' group on the
/// target.
#[derive(Clone)]
struct OtherMode {
    cluster: Cluster,
    group: String,
    mode: &'static str,
}

impl OtherMode {
    /// The other mode of an instance that runs exactly once (`exactly_once`) or not.
    fn of(exactly_once: bool, source: &Cluster, target: &Cluster, src: &str, dst: &str) -> Self {
        if exactly_once {
            OtherMode {
                cluster: source.clone(),
                group: progress_group(src, dst),
                mode: "at-least-once",
            }
        } else {
            OtherMode {
                cluster: target.clone(),
                group: exactly_once::shards::shards_group(src, dst),
                mode: "exactly-once",
            }
        }
    }

    /// How many members the other mode's group has (`None`: it could not be read).
    async fn members(&self, telemetry: &FlowTelemetry) -> Option<usize> {
        match self.cluster.group(&self.group).await {
            Ok(info) => Some(info.map_or(0, |i| i.members)),
            Err(e) => {
                telemetry.note_error("describe the flow's groups", "kafka", &e);
                None
            }
        }
    }

    fn message(&self, members: usize) -> String {
        format!(
            "{} instances of this flow run (their group {} on cluster {} has {members} member(s)): both delivery modes at once would mirror every record twice",
            self.mode, self.group, self.cluster.alias
        )
    }

    /// Waits until the other mode's group is empty (checked every 2 s); `false` if the
    /// flow was stopped meanwhile.
    async fn wait_until_gone(
        &self,
        flow: &str,
        telemetry: &FlowTelemetry,
        stop: &CancellationToken,
    ) -> bool {
        let (mut waited, mut failed) = (false, 0);
        loop {
            match self.members(telemetry).await {
                Some(0) => {
                    if waited {
                        tracing::info!(flow, group = %self.group, "the {} instances of this flow stopped: mirroring starts", self.mode);
                    }
                    return true;
                }
                Some(members) => {
                    if !waited {
                        tracing::warn!(flow, group = %self.group, members, "{}; this instance waits until they stop (a rolling update that switches the mode goes on once the last of them stopped)", self.message(members));
                    }
                    waited = true;
                    telemetry.note_error(
                        "wait for the other delivery mode's instances to stop",
                        "mode",
                        &self.message(members),
                    );
                }
                // Once members were seen, a failure to describe them again (a coordinator
                // moving) is no reason to go on: waited out.
                None if waited || failed < 2 => failed += 1,
                None => {
                    // Never described (no DESCRIBE on the group, or the cluster does not
                    // serve it): the check cannot be made, and it never keeps a flow from
                    // running.
                    tracing::warn!(flow, group = %self.group, "cannot tell whether {} instances of this flow run (their group could not be described; see the flow's last error): going on", self.mode);
                    return true;
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return false,
                _ = tokio::time::sleep(std::time::Duration::from_secs(2)) => {}
            }
        }
    }

    /// Fails the flow if the other mode's group gains members while this one runs:
    /// instances of both modes started at the same moment. Checked every second for the
    /// first half minute (when that happens: what this instance mirrors meanwhile is
    /// mirrored again by the other), every 5 s after.
    async fn refuse_while_running(
        &self,
        flow: &str,
        stop: &CancellationToken,
    ) -> Result<(), FlowError> {
        let started = tokio::time::Instant::now();
        loop {
            let every = if started.elapsed() < std::time::Duration::from_secs(30) {
                std::time::Duration::from_secs(1)
            } else {
                std::time::Duration::from_secs(5)
            };
            tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                _ = tokio::time::sleep(every) => {}
            }
            // A group that cannot be described is reported by `wait_until_gone` once; the
            // watch does not repeat it at every look.
            if let Ok(Some(info)) = self.cluster.group(&self.group).await
                && info.members > 0
            {
                return Err(FlowError::ModeConflict {
                    flow: flow.to_string(),
                    message: format!(
                        "{}; this at-least-once flow stops and starts again, then waits until they stop",
                        self.message(info.members)
                    ),
                });
            }
        }
    }
}

/// Before an instance without `single_instance` joins the flow's groups: if the flow's
/// lease topic says a single instance holds the lease (or cannot tell), the lease is taken
/// — fencing that instance — and let go once it has had its lease's time to stop. Another
/// instance doing the same at once fences this one's take: it waits the lease all the same.
async fn fence_a_single_instance(
    source: &Cluster,
    names: (&str, &str, &str),
    lease: std::time::Duration,
    telemetry: &FlowTelemetry,
    stop: &CancellationToken,
) {
    let listed = retry("list the source topics", telemetry, stop, || {
        source.topics()
    });
    let Some(topics) = listed.await else {
        return;
    };
    if !topics.contains_key(names.1) {
        return; // the flow never ran as a single instance
    }
    let Some(tail) = single::last_lease(source, names.1, names.2, telemetry, stop).await else {
        return;
    };
    if single::wait_before_mirroring(&tail, lease).is_zero() {
        return;
    }
    let taken = single::Lease::take(source, names, lease, telemetry, stop).await;
    tracing::info!(flow = %names.0, wait_ms = lease.as_millis() as u64, "a single instance may still run: its lease is taken (it is fenced); joining the groups once it has had its lease's time to stop");
    tokio::select! {
        _ = stop.cancelled() => return,
        _ = tokio::time::sleep(lease) => {}
    }
    if let Ok(Some((taken, _))) = taken {
        // Fenced meanwhile by an instance doing the same: nothing to let go.
        let _ = taken.release().await;
    }
}
