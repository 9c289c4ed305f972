//! `kmirror plan --config FILE [--json] [--plugin-dir DIR | --candidate FILE]`: what every
//! flow would mirror, decided by the same rules and plugins as discovery, against both
//! clusters as they are now — read-only (listing topics and groups, reading committed
//! offsets, describing topic ACLs; nothing is created, committed or produced anywhere),
//! with the topic ACLs its ACL sync would create (and delete). With a candidate plugin
//! directory or configuration, also which topics a reload to it would rename, drop or add:
//! the review before a hot reload.

use super::table;
use crate::config::{self, LoadedConfig, ResolvedFlow};
use crate::flow::discovery::rules::{self, Action, Decided, Decision, Plan, Problem, SkipReason};
use crate::flow::plugins::FlowPlugins;
use crate::flow::{OWN_GROUP_PREFIX, Routes, acls};
use crate::kafka::acls::AclBinding;
use crate::kafka::{Cluster, TopicPartitions};
use crate::plugin::cache::CacheChoice;
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// `kmirror plan` arguments.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The configuration file.
    #[arg(long, short)]
    config: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Only this flow (SOURCE->TARGET).
    #[arg(long)]
    flow: Option<String>,
    /// Also plan with every plugin read from DIR instead of the configured plugin
    /// directory, and show what a reload to it would change.
    #[arg(long, value_name = "DIR", conflicts_with = "candidate")]
    plugin_dir: Option<PathBuf>,
    /// Also plan with this second configuration file, and show what a reload to it would
    /// change.
    #[arg(long, value_name = "FILE")]
    candidate: Option<PathBuf>,
}

/// What is done about one source topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopicRow {
    /// The source topic.
    pub source: String,
    /// Its partitions.
    pub partitions: i32,
    /// The target topic the policy names (also for a skipped topic, when it names one).
    pub target: Option<String>,
    /// The target topic's partitions, if it exists.
    pub target_partitions: Option<i32>,
    /// `create`, `grow`, `in sync` or `skip`.
    pub action: &'static str,
    /// Why it is skipped, or a remark.
    pub reason: Option<String>,
}

impl TopicRow {
    /// Whether the topic is mirrored (created, grown or in sync).
    pub fn mirrored(&self) -> bool {
        self.action != "skip"
    }
}

/// A consumer group that would be checkpointed, with its partitions on mirrored topics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupRow {
    /// The group.
    pub group: String,
    /// Its committed partitions on mirrored topics.
    pub partitions: usize,
}

/// A flow's plan.
#[derive(Debug, Clone, Serialize)]
pub struct FlowPlan {
    /// `source->target`.
    pub flow: String,
    /// Every source topic, by name.
    pub topics: Vec<TopicRow>,
    /// Groups checkpointed (the group filter accepts them and they have committed offsets
    /// on mirrored topics); `None` when checkpoints are off.
    pub checkpointed_groups: Option<Vec<GroupRow>>,
    /// Accepted groups with no committed offset on a mirrored topic (nothing to
    /// checkpoint yet).
    pub groups_without_offsets: Vec<String>,
    /// Groups the group filter rejects.
    pub filtered_groups: usize,
    /// What could not be read (a cluster unreachable, a plugin failing).
    pub errors: Vec<String>,
    /// The topic ACLs its ACL sync would change; `None` when ACL sync is off.
    pub acls: Option<AclRows>,
    /// Against the candidate: what a reload would change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate: Option<Changes>,
}

/// The topic ACLs a flow's ACL sync would change on the target.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AclRows {
    /// Bindings it would create.
    pub create: Vec<AclBinding>,
    /// Bindings it would delete (only with `sync_topic_acls_delete`).
    pub delete: Vec<AclBinding>,
    /// Why they could not be planned (all or some), e.g. a cluster serves no ACLs.
    pub note: Option<String>,
}

/// What moving from one plan to another changes for mirrored topics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Changes {
    /// (source topic, target now, target with the candidate).
    pub renamed: Vec<(String, String, String)>,
    /// (source topic, its target now (kept on the target cluster), why the candidate
    /// skips it).
    pub dropped: Vec<(String, String, String)>,
    /// (source topic, target with the candidate).
    pub added: Vec<(String, String)>,
}

impl Changes {
    fn is_empty(&self) -> bool {
        self.renamed.is_empty() && self.dropped.is_empty() && self.added.is_empty()
    }
}

