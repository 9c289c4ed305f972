//! The ACL sync loop against scripted clusters. No end-to-end ACL test can exist here:
//! this project's broker (Tansu 0.6.0) lists no ACLs and answers CreateAcls with a
//! response that makes librdkafka abort the process. So the rules are covered by pure
//! tests (`rules::tests`) and the loop here, behind the `AclClusters` trait: bindings on
//! both sides, SECURITY_DISABLED, failing creations and deletions, leadership.

use super::*;
use crate::config::SyncsLocation;
use crate::flow::Route;
use crate::kafka::KafkaError;
use crate::kafka::acls::{AclOperation, AclPermission, PatternType};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What a scripted listing answers.
#[derive(Clone)]
enum Listing {
    Bindings(Vec<AclBinding>),
    NotServed,
    Fails,
}

impl Listing {
    fn answer(&self, cluster: &str) -> Result<Vec<AclBinding>, AclError> {
        match self {
            Listing::Bindings(b) => Ok(b.clone()),
            Listing::NotServed => Err(AclError::NotServed(error(
                cluster,
                "No Authorizer is configured on the broker (SECURITY_DISABLED)",
            ))),
            Listing::Fails => Err(AclError::Failed(error(cluster, "timed out"))),
        }
    }
}

fn error(cluster: &str, message: &str) -> KafkaError {
    KafkaError {
        cluster: cluster.into(),
        operation: "scripted".into(),
        message: message.into(),
    }
}

struct Fake {
    source: Mutex<Listing>,
    /// The target's bindings (creations and deletions apply to them).
    target: Mutex<Vec<AclBinding>>,
    target_answer: Mutex<Option<Listing>>,
    /// The next this many creations fail, each binding with this error.
    fail_creates: Mutex<(usize, Option<Listing>)>,
    fail_deletes: Mutex<usize>,
    listings: AtomicUsize,
    create_calls: Mutex<Vec<Vec<AclBinding>>>,
    delete_calls: Mutex<Vec<Vec<AclBinding>>>,
    /// The ledger on the target: the bindings the flow created and did not delete.
    ledger: Mutex<BTreeSet<AclBinding>>,
    /// Reading the ledger fails.
    ledger_unreadable: Mutex<bool>,
    /// Writing to the ledger fails.
    ledger_unwritable: Mutex<bool>,
}

impl Default for Fake {
    fn default() -> Self {
        Fake {
            source: Mutex::new(Listing::Bindings(Vec::new())),
            target: Mutex::default(),
            target_answer: Mutex::default(),
            fail_creates: Mutex::new((0, None)),
            fail_deletes: Mutex::default(),
            listings: AtomicUsize::new(0),
            create_calls: Mutex::default(),
            delete_calls: Mutex::default(),
            ledger: Mutex::default(),
            ledger_unreadable: Mutex::default(),
            ledger_unwritable: Mutex::default(),
        }
    }
}

