//! The discovery pass against scripted clusters: this broker (Tansu) serves neither
//! CreatePartitions nor DescribeConfigs entries, and failures and races are easier to
//! script than to provoke, so the pass's handling of them is tested here.

use super::*;
use crate::config::SyncsLocation;
use crate::flow::Route;
use crate::kafka::TopicConfigEntry;
use std::sync::Mutex;

#[derive(Default)]
struct Fake {
    source: Mutex<Snapshot>,
    target: Mutex<Snapshot>,
    /// The source topics' configs, or the error describing them gives.
    configs: Mutex<Option<Result<Vec<TopicConfigEntry>, String>>>,
    /// Target topic -> its own configs.
    overrides: Mutex<BTreeMap<String, BTreeMap<String, String>>>,
    created: Mutex<Vec<TopicSpec>>,
    altered: Mutex<Vec<(String, Vec<(String, String)>)>>,
    fail_create: Mutex<Option<String>>,
    fail_grow: Mutex<Option<String>>,
    /// A creation finds the topic existing with this many partitions.
    exists_with: Mutex<Option<i32>>,
    /// Runs while a creation is under way (e.g. a reload swapping the plugins).
    during_create: Mutex<Option<Box<dyn FnMut() + Send>>>,
    /// Runs while the target's topics are listed.
    during_list: Mutex<Option<Box<dyn FnMut() + Send>>>,
    /// How long describing a target topic's configs takes.
    describe_takes: Mutex<Duration>,
    /// Source topic -> its topic id (none: the broker serves no ids).
    ids: Mutex<BTreeMap<String, String>>,
    /// The target's listing lags: what is created or grown is not listed (a broker that
    /// has not caught up with the controller answers).
    lagging: Mutex<bool>,
    /// Every growth asked for: topic, partitions.
    grown: Mutex<Vec<(String, i32)>>,
    /// What exists on the target whatever its listing says: topic -> partitions.
    exists: Mutex<Snapshot>,
    /// Listing the source fails.
    fail_list: Mutex<bool>,
}

fn error(message: &str) -> KafkaError {
    KafkaError {
        cluster: "backup".into(),
        operation: "scripted".into(),
        message: message.into(),
    }
}