/// The rows of a pass: every source topic with its decision, the plan's action for it,
/// and the problems that keep it from being mirrored.
pub fn rows(
    source: &TopicPartitions,
    target: &TopicPartitions,
    decided: &Decided,
    plan: &Plan,
) -> Vec<TopicRow> {
    let failed: BTreeMap<&str, String> = decided
        .failed
        .iter()
        .map(|(t, e)| (t.as_str(), e.to_string()))
        .collect();
    let mut collisions: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for p in &plan.problems {
        if let Problem::Collision { sources, .. } = p {
            for s in sources {
                let others = sources.iter().filter(|o| *o != s).map(String::as_str);
                collisions.entry(s.as_str()).or_default().extend(others);
            }
        }
    }
    let mut out = Vec::new();
    for (topic, &partitions) in source {
        let mut row = TopicRow {
            source: topic.clone(),
            partitions,
            target: None,
            target_partitions: None,
            action: "skip",
            reason: None,
        };
        match decided.decisions.get(topic) {
            None => {
                row.reason = Some(match failed.get(topic.as_str()) {
                    Some(e) => format!("plugin failed: {e}"),
                    None => "undecided".into(),
                })
            }
            Some(Decision::Skip(why)) => {
                row.reason = Some(match why {
                    SkipReason::Filtered => "filtered".into(),
                    SkipReason::Internal => "internal".into(),
                    SkipReason::Cycle => "cycle".into(),
                    SkipReason::InvalidName(why) => format!("bad policy answer: {why}"),
                })
            }
            Some(Decision::Mirror(name)) => {
                row.target = Some(name.clone());
                row.target_partitions = target.get(name).copied();
                if let Some(others) = collisions.get(topic.as_str()) {
                    row.reason = Some(format!("collision: {} map there too", others.join(", ")));
                } else {
                    row.action = "in sync";
                    for a in &plan.actions {
                        match a {
                            Action::CreateTopic { source, .. } if source == topic => {
                                row.action = "create";
                            }
                            Action::AddPartitions { source, .. } if source == topic => {
                                row.action = "grow";
                            }
                            _ => {}
                        }
                    }
                    if row.target_partitions.is_some_and(|t| t > partitions) {
                        row.reason = Some("the target has more partitions (kept)".into());
                    }
                }
            }
        }
        out.push(row);
    }
    out
}

/// What moving from `now` to `candidate` changes, topic by topic.
pub fn changes(now: &[TopicRow], candidate: &[TopicRow]) -> Changes {
    let by_name: BTreeMap<&str, &TopicRow> =
        candidate.iter().map(|r| (r.source.as_str(), r)).collect();
    let mut out = Changes::default();
    for row in now {
        let Some(next) = by_name.get(row.source.as_str()) else {
            continue;
        };
        match (row.mirrored(), next.mirrored()) {
            (true, true) if row.target != next.target => out.renamed.push((
                row.source.clone(),
                row.target.clone().unwrap_or_default(),
                next.target.clone().unwrap_or_default(),
            )),
            (true, false) => out.dropped.push((
                row.source.clone(),
                row.target.clone().unwrap_or_default(),
                next.reason.clone().unwrap_or_default(),
            )),
            (false, true) => out
                .added
                .push((row.source.clone(), next.target.clone().unwrap_or_default())),
            _ => {}
        }
    }
    out
}

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
    let plugins = FlowPlugins::for_flow(&flow);
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
        rows(&listing.source, &listing.target, &decided, &plan),
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
    match acls::task::planned(&plugins, &s, &t, mirrored, delete).await {
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
    let plugins = FlowPlugins::for_flow(&flow);
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

async fn plan_flow(flow: &ResolvedFlow, candidate: Option<&ResolvedFlow>) -> FlowPlan {
    let mut out = FlowPlan {
        flow: flow.name.clone(),
        topics: Vec::new(),
        checkpointed_groups: None,
        groups_without_offsets: Vec::new(),
        filtered_groups: 0,
        errors: Vec::new(),
        acls: None,
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
            Ok((rows, _)) => out.candidate = Some(changes(&out.topics, &rows)),
            Err(e) => out.errors.push(format!("with the candidate: {e}")),
        }
    }
    out
}