impl AclClusters for Arc<Fake> {
    fn source_alias(&self) -> &str {
        "primary"
    }
    fn target_alias(&self) -> &str {
        "backup"
    }
    async fn source_acls(&self) -> Result<Vec<AclBinding>, AclError> {
        self.listings.fetch_add(1, Ordering::SeqCst);
        self.source.lock().unwrap().answer("primary")
    }
    async fn target_acls(&self) -> Result<Vec<AclBinding>, AclError> {
        match self.target_answer.lock().unwrap().clone() {
            Some(scripted) => scripted.answer("backup"),
            None => Ok(self.target.lock().unwrap().clone()),
        }
    }
    async fn create(&self, bindings: Vec<AclBinding>) -> Vec<Result<(), AclError>> {
        assert!(!bindings.is_empty(), "CreateAcls is never sent empty");
        self.create_calls.lock().unwrap().push(bindings.clone());
        let mut fail = self.fail_creates.lock().unwrap();
        if fail.0 > 0 {
            fail.0 -= 1;
            let how = fail.1.clone().unwrap_or(Listing::Fails);
            return bindings
                .iter()
                .map(|_| how.answer("backup").map(|_| ()))
                .collect();
        }
        self.target.lock().unwrap().extend(bindings.iter().cloned());
        bindings.iter().map(|_| Ok(())).collect()
    }
    async fn delete(&self, bindings: Vec<AclBinding>) -> Vec<Result<usize, AclError>> {
        assert!(!bindings.is_empty(), "DeleteAcls is never sent empty");
        self.delete_calls.lock().unwrap().push(bindings.clone());
        let mut fail = self.fail_deletes.lock().unwrap();
        if *fail > 0 {
            *fail -= 1;
            return bindings
                .iter()
                .map(|_| Err(AclError::Failed(error("backup", "not authorized"))))
                .collect();
        }
        let mut target = self.target.lock().unwrap();
        bindings
            .iter()
            .map(|b| {
                let before = target.len();
                target.retain(|t| t != b);
                Ok(before - target.len())
            })
            .collect()
    }
    async fn synced(&self) -> Result<super::super::ledger::Fold, KafkaError> {
        if *self.ledger_unreadable.lock().unwrap() {
            return Err(error(
                "backup",
                "read kmirror-acls.primary.internal: timed out",
            ));
        }
        Ok(super::super::ledger::Fold {
            synced: self.ledger.lock().unwrap().clone(),
            malformed: 0,
        })
    }
    async fn record(
        &self,
        flow: &str,
        _: Option<i32>,
        created: Vec<AclBinding>,
        deleted: Vec<AclBinding>,
    ) -> Result<(), KafkaError> {
        assert_eq!(flow, "primary->backup");
        if *self.ledger_unwritable.lock().unwrap() {
            return Err(error(
                "backup",
                "write to kmirror-acls.primary.internal: timed out",
            ));
        }
        let mut ledger = self.ledger.lock().unwrap();
        ledger.extend(created);
        for b in &deleted {
            ledger.remove(b);
        }
        Ok(())
    }
}

fn acl(topic: &str, principal: &str, operation: AclOperation) -> AclBinding {
    AclBinding {
        resource_name: topic.into(),
        pattern: PatternType::Literal,
        principal: principal.into(),
        host: "*".into(),
        operation,
        permission: AclPermission::Allow,
    }
}

struct Harness {
    fake: Arc<Fake>,
    sync: AclSync<Arc<Fake>>,
    routes: watch::Sender<Routes>,
    leader: watch::Sender<bool>,
    off: SyncOff,
}

fn harness(delete: bool) -> Harness {
    let fake = Arc::new(Fake::default());
    let plugins = FlowPlugins::new(
        crate::flow::testing::roles("default-policy", "orders.*,payments"),
        "primary",
        "backup",
        SyncsLocation::Source,
    );
    let (routes, routes_rx) = watch::channel(Routes::new());
    let (leader, leader_rx) = watch::channel(true);
    let off = SyncOff::default();
    let ctx = AclContext {
        clusters: fake.clone(),
        plugins,
        interval: Duration::from_millis(20),
        delete,
        replication_factor: None,
        routes: routes_rx,
        leader: leader_rx,
        telemetry: Arc::new(FlowTelemetry::new("primary->backup")),
        off: off.clone(),
    };
    Harness {
        fake,
        sync: AclSync { ctx },
        routes,
        leader,
        off,
    }
}

impl Harness {
    fn source(&self, bindings: Vec<AclBinding>) {
        *self.fake.source.lock().unwrap() = Listing::Bindings(bindings);
    }
    /// The flow created these (its ledger says so).
    fn created_before(&self, bindings: &[AclBinding]) {
        self.fake
            .ledger
            .lock()
            .unwrap()
            .extend(bindings.iter().cloned());
    }
    fn ledger(&self) -> BTreeSet<AclBinding> {
        self.fake.ledger.lock().unwrap().clone()
    }
    fn target(&self) -> BTreeSet<AclBinding> {
        self.fake.target.lock().unwrap().iter().cloned().collect()
    }
    fn creates(&self) -> usize {
        self.fake.create_calls.lock().unwrap().len()
    }
    fn count(&self, c: Counter) -> u64 {
        self.sync.ctx.telemetry.count(c)
    }
    fn last(&self) -> AclSyncStatus {
        self.sync
            .ctx
            .telemetry
            .status()
            .last_acl_sync
            .expect("a pass ran")
    }
    /// A context for another run of the loop, sharing this one's clusters and switch.
    fn context(&self) -> AclContext<Arc<Fake>> {
        AclContext {
            clusters: self.fake.clone(),
            plugins: self.sync.ctx.plugins.clone(),
            interval: self.sync.ctx.interval,
            delete: self.sync.ctx.delete,
            replication_factor: None,
            routes: self.routes.subscribe(),
            leader: self.leader.subscribe(),
            telemetry: self.sync.ctx.telemetry.clone(),
            off: self.off.clone(),
        }
    }
}