impl Clusters for Arc<Fake> {
    fn source_alias(&self) -> &str {
        "primary"
    }
    fn target_alias(&self) -> &str {
        "backup"
    }
    async fn source_topics(&self) -> Result<Snapshot, KafkaError> {
        if *self.fail_list.lock().unwrap() {
            return Err(error("ListTopics: timed out"));
        }
        Ok(self.source.lock().unwrap().clone())
    }
    async fn target_topics(&self) -> Result<Snapshot, KafkaError> {
        if let Some(f) = self.during_list.lock().unwrap().as_mut() {
            f();
        }
        Ok(self.target.lock().unwrap().clone())
    }
    async fn source_topic_ids(
        &self,
        topics: Vec<String>,
    ) -> Result<BTreeMap<String, String>, KafkaError> {
        let ids = self.ids.lock().unwrap();
        Ok(topics
            .into_iter()
            .filter_map(|t| ids.get(&t).map(|id| (t, id.clone())))
            .collect())
    }
    async fn create_topics(
        &self,
        specs: Vec<TopicSpec>,
    ) -> Vec<(String, Result<Creation, KafkaError>)> {
        if let Some(f) = self.during_create.lock().unwrap().as_mut() {
            f();
        }
        specs
            .into_iter()
            .map(|spec| {
                let name = spec.name.clone();
                if let Some(why) = self.fail_create.lock().unwrap().clone() {
                    return (name, Err(error(&why)));
                }
                if let Some(have) = *self.exists_with.lock().unwrap() {
                    self.target.lock().unwrap().insert(name.clone(), have);
                    return (name, Ok(Creation::Existed));
                }
                if let Some(have) = self.exists.lock().unwrap().get(&name) {
                    if !*self.lagging.lock().unwrap() {
                        self.target.lock().unwrap().insert(name.clone(), *have);
                    }
                    return (name, Ok(Creation::Existed));
                }
                self.exists
                    .lock()
                    .unwrap()
                    .insert(name.clone(), spec.partitions);
                if !*self.lagging.lock().unwrap() {
                    self.target
                        .lock()
                        .unwrap()
                        .insert(name.clone(), spec.partitions);
                }
                self.created.lock().unwrap().push(spec);
                (name, Ok(Creation::Created))
            })
            .collect()
    }
    async fn add_partitions(&self, topic: String, count: i32) -> Result<(), KafkaError> {
        if let Some(why) = self.fail_grow.lock().unwrap().clone() {
            return Err(error(&why));
        }
        self.grown.lock().unwrap().push((topic.clone(), count));
        let mut exists = self.exists.lock().unwrap();
        if exists.get(&topic).is_some_and(|have| *have >= count) {
            return Err(error(&format!(
                "INVALID_PARTITIONS: {topic} already has {count} partitions"
            )));
        }
        exists.insert(topic.clone(), count);
        if !*self.lagging.lock().unwrap() {
            self.target.lock().unwrap().insert(topic, count);
        }
        Ok(())
    }
    async fn source_configs(&self, _: String) -> Result<Vec<TopicConfigEntry>, KafkaError> {
        self.configs
            .lock()
            .unwrap()
            .clone()
            .unwrap_or(Ok(Vec::new()))
            .map_err(|e| error(&e))
    }
    async fn target_configs(&self, topic: String) -> Result<BTreeMap<String, String>, KafkaError> {
        let takes = *self.describe_takes.lock().unwrap();
        tokio::time::sleep(takes).await;
        Ok(self
            .overrides
            .lock()
            .unwrap()
            .get(&topic)
            .cloned()
            .unwrap_or_default())
    }
    async fn set_target_configs(
        &self,
        topic: String,
        configs: Vec<(String, String)>,
    ) -> Result<(), KafkaError> {
        // Incremental: only the keys given are set.
        self.overrides
            .lock()
            .unwrap()
            .entry(topic.clone())
            .or_default()
            .extend(configs.iter().cloned());
        self.altered.lock().unwrap().push((topic, configs));
        Ok(())
    }
}

fn compacted() -> Vec<TopicConfigEntry> {
    vec![TopicConfigEntry {
        name: "cleanup.policy".into(),
        value: "compact".into(),
        is_default: false,
    }]
}

struct Harness {
    fake: Arc<Fake>,
    discovery: Discovery<Arc<Fake>>,
    routes: watch::Sender<Routes>,
    plugins: FlowPlugins,
    _leader: watch::Sender<bool>,
    failed_over: watch::Sender<FailedOver>,
}

/// A control topic read to its end, naming no topic.
fn none_failed_over() -> watch::Receiver<FailedOver> {
    watch::channel(Some(Arc::default())).1
}

/// An instance elected while discovery waits for its next pass creates the target topics
/// at once, not an interval (here an hour) later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_runs_a_pass_at_once() {
    let fake = Arc::new(Fake::default());
    *fake.source.lock().unwrap() = [("orders".to_string(), 2)].into();
    *fake.configs.lock().unwrap() = Some(Ok(compacted()));
    let (leader_tx, leader) = watch::channel(false);
    let ctx = DiscoveryContext {
        clusters: fake.clone(),
        plugins: FlowPlugins::new(
            crate::flow::testing::roles("default-policy", ".*"),
            "primary",
            "backup",
            SyncsLocation::Source,
        ),
        interval: Duration::from_secs(3600),
        replication_factor: None,
        sync_topic_configs: Some(Duration::from_secs(600)),
        telemetry: Arc::new(FlowTelemetry::new("primary->backup")),
        policy_name: "default-policy".into(),
        leader,
        claims: TargetClaims::default(),
        failed_over: none_failed_over(),
        failed_back: watch::channel(Arc::default()).1,
    };
    let telemetry = ctx.telemetry.clone();
    let (routes, _) = watch::channel(Routes::new());
    let stop = CancellationToken::new();
    let task = tokio::spawn(run(ctx, routes, stop.clone()));
    async fn until(what: &str, done: impl Fn() -> bool) {
        let started = Instant::now();
        while !done() {
            assert!(started.elapsed() < Duration::from_secs(20), "{what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    until("the first pass, as a follower", || {
        telemetry.status().last_discovery_ms.is_some()
    })
    .await;
    assert!(
        fake.created.lock().unwrap().is_empty(),
        "a follower creates nothing"
    );
    leader_tx.send_replace(true);
    until("the new leader's pass", || {
        !fake.created.lock().unwrap().is_empty()
    })
    .await;
    stop.cancel();
    task.await.unwrap();
}