/// Flows only in one of the two configurations.
#[derive(Debug, Default, Serialize)]
struct FlowChanges {
    added: Vec<String>,
    removed: Vec<String>,
}

/// Runs `kmirror plan`.
pub fn run(args: PlanArgs, cache: &CacheChoice) -> ExitCode {
    let load = |path: &PathBuf| {
        config::load(path, cache).map_err(|errors| {
            eprintln!("{errors}");
            ExitCode::from(2)
        })
    };
    let current = match load(&args.config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let candidate: Option<LoadedConfig> = match (&args.plugin_dir, &args.candidate) {
        (Some(dir), _) => match config::load_with_plugins_dir(&args.config, cache, dir) {
            Ok(c) => Some(c),
            Err(errors) => {
                eprintln!("with plugins from {}:\n{errors}", dir.display());
                return ExitCode::from(2);
            }
        },
        (None, Some(file)) => match load(file) {
            Ok(c) => Some(c),
            Err(code) => return code,
        },
        (None, None) => None,
    };
    if let Some(name) = &args.flow
        && !current.flows.iter().any(|f| &f.name == name)
    {
        let names: Vec<&str> = current.flows.iter().map(|f| f.name.as_str()).collect();
        eprintln!("error: no flow `{name}`; flows are: {}", names.join(", "));
        return ExitCode::from(2);
    }
    let flows = candidate.as_ref().map(|c| FlowChanges {
        added: c
            .flows
            .iter()
            .filter(|f| !current.flows.iter().any(|g| g.name == f.name))
            .map(|f| f.name.clone())
            .collect(),
        removed: current
            .flows
            .iter()
            .filter(|f| !c.flows.iter().any(|g| g.name == f.name))
            .map(|f| f.name.clone())
            .collect(),
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let plans: Vec<FlowPlan> = runtime.block_on(async {
        let mut plans = Vec::new();
        for flow in current
            .flows
            .iter()
            .filter(|f| args.flow.as_ref().is_none_or(|n| &f.name == n))
        {
            let other = candidate
                .as_ref()
                .and_then(|c| c.flows.iter().find(|f| f.name == flow.name));
            plans.push(plan_flow(flow, other).await);
        }
        plans
    });
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    let failed = plans.iter().any(|p| !p.errors.is_empty());
    if args.json {
        let mut doc = serde_json::json!({ "flows": plans });
        if let Some(flows) = &flows {
            doc["candidate_flows"] = serde_json::to_value(flows).unwrap_or_default();
        }
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        for p in &plans {
            print!("{}", render(p));
        }
        if let Some(flows) = &flows {
            for f in &flows.added {
                println!("the candidate adds flow {f}");
            }
            for f in &flows.removed {
                println!("the candidate removes flow {f}");
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// A flow's plan as a table.
pub fn render(p: &FlowPlan) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "flow {}", p.flow);
    for e in &p.errors {
        let _ = writeln!(s, "  error: {e}");
    }
    let cell = |n: Option<i32>| n.map_or("-".to_string(), |n| n.to_string());
    let mut rows: Vec<Vec<String>> = vec![
        ["source topic", "target topic", "partitions", "action"]
            .map(str::to_string)
            .to_vec(),
    ];
    for r in &p.topics {
        let action = match &r.reason {
            Some(why) if r.action == "skip" => format!("skip: {why}"),
            Some(why) => format!("{} ({why})", r.action),
            None => r.action.to_string(),
        };
        rows.push(vec![
            r.source.clone(),
            r.target.clone().unwrap_or_else(|| "-".into()),
            format!("{} -> {}", r.partitions, cell(r.target_partitions)),
            action,
        ]);
    }
    if !p.topics.is_empty() {
        let widths = table::widths(&rows);
        for row in &rows {
            let _ = writeln!(s, "  {}", table::line(row, &widths));
        }
    }
    match &p.checkpointed_groups {
        None => {
            let _ = writeln!(s, "  checkpoints are off for this flow");
        }
        Some(groups) => {
            let listed: Vec<String> = groups
                .iter()
                .map(|g| format!("{} ({} partitions)", g.group, g.partitions))
                .collect();
            let _ = writeln!(
                s,
                "  groups checkpointed: {}",
                if listed.is_empty() {
                    "none".to_string()
                } else {
                    listed.join(", ")
                }
            );
            if !p.groups_without_offsets.is_empty() {
                let _ = writeln!(
                    s,
                    "  groups accepted, no offsets on mirrored topics yet: {}",
                    p.groups_without_offsets.join(", ")
                );
            }
            let _ = writeln!(s, "  groups filtered out: {}", p.filtered_groups);
        }
    }
    match &p.acls {
        None => {
            let _ = writeln!(s, "  topic ACLs are not synced for this flow");
        }
        Some(a) => {
            if let Some(why) = &a.note {
                let _ = writeln!(s, "  topic ACLs: {why}");
            }
            if a.create.is_empty() && a.delete.is_empty() {
                let _ = writeln!(s, "  topic ACLs to create on the target: none");
            }
            for b in &a.create {
                let _ = writeln!(s, "  create ACL: {b}");
            }
            for b in &a.delete {
                let _ = writeln!(s, "  delete ACL: {b}");
            }
        }
    }
    if let Some(c) = &p.candidate {
        if c.is_empty() {
            let _ = writeln!(s, "  with the candidate: no mirrored topic changes");
        }
        for (topic, from, to) in &c.renamed {
            let _ = writeln!(s, "  with the candidate: {topic} renamed: {from} -> {to}");
        }
        for (topic, target, why) in &c.dropped {
            let _ = writeln!(
                s,
                "  with the candidate: {topic} dropped ({why}); {target} is kept on the target"
            );
        }
        for (topic, target) in &c.added {
            let _ = writeln!(s, "  with the candidate: {topic} added as {target}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Native;
    use kmirror_mm2::{Config, Configure, DefaultReplicationPolicy, DefaultTopicFilter};
    use std::collections::BTreeSet;

    fn snapshot(entries: &[(&str, i32)]) -> TopicPartitions {
        entries.iter().map(|(t, p)| (t.to_string(), *p)).collect()
    }

    fn rows_of(source: &TopicPartitions, target: &TopicPartitions) -> Vec<TopicRow> {
        let config = Config::from(vec![("topics.exclude".to_string(), "hidden.*".to_string())]);
        let filter = Native(DefaultTopicFilter::configure(&config).unwrap());
        let policy = Native(DefaultReplicationPolicy::default());
        let topics: Vec<String> = source.keys().cloned().collect();
        let reserved: BTreeSet<String> = ["mm2-offset-syncs.backup.internal".to_string()].into();
        let decided = rules::decide_all(&topics, &filter, &policy, "primary", "backup", &reserved);
        let plan = rules::plan(source, target, &decided.decisions, &Routes::new());
        rows(source, target, &decided, &plan)
    }

    #[test]
    fn every_source_topic_gets_an_action_and_a_reason() {
        let source = snapshot(&[
            ("orders", 3),
            ("grown", 6),
            ("fresh", 2),
            ("hidden.x", 1),
            ("backup.loop", 1),
            ("__consumer_offsets", 50),
            ("shrunk", 2),
        ]);
        let target = snapshot(&[
            ("primary.orders", 3),
            ("primary.grown", 4),
            ("primary.shrunk", 5),
        ]);
        let rows = rows_of(&source, &target);
        let by: BTreeMap<&str, &TopicRow> = rows.iter().map(|r| (r.source.as_str(), r)).collect();
        assert_eq!(rows.len(), 7);
        assert_eq!(by["orders"].action, "in sync");
        assert_eq!(by["orders"].target.as_deref(), Some("primary.orders"));
        assert_eq!(by["grown"].action, "grow");
        assert_eq!(by["grown"].target_partitions, Some(4));
        assert_eq!(by["fresh"].action, "create");
        assert_eq!(by["fresh"].target_partitions, None);
        assert_eq!(by["hidden.x"].reason.as_deref(), Some("filtered"));
        assert_eq!(by["backup.loop"].reason.as_deref(), Some("cycle"));
        assert_eq!(by["__consumer_offsets"].reason.as_deref(), Some("internal"));
        assert_eq!(by["shrunk"].action, "in sync");
        assert!(
            by["shrunk"]
                .reason
                .as_deref()
                .unwrap()
                .contains("more partitions")
        );
        let text = render(&FlowPlan {
            flow: "primary->backup".into(),
            topics: rows.clone(),
            checkpointed_groups: Some(vec![GroupRow {
                group: "billing".into(),
                partitions: 3,
            }]),
            groups_without_offsets: vec![],
            filtered_groups: 1,
            errors: vec![],
            acls: None,
            candidate: None,
        });
        assert!(text.contains("skip: cycle"), "{text}");
        assert!(text.contains("3 -> 3"), "{text}");
        assert!(text.contains("billing (3 partitions)"), "{text}");
    }

    #[test]
    fn collisions_and_bad_answers_are_skipped_with_the_reason() {
        let source = snapshot(&[("a", 1), ("b", 1)]);
        let decided = Decided {
            decisions: [
                ("a".to_string(), Decision::Mirror("same".into())),
                ("b".to_string(), Decision::Mirror("same".into())),
            ]
            .into(),
            failed: vec![],
        };
        let plan = rules::plan(
            &source,
            &TopicPartitions::new(),
            &decided.decisions,
            &Routes::new(),
        );
        let found = rows(&source, &TopicPartitions::new(), &decided, &plan);
        assert!(found.iter().all(|r| r.action == "skip"));
        assert_eq!(
            found[0].reason.as_deref(),
            Some("collision: b map there too")
        );
        let decided = Decided {
            decisions: [(
                "a".to_string(),
                Decision::Skip(SkipReason::InvalidName(
                    "format-remote-topic gave ``".into(),
                )),
            )]
            .into(),
            failed: vec![],
        };
        let plan = rules::plan(
            &source,
            &TopicPartitions::new(),
            &decided.decisions,
            &Routes::new(),
        );
        let found = rows(&source, &TopicPartitions::new(), &decided, &plan);
        assert!(
            found[0]
                .reason
                .as_deref()
                .unwrap()
                .starts_with("bad policy answer")
        );
        assert_eq!(found[1].reason.as_deref(), Some("undecided"));
    }

    #[test]
    fn changes_name_renamed_dropped_and_added_topics() {
        let row = |source: &str, target: Option<&str>, action: &'static str| TopicRow {
            source: source.into(),
            partitions: 1,
            target: target.map(str::to_string),
            target_partitions: None,
            action,
            reason: (action == "skip").then(|| "filtered".to_string()),
        };
        let now = vec![
            row("kept", Some("primary.kept"), "in sync"),
            row("renamed", Some("primary.renamed"), "in sync"),
            row("dropped", Some("primary.dropped"), "in sync"),
            row("added", Some("primary.added"), "skip"),
            row("gone", Some("primary.gone"), "in sync"),
        ];
        let next = vec![
            row("kept", Some("primary.kept"), "in sync"),
            row("renamed", Some("dr.renamed"), "create"),
            row("dropped", Some("primary.dropped"), "skip"),
            row("added", Some("primary.added"), "create"),
        ];
        let c = changes(&now, &next);
        assert_eq!(
            c.renamed,
            vec![(
                "renamed".into(),
                "primary.renamed".into(),
                "dr.renamed".into()
            )]
        );
        assert_eq!(
            c.dropped,
            vec![(
                "dropped".into(),
                "primary.dropped".into(),
                "filtered".into()
            )]
        );
        assert_eq!(c.added, vec![("added".into(), "primary.added".into())]);
        assert!(changes(&now, &now).is_empty());
    }

    #[test]
    fn acls_to_sync_are_listed_per_flow() {
        use crate::kafka::acls::{AclOperation, AclPermission, PatternType};
        let binding = AclBinding {
            resource_name: "primary.orders".into(),
            pattern: PatternType::Literal,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: AclOperation::Read,
            permission: AclPermission::Allow,
        };
        let plan = |acls| FlowPlan {
            flow: "primary->backup".into(),
            topics: vec![],
            checkpointed_groups: None,
            groups_without_offsets: vec![],
            filtered_groups: 0,
            errors: vec![],
            acls,
            candidate: None,
        };
        let text = render(&plan(Some(AclRows {
            create: vec![binding.clone()],
            delete: vec![binding],
            note: None,
        })));
        assert!(
            text.contains(
                "  create ACL: ALLOW READ on topic primary.orders (LITERAL) to User:alice from *"
            ) && text.contains("  delete ACL: ALLOW READ"),
            "{text}"
        );
        let text = render(&plan(Some(AclRows::default())));
        assert!(
            text.contains("topic ACLs to create on the target: none"),
            "{text}"
        );
        assert!(render(&plan(None)).contains("topic ACLs are not synced"));
    }
}