fn set(bindings: &[AclBinding]) -> BTreeSet<AclBinding> {
    bindings.iter().cloned().collect()
}

#[tokio::test]
async fn only_missing_bindings_are_created_and_a_second_pass_creates_nothing() {
    let mut h = harness(false);
    h.source(vec![
        acl("orders", "User:alice", AclOperation::Read),
        acl("orders", "User:admin", AclOperation::All),
        acl("orders", "User:producer", AclOperation::Write),
        acl("hidden", "User:alice", AclOperation::Read),
    ]);
    let existing = acl("primary.orders", "User:alice", AclOperation::Read);
    h.fake.target.lock().unwrap().push(existing.clone());
    assert_eq!(h.sync.pass().await, Outcome::Synced);
    let admin_reads = acl("primary.orders", "User:admin", AclOperation::Read);
    assert_eq!(
        *h.fake.create_calls.lock().unwrap(),
        vec![vec![admin_reads.clone()]],
        "only the missing binding, ALL as READ; WRITE and unmirrored topics left out"
    );
    assert_eq!(h.target(), set(&[existing, admin_reads]));
    assert_eq!(h.count(Counter::AclsCreated), 1);
    let last = h.last();
    assert_eq!((last.created, last.deleted, last.failed), (1, 0, 0));
    assert!(last.at_ms > 0 && last.error.is_none() && !last.disabled);

    assert_eq!(h.sync.pass().await, Outcome::Synced);
    assert_eq!(h.creates(), 1, "idempotent: the second pass sends nothing");
    assert_eq!(h.count(Counter::AclsCreated), 1);
    assert_eq!(h.last().created, 0);
}