fn harness(source: &[(&str, i32)], claims: TargetClaims, flow: &str) -> Harness {
    let fake = Arc::new(Fake::default());
    *fake.source.lock().unwrap() = source.iter().map(|(t, p)| (t.to_string(), *p)).collect();
    *fake.configs.lock().unwrap() = Some(Ok(compacted()));
    let plugins = FlowPlugins::new(
        crate::flow::testing::roles("default-policy", ".*"),
        "primary",
        "backup",
        SyncsLocation::Source,
    );
    let (leader_tx, leader) = watch::channel(true);
    let (failed_over_tx, failed_over) = watch::channel(Some(Arc::default()));
    let ctx = DiscoveryContext {
        clusters: fake.clone(),
        plugins: plugins.clone(),
        interval: Duration::from_secs(1),
        replication_factor: None,
        sync_topic_configs: Some(Duration::from_secs(600)),
        telemetry: Arc::new(FlowTelemetry::new(flow)),
        policy_name: "default-policy".into(),
        leader,
        claims,
        failed_over,
        failed_back: watch::channel(Arc::default()).1,
    };
    let (routes, _) = watch::channel(Routes::new());
    Harness {
        fake,
        discovery: Discovery::new(ctx),
        routes,
        plugins,
        _leader: leader_tx,
        failed_over: failed_over_tx,
    }
}

impl Harness {
    async fn pass(&mut self) -> bool {
        self.discovery.pass(&self.routes).await
    }
    fn routes(&self) -> Routes {
        self.routes.borrow().clone()
    }
    fn health(&self) -> crate::flow::telemetry::Health {
        self.discovery.ctx.telemetry.health()
    }
}

#[tokio::test]
async fn a_topic_whose_configs_cannot_be_read_is_not_created_without_them() {
    let mut h = harness(
        &[("compacted", 2)],
        TargetClaims::default(),
        "primary->backup",
    );
    *h.fake.configs.lock().unwrap() = Some(Err("DescribeConfigs: not authorized".into()));
    assert!(h.pass().await);
    assert!(
        h.fake.created.lock().unwrap().is_empty(),
        "not created with no configs"
    );
    assert!(h.routes().is_empty());
    let health = h.health();
    assert_eq!(health.state, "degraded");
    assert!(
        health
            .reasons
            .iter()
            .any(|r| r.contains("compacted") && r.contains("not authorized")),
        "{health:?}"
    );
    // Readable again: created with the source's configs.
    *h.fake.configs.lock().unwrap() = Some(Ok(compacted()));
    assert!(h.pass().await);
    let created = h.fake.created.lock().unwrap().clone();
    assert_eq!(created.len(), 1);
    assert_eq!(
        created[0].configs,
        vec![("cleanup.policy".to_string(), "compact".to_string())]
    );
    assert_eq!(
        h.routes().get("compacted"),
        Some(&Route::new("primary.compacted", 2))
    );
    assert_eq!(h.health().state, "ok");
}

#[tokio::test]
async fn existing_target_topics_get_the_source_configs_every_interval() {
    let mut h = harness(&[("orders", 1)], TargetClaims::default(), "primary->backup");
    h.fake
        .target
        .lock()
        .unwrap()
        .insert("primary.orders".into(), 1);
    h.fake.overrides.lock().unwrap().insert(
        "primary.orders".into(),
        [
            ("cleanup.policy".to_string(), "delete".to_string()),
            ("retention.ms".to_string(), "1000".to_string()),
        ]
        .into(),
    );
    assert!(h.pass().await);
    assert_eq!(
        *h.fake.altered.lock().unwrap(),
        vec![(
            "primary.orders".to_string(),
            vec![("cleanup.policy".to_string(), "compact".to_string())]
        )],
        "the drifted config is synced"
    );
    // Not again before the interval; and nothing when they agree.
    h.discovery.configs_synced = None;
    assert!(h.pass().await);
    assert_eq!(
        h.fake.altered.lock().unwrap().len(),
        1,
        "in sync: nothing altered"
    );
}

#[tokio::test]
async fn a_config_sync_round_over_many_topics_spreads_over_passes_instead_of_holding_one() {
    let names: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
    let topics: Vec<(&str, i32)> = names.iter().map(|n| (n.as_str(), 1)).collect();
    let mut h = harness(&topics, TargetClaims::default(), "primary->backup");
    for n in &names {
        h.fake
            .target
            .lock()
            .unwrap()
            .insert(format!("primary.{n}"), 1);
    }
    // Each description takes 150 ms (8 at once): 40 topics take about 750 ms.
    *h.fake.describe_takes.lock().unwrap() = Duration::from_millis(150);
    assert!(h.pass().await);
    let first = h.fake.altered.lock().unwrap().len();
    // A pass stops syncing after 0.5 s (checked between groups of 8): 8-32 topics.
    assert!(
        (8..40).contains(&first),
        "the first pass synced part of the round: {first}"
    );
    // The next pass goes on with the round, not a new one.
    assert!(h.pass().await);
    assert_eq!(
        h.fake.altered.lock().unwrap().len(),
        40,
        "every drifted topic synced once"
    );
    assert!(h.pass().await);
    assert_eq!(
        h.fake.altered.lock().unwrap().len(),
        40,
        "the round is over"
    );
}

#[tokio::test]
async fn a_topic_created_meanwhile_with_fewer_partitions_is_mirrored_as_it_is() {
    let mut h = harness(&[("orders", 4)], TargetClaims::default(), "primary->backup");
    *h.fake.exists_with.lock().unwrap() = Some(2);
    assert!(h.pass().await);
    assert_eq!(
        h.routes().get("orders"),
        Some(&Route::new("primary.orders", 2)),
        "only the partitions the target has; the next pass grows it"
    );
    *h.fake.exists_with.lock().unwrap() = None;
    assert!(h.pass().await);
    assert_eq!(
        h.routes().get("orders"),
        Some(&Route::new("primary.orders", 4))
    );
}

#[tokio::test]
async fn failed_creation_and_growth_degrade_the_flow_until_they_work() {
    let mut h = harness(
        &[("orders", 2), ("grows", 4)],
        TargetClaims::default(),
        "primary->backup",
    );
    h.fake
        .target
        .lock()
        .unwrap()
        .insert("primary.grows".into(), 2);
    *h.fake.fail_create.lock().unwrap() = Some("policy violation".into());
    *h.fake.fail_grow.lock().unwrap() = Some("not authorized".into());
    assert!(h.pass().await);
    assert_eq!(h.routes().get("orders"), None);
    assert_eq!(
        h.routes().get("grows"),
        Some(&Route::new("primary.grows", 2)),
        "the partitions the target has"
    );
    let health = h.health();
    assert_eq!(health.state, "degraded");
    let all = health.reasons.join("\n");
    assert!(
        all.contains("creating target topic primary.orders failed")
            && all.contains("policy violation"),
        "{all}"
    );
    assert!(
        all.contains("primary.grows could not be grown from 2 to 4")
            && all.contains("not authorized"),
        "{all}"
    );
    *h.fake.fail_create.lock().unwrap() = None;
    *h.fake.fail_grow.lock().unwrap() = None;
    assert!(h.pass().await);
    assert_eq!(
        h.routes().get("orders"),
        Some(&Route::new("primary.orders", 2))
    );
    assert_eq!(
        h.routes().get("grows"),
        Some(&Route::new("primary.grows", 4))
    );
    assert_eq!(h.health().state, "ok");
}