#[tokio::test]
async fn with_no_source_acls_nothing_is_ever_sent() {
    // A broker like Tansu lists none: CreateAcls (which it cannot answer) is never reached.
    let mut h = harness(true);
    h.routes
        .send_replace([("orders".to_string(), Route::new("primary.orders", 1))].into());
    for _ in 0..3 {
        assert_eq!(h.sync.pass().await, Outcome::Synced);
    }
    assert_eq!(h.creates(), 0);
    assert!(h.fake.delete_calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn deletion_is_opt_in_and_removes_only_synced_bindings_whose_source_is_gone() {
    let routes: Routes = [
        ("orders".to_string(), Route::new("primary.orders", 3)),
        ("payments".to_string(), Route::new("primary.payments", 1)),
    ]
    .into();
    let kept = acl("primary.orders", "User:alice", AclOperation::Read);
    let stale = acl("primary.orders", "User:bob", AclOperation::Read);
    let stale_payments = acl("primary.payments", "User:carol", AclOperation::Describe);
    let untouched = [
        acl("local-topic", "User:bob", AclOperation::Read),
        acl("primary.unmirrored", "User:bob", AclOperation::Read),
        AclBinding {
            permission: AclPermission::Deny,
            ..acl("primary.orders", "User:mallory", AclOperation::Read)
        },
        AclBinding {
            pattern: PatternType::Prefixed,
            ..acl("primary.orders", "User:bob", AclOperation::Read)
        },
    ];
    let start: Vec<AclBinding> = [kept.clone(), stale.clone(), stale_payments.clone()]
        .into_iter()
        .chain(untouched.iter().cloned())
        .collect();
    let source = vec![acl("orders", "User:alice", AclOperation::Read)];

    // Off (the default): nothing is ever deleted, however many passes.
    let mut off = harness(false);
    off.routes.send_replace(routes.clone());
    off.source(source.clone());
    *off.fake.target.lock().unwrap() = start.clone();
    for _ in 0..2 {
        assert_eq!(off.sync.pass().await, Outcome::Synced);
    }
    assert!(off.fake.delete_calls.lock().unwrap().is_empty());
    assert_eq!(off.target(), set(&start));

    // On: exactly the bindings the flow created (its ledger) on mirrored topics without a
    // source binding. An operator's binding of the same shape is not the flow's: kept.
    let operators = acl("primary.orders", "User:dave", AclOperation::Read);
    let mut on = harness(true);
    on.routes.send_replace(routes);
    on.source(source);
    *on.fake.target.lock().unwrap() = start.clone();
    on.fake.target.lock().unwrap().push(operators.clone());
    on.created_before(&[kept.clone(), stale.clone(), stale_payments.clone()]);
    on.created_before(&untouched);
    assert_eq!(on.sync.pass().await, Outcome::Synced);
    assert_eq!(
        set(&on.fake.delete_calls.lock().unwrap().concat()),
        set(&[stale.clone(), stale_payments.clone()])
    );
    let mut left = set(&untouched);
    left.insert(kept.clone());
    left.insert(operators);
    assert_eq!(on.target(), left);
    // The deleted ones are no longer the flow's.
    assert!(!on.ledger().contains(&stale) && !on.ledger().contains(&stale_payments));
    assert!(on.ledger().contains(&kept));
    assert_eq!(on.count(Counter::AclsDeleted), 2);
    assert_eq!(on.last().deleted, 2);
    assert_eq!(on.sync.pass().await, Outcome::Synced);
    assert_eq!(
        on.fake.delete_calls.lock().unwrap().len(),
        1,
        "then idempotent"
    );
}

#[tokio::test]
async fn an_empty_source_listing_deletes_nothing() {
    // A source without an authorizer, or without DESCRIBE rights, lists nothing: that must
    // not read as "every binding was removed at the source".
    let mut h = harness(true);
    let synced = acl("primary.orders", "User:bob", AclOperation::Read);
    h.fake.target.lock().unwrap().push(synced.clone());
    h.created_before(std::slice::from_ref(&synced));
    h.routes
        .send_replace([("orders".to_string(), Route::new("primary.orders", 1))].into());
    assert_eq!(h.sync.pass().await, Outcome::Synced);
    assert!(h.fake.delete_calls.lock().unwrap().is_empty());
    assert_eq!(h.target(), set(&[synced]));
}

#[tokio::test]
async fn deletion_waits_until_routes_name_the_topic_as_mirrored() {
    let mut h = harness(true);
    let stale = acl("primary.orders", "User:bob", AclOperation::Read);
    h.source(vec![acl("payments", "User:carol", AclOperation::Read)]);
    h.fake.target.lock().unwrap().push(stale.clone());
    h.created_before(std::slice::from_ref(&stale));
    // Discovery has published nothing yet: nothing counts as mirrored.
    assert_eq!(h.sync.pass().await, Outcome::Synced);
    assert!(h.fake.delete_calls.lock().unwrap().is_empty());
    h.routes
        .send_replace([("orders".to_string(), Route::new("primary.orders", 1))].into());
    assert_eq!(h.sync.pass().await, Outcome::Synced);
    assert_eq!(*h.fake.delete_calls.lock().unwrap(), vec![vec![stale]]);
}

#[tokio::test]
async fn security_disabled_on_the_target_turns_acl_sync_off_with_one_warning() {
    let h = harness(false);
    h.source(vec![acl("orders", "User:alice", AclOperation::Read)]);
    *h.fake.target_answer.lock().unwrap() = Some(Listing::NotServed);
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // Two leadership terms of the same run: the second one does not even start.
    for _ in 0..2 {
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(h.context(), stop.clone()));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while h.off.reason().is_none() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !task.is_finished(),
            "off, it still ends only at stop (an early end would stop the duties' watch)"
        );
        stop.cancel();
        task.await.unwrap();
    }
    assert_eq!(h.creates(), 0, "CreateAcls is never called");
    assert_eq!(
        h.fake.listings.load(Ordering::SeqCst),
        1,
        "one pass, then off"
    );
    let why = h.off.reason().expect("off for the run").to_string();
    assert!(
        why.contains("backup") && why.contains("sync_topic_acls_enabled = false"),
        "{why}"
    );
    let last = h.last();
    assert!(last.disabled && last.error.as_deref() == Some(why.as_str()));
    let text = logs.text();
    assert_eq!(
        text.matches("does not serve ACLs").count(),
        1,
        "one warning: {text}"
    );
    assert!(text.contains("WARN"), "{text}");
}