#[tokio::test]
async fn a_pass_during_which_the_plugins_were_replaced_is_dropped() {
    let mut h = harness(&[("orders", 1)], TargetClaims::default(), "primary->backup");
    // A reload installs a renaming policy while the pass creates the topic it decided
    // under the old one.
    let plugins = h.plugins.clone();
    *h.fake.during_create.lock().unwrap() = Some(Box::new(move || {
        plugins.replace(crate::flow::testing::roles("identity-policy", ".*"));
    }));
    assert!(!h.pass().await, "dropped");
    assert!(
        h.routes().is_empty(),
        "nothing published under the old name"
    );
    assert!(h.discovery.ctx.telemetry.status().mirrored.is_empty());
    *h.fake.during_create.lock().unwrap() = None;
    assert!(h.pass().await);
    assert_eq!(
        h.routes().get("orders").map(|r| r.target.as_str()),
        Some("orders"),
        "decided again by the new policy"
    );
}

#[tokio::test]
async fn a_pass_whose_plugins_were_replaced_before_it_applied_creates_nothing() {
    let mut h = harness(&[("orders", 1)], TargetClaims::default(), "primary->backup");
    let plugins = h.plugins.clone();
    *h.fake.during_list.lock().unwrap() = Some(Box::new(move || {
        plugins.replace(crate::flow::testing::roles("identity-policy", ".*"));
    }));
    assert!(!h.pass().await, "dropped");
    assert!(
        h.fake.created.lock().unwrap().is_empty(),
        "no topic created for a pass whose plugins changed under it"
    );
    *h.fake.during_list.lock().unwrap() = None;
    assert!(h.pass().await);
    let created: Vec<String> = h
        .fake
        .created
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(
        created,
        vec!["orders".to_string()],
        "only the new policy's name"
    );
}

#[tokio::test]
async fn two_flows_into_one_target_topic_mirror_neither() {
    let claims = TargetClaims::default();
    let mut a = harness(&[("orders", 1), ("a-only", 1)], claims.clone(), "a->backup");
    let mut b = harness(&[("orders", 1)], claims.clone(), "b->backup");
    for h in [&mut a, &mut b] {
        h.discovery.ctx.plugins = FlowPlugins::new(
            crate::flow::testing::roles("identity-policy", ".*"),
            "primary",
            "backup",
            SyncsLocation::Source,
        );
    }
    assert!(a.pass().await);
    assert!(a.routes().contains_key("orders"), "alone so far");
    assert!(b.pass().await);
    assert!(!b.routes().contains_key("orders"));
    assert!(a.pass().await);
    assert!(
        !a.routes().contains_key("orders"),
        "now both want it: neither mirrors it"
    );
    assert!(a.routes().contains_key("a-only"));
    let reasons = a.health().reasons.join("\n");
    assert!(
        reasons.contains("flow(s) b->backup also mirror into target topic orders"),
        "{reasons}"
    );
}

/// A mirrored source topic whose id changes — deleted and created again between two
/// passes, or within one — is reported once per change: counter, `/status`, and not for a
/// topic seen for the first time or one whose id stays.
#[tokio::test]
async fn a_source_topic_created_again_under_its_name_is_reported() {
    let mut h = harness(
        &[("orders", 1), ("steady", 1)],
        TargetClaims::default(),
        "primary->backup",
    );
    let set_ids = |h: &Harness, ids: &[(&str, &str)]| {
        *h.fake.ids.lock().unwrap() = ids
            .iter()
            .map(|(t, id)| (t.to_string(), id.to_string()))
            .collect();
    };
    // Each pass below checks at once, as if the check's interval had passed.
    let due = |h: &mut Harness| h.discovery.ids_asked = None;
    set_ids(&h, &[("orders", "A"), ("steady", "S")]);
    assert!(h.pass().await);
    due(&mut h);
    assert!(h.pass().await);
    let t = h.discovery.ctx.telemetry.clone();
    assert_eq!(
        t.count(Counter::SourceTopicsRecreated),
        0,
        "first sight, same ids"
    );

    // Deleted and created again within one pass; not seen until the check is due.
    set_ids(&h, &[("orders", "B"), ("steady", "S")]);
    assert!(h.pass().await);
    assert_eq!(
        t.count(Counter::SourceTopicsRecreated),
        0,
        "checked every 30 s"
    );
    due(&mut h);
    assert!(h.pass().await);
    assert_eq!(t.count(Counter::SourceTopicsRecreated), 1);
    let r = t.status().source_recreated["orders"].clone();
    assert_eq!(
        (
            r.times,
            r.target.as_str(),
            r.topic_id_before.as_str(),
            r.topic_id.as_str()
        ),
        (1, "primary.orders", "A", "B")
    );
    assert!(!t.status().source_recreated.contains_key("steady"));

    // Deleted (a pass without it), then created again: its old id was kept.
    h.fake.source.lock().unwrap().remove("orders");
    set_ids(&h, &[("steady", "S")]);
    due(&mut h);
    assert!(h.pass().await);
    h.fake.source.lock().unwrap().insert("orders".into(), 1);
    set_ids(&h, &[("orders", "C"), ("steady", "S")]);
    due(&mut h);
    assert!(h.pass().await);
    due(&mut h);
    assert!(h.pass().await);
    assert_eq!(t.count(Counter::SourceTopicsRecreated), 2);
    assert_eq!(t.status().source_recreated["orders"].topic_id, "C");
    // Not an error of the flow: nothing counted as one.
    assert_eq!(t.count(Counter::Errors), 0);
}

/// A target whose listing lags what was created and grown (a broker of a busy multi-broker
/// cluster behind its controller): the next passes neither create nor grow again what this
/// loop made, its routes stay, and once the listing shows it nothing changes.
#[tokio::test]
async fn what_was_created_or_grown_is_not_asked_for_again_while_the_listing_lags() {
    let mut h = harness(&[("orders", 1)], TargetClaims::default(), "primary->backup");
    *h.fake.lagging.lock().unwrap() = true;
    assert!(h.pass().await);
    assert_eq!(h.fake.created.lock().unwrap().len(), 1);
    let route = Some(Route::new("primary.orders", 1));
    assert_eq!(h.routes().get("orders"), route.as_ref());
    assert!(h.pass().await);
    assert!(h.pass().await);
    assert_eq!(
        h.fake.created.lock().unwrap().len(),
        1,
        "created once, though not listed"
    );
    assert_eq!(h.routes().get("orders"), route.as_ref());
    assert_eq!(h.health().state, "ok", "{:?}", h.health());

    // Grown at the source: grown once on the target, and mirrored with 3 partitions while
    // the listing still says 1.
    h.fake.source.lock().unwrap().insert("orders".into(), 3);
    assert!(h.pass().await);
    assert!(h.pass().await);
    assert_eq!(
        *h.fake.grown.lock().unwrap(),
        vec![("primary.orders".to_string(), 3)]
    );
    assert_eq!(
        h.routes().get("orders"),
        Some(&Route::new("primary.orders", 3))
    );
    assert_eq!(h.health().state, "ok", "{:?}", h.health());

    // The listing catches up: nothing more is asked for.
    *h.fake.lagging.lock().unwrap() = false;
    h.fake
        .target
        .lock()
        .unwrap()
        .insert("primary.orders".into(), 3);
    assert!(h.pass().await);
    assert_eq!(h.fake.created.lock().unwrap().len(), 1);
    assert_eq!(h.fake.grown.lock().unwrap().len(), 1);
    assert!(h.discovery.made.is_empty(), "forgotten once listed");
}