#[tokio::test]
async fn security_disabled_answering_the_creation_turns_it_off_too() {
    // librdkafka 2.12.1 drops DescribeAcls' top-level SECURITY_DISABLED: a Kafka without
    // an authorizer lists no bindings, and says so only per binding of a CreateAcls.
    let mut h = harness(false);
    h.source(vec![acl("orders", "User:alice", AclOperation::Read)]);
    *h.fake.fail_creates.lock().unwrap() = (1, Some(Listing::NotServed));
    assert_eq!(h.sync.pass().await, Outcome::Off);
    assert!(h.off.reason().is_some() && h.last().disabled);
    assert_eq!(h.count(Counter::AclSyncFailures), 0, "off, not failing");
}

#[tokio::test]
async fn a_source_without_acls_served_is_skipped_and_asked_again() {
    // MM2: "No ACL authorizer is configured on the source", said once; it keeps asking.
    let mut h = harness(false);
    *h.fake.source.lock().unwrap() = Listing::NotServed;
    assert_eq!(h.sync.pass().await, Outcome::Skipped);
    assert_eq!(h.sync.pass().await, Outcome::Skipped);
    assert!(h.off.reason().is_none());
    assert_eq!(h.creates(), 0);
    h.source(vec![acl("orders", "User:alice", AclOperation::Read)]);
    assert_eq!(h.sync.pass().await, Outcome::Synced);
    assert_eq!(h.count(Counter::AclsCreated), 1);
}

#[tokio::test]
async fn a_failed_creation_is_counted_and_retried_next_pass() {
    let mut h = harness(false);
    h.source(vec![
        acl("orders", "User:alice", AclOperation::Read),
        acl("payments", "User:bob", AclOperation::Describe),
    ]);
    *h.fake.fail_creates.lock().unwrap() = (1, None);
    assert_eq!(h.sync.pass().await, Outcome::Failed);
    assert_eq!(h.count(Counter::AclSyncFailures), 2, "one per binding");
    assert_eq!(h.count(Counter::AclsCreated), 0);
    let last = h.last();
    assert_eq!((last.created, last.failed), (0, 2));
    assert!(
        last.error.as_deref().unwrap().contains("timed out"),
        "{last:?}"
    );
    assert!(h.off.reason().is_none(), "a failure does not turn it off");

    assert_eq!(h.sync.pass().await, Outcome::Synced);
    assert_eq!(h.creates(), 2);
    assert_eq!(h.count(Counter::AclsCreated), 2);
    assert_eq!(h.last().error, None);
}

#[tokio::test]
async fn a_failed_deletion_or_listing_is_counted_and_retried() {
    let mut h = harness(true);
    h.routes
        .send_replace([("orders".to_string(), Route::new("primary.orders", 1))].into());
    let stale = acl("primary.orders", "User:bob", AclOperation::Read);
    // The source lists a binding of a topic the flow does not mirror (an empty listing
    // deletes nothing).
    h.source(vec![acl("unmirrored", "User:carol", AclOperation::Read)]);
    h.fake.target.lock().unwrap().push(stale.clone());
    h.created_before(std::slice::from_ref(&stale));
    *h.fake.fail_deletes.lock().unwrap() = 1;
    assert_eq!(h.sync.pass().await, Outcome::Failed);
    assert_eq!(h.count(Counter::AclSyncFailures), 1);
    assert_eq!(h.sync.pass().await, Outcome::Synced);
    assert!(h.target().is_empty());

    *h.fake.source.lock().unwrap() = Listing::Fails;
    assert_eq!(h.sync.pass().await, Outcome::Failed);
    assert_eq!(h.count(Counter::AclSyncFailures), 2);
    assert!(h.last().error.unwrap().contains("describe source ACLs"));
}

#[tokio::test]
async fn nothing_runs_while_not_the_leader_and_the_first_pass_comes_on_election() {
    let h = harness(false);
    h.source(vec![acl("orders", "User:alice", AclOperation::Read)]);
    h.leader.send_replace(false);
    let stop = CancellationToken::new();
    let task = tokio::spawn(run(h.context(), stop.clone()));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(h.fake.listings.load(Ordering::SeqCst), 0, "not the leader");
    assert_eq!(h.creates(), 0);
    assert!(h.sync.ctx.telemetry.status().last_acl_sync.is_none());

    h.leader.send_replace(true);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while h.creates() == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(h.creates(), 1, "the first pass runs as soon as it leads");
    stop.cancel();
    task.await.unwrap();
}