/// A topic failed over (the control topic names it) stops being mirrored, one never
/// mirrored is not created, and `/status` names them; the control topic not read yet holds
/// every pass; an entry removed (a failback) mirrors its topic again.
#[tokio::test]
async fn a_topic_failed_over_is_not_mirrored_until_its_entry_goes() {
    let mut h = harness(
        &[("orders", 2), ("payments", 1)],
        TargetClaims::default(),
        "primary->backup",
    );
    let entry = |target: &str| TopicFailedOver {
        target_topic: target.into(),
        at_ms: 7,
        unmirrored: BTreeMap::new(),
    };
    h.failed_over.send_replace(None);
    assert!(
        !h.pass().await,
        "nothing published before the control topic is read"
    );
    assert!(h.fake.created.lock().unwrap().is_empty());
    h.failed_over.send_replace(Some(Arc::default()));
    assert!(h.pass().await);
    assert_eq!(h.routes().len(), 2);

    // orders failed over while mirrored; refunds (new, never mirrored) failed over too.
    h.fake.source.lock().unwrap().insert("refunds".into(), 1);
    let stopped: BTreeMap<String, TopicFailedOver> = [
        ("orders".to_string(), entry("primary.orders")),
        ("refunds".to_string(), entry("primary.refunds")),
    ]
    .into();
    h.failed_over.send_replace(Some(Arc::new(stopped)));
    let created_before = h.fake.created.lock().unwrap().len();
    assert!(h.pass().await);
    assert_eq!(
        h.routes().keys().collect::<Vec<_>>(),
        ["payments"],
        "only the topic not failed over"
    );
    assert_eq!(
        h.fake.created.lock().unwrap().len(),
        created_before,
        "refunds not created"
    );
    let status = h.discovery.ctx.telemetry.status();
    let shown = status
        .failed_over
        .get("orders")
        .expect("orders in failed_over");
    assert_eq!((shown.target.as_str(), shown.at_ms), ("primary.orders", 7));
    assert!(
        status.failed_over.contains_key("refunds"),
        "{:?}",
        status.failed_over
    );
    assert!(!status.mirrored.contains_key("orders"));
    assert_eq!(h.health().state, "ok", "a failover is not a problem");

    // The entries removed: mirrored (and created) again.
    h.failed_over.send_replace(Some(Arc::default()));
    assert!(h.pass().await);
    assert_eq!(h.routes().len(), 3, "{:?}", h.routes());
    assert!(
        h.fake
            .created
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.name == "primary.refunds")
    );
    assert!(h.discovery.ctx.telemetry.status().failed_over.is_empty());
}

/// The stop does not wait for a listing: the routes published last lose the topic at once.
#[tokio::test]
async fn a_failover_stops_its_topic_even_when_the_pass_cannot_list() {
    let mut h = harness(&[("orders", 1)], TargetClaims::default(), "primary->backup");
    assert!(h.pass().await);
    assert!(h.routes().contains_key("orders"));
    *h.fake.fail_list.lock().unwrap() = true;
    let stopped: BTreeMap<String, TopicFailedOver> = [(
        "orders".to_string(),
        TopicFailedOver {
            target_topic: "primary.orders".into(),
            at_ms: 1,
            unmirrored: BTreeMap::new(),
        },
    )]
    .into();
    h.failed_over.send_replace(Some(Arc::new(stopped)));
    assert!(!h.pass().await, "the listing failed");
    assert!(h.routes().is_empty(), "{:?}", h.routes());
}