/// Log lines captured for a test.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Every binding the flow creates is recorded in the ledger, with deletion on or off (so
/// turning it on later knows what was synced); a ledger that cannot be read deletes
/// nothing that pass but still creates; a ledger write that fails is counted and the
/// binding it could not record is never deleted.
#[tokio::test]
async fn the_ledger_records_what_the_flow_created_and_gates_every_deletion() {
    let routes: Routes = [("orders".to_string(), Route::new("primary.orders", 1))].into();
    let alice = acl("primary.orders", "User:alice", AclOperation::Read);
    let bob = acl("primary.orders", "User:bob", AclOperation::Read);

    // Off: created and recorded.
    let mut off = harness(false);
    off.routes.send_replace(routes.clone());
    off.source(vec![acl("orders", "User:alice", AclOperation::Read)]);
    assert_eq!(off.sync.pass().await, Outcome::Synced);
    assert_eq!(off.ledger(), set(&[alice.clone()]));

    // On: bob was created by the flow earlier and his source binding went; the ledger
    // cannot be read this pass, so nothing is deleted, but carol is still created.
    let mut on = harness(true);
    on.routes.send_replace(routes);
    on.source(vec![
        acl("orders", "User:alice", AclOperation::Read),
        acl("orders", "User:carol", AclOperation::Read),
    ]);
    *on.fake.target.lock().unwrap() = vec![alice.clone(), bob.clone()];
    on.created_before(&[alice.clone(), bob.clone()]);
    *on.fake.ledger_unreadable.lock().unwrap() = true;
    assert_eq!(on.sync.pass().await, Outcome::Failed);
    assert!(on.fake.delete_calls.lock().unwrap().is_empty());
    let carol = acl("primary.orders", "User:carol", AclOperation::Read);
    assert!(on.target().contains(&carol) && on.target().contains(&bob));
    assert!(
        on.last().error.unwrap().contains("read the ledger"),
        "{:?}",
        on.last()
    );
    assert!(on.ledger().contains(&carol), "recorded even so");

    // Readable again: bob goes, and leaves the ledger.
    *on.fake.ledger_unreadable.lock().unwrap() = false;
    assert_eq!(on.sync.pass().await, Outcome::Synced);
    assert_eq!(on.target(), set(&[alice.clone(), carol.clone()]));
    assert_eq!(on.ledger(), set(&[alice.clone(), carol.clone()]));

    // A creation whose record fails: counted; the binding exists but is not the flow's
    // in the ledger, so when its source goes it is kept.
    on.source(vec![
        acl("orders", "User:alice", AclOperation::Read),
        acl("orders", "User:carol", AclOperation::Read),
        acl("orders", "User:erin", AclOperation::Read),
    ]);
    *on.fake.ledger_unwritable.lock().unwrap() = true;
    let failures = on.count(Counter::AclSyncFailures);
    assert_eq!(on.sync.pass().await, Outcome::Failed);
    assert_eq!(on.count(Counter::AclSyncFailures), failures + 1);
    let erin = acl("primary.orders", "User:erin", AclOperation::Read);
    assert!(on.target().contains(&erin) && !on.ledger().contains(&erin));
    *on.fake.ledger_unwritable.lock().unwrap() = false;
    on.source(vec![acl("orders", "User:alice", AclOperation::Read)]);
    assert_eq!(on.sync.pass().await, Outcome::Synced);
    assert_eq!(
        on.target(),
        set(&[alice.clone(), erin.clone()]),
        "carol deleted, erin kept"
    );

    // A creation that fails: recorded first (a crash cannot lose the record), then its
    // record is taken back, as the flow did not make it.
    on.source(vec![
        acl("orders", "User:alice", AclOperation::Read),
        acl("orders", "User:erin", AclOperation::Read),
        acl("orders", "User:gus", AclOperation::Read),
    ]);
    *on.fake.fail_creates.lock().unwrap() = (1, None);
    assert_eq!(on.sync.pass().await, Outcome::Failed);
    let gus = acl("primary.orders", "User:gus", AclOperation::Read);
    assert!(!on.target().contains(&gus) && !on.ledger().contains(&gus));
    assert_eq!(on.sync.pass().await, Outcome::Synced);
    assert!(on.target().contains(&gus) && on.ledger().contains(&gus));
}
