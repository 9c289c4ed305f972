//! `kmirror plugin check`: a conformance suite run against a plugin's roles.
//!
//! Replication policies are checked over a corpus of aliases and topic names (dots,
//! dashes, underscores, remote and multi-hop names, internal topics): the round trips
//! `upstream-topic(format-remote-topic(a, t)) == t` and `topic-source(...) == a` (an
//! identity policy by its own rule), `original-topic` across hops, internal names
//! recognised, determinism and batch-equals-single. Filters: determinism and
//! batch-equals-single. Record transforms: see [`transform`].

use crate::plugin::Plugin;
use crate::policy::{
    Config, ConfigPropertyFilter, GroupFilter, PluginError, ReplicationPolicy, Role, TopicFilter,
};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Source aliases the policy checks use (MM2 aliases do not contain the separator).
pub const ALIASES: [&str; 5] = ["us-west", "primary", "dc_1", "B2", "a"];

/// Topic names the checks use.
pub const TOPICS: [&str; 12] = [
    "orders",
    "orders.v2",
    "payments-eu",
    "user_events",
    "a.b.c",
    "x",
    "topic.with.many.dots",
    "UPPER-lower_9",
    "us-west.orders",
    "primary.us-west.orders",
    "heartbeats",
    "__consumer_offsets",
];

/// Names the filter checks use, including internal and odd ones.
pub const FILTER_NAMES: [&str; 12] = [
    "orders",
    "orders.tmp",
    "payments-eu",
    "__consumer_offsets",
    "mm2-offset-syncs.b.internal",
    "a.checkpoints.internal",
    "connect-configs",
    "console-consumer-42",
    "x.replica",
    "heartbeats",
    "UPPER_case-9",
    "",
];

/// One case of one check.
#[derive(Debug, Clone)]
pub struct Case {
    /// The role checked.
    pub role: Role,
    /// The check's name.
    pub check: &'static str,
    /// The input, as shown to the user.
    pub input: String,
    /// `Err` with what went wrong.
    pub outcome: Result<(), String>,
}

/// Everything a check run found.
#[derive(Debug, Clone)]
pub struct Report {
    /// The roles the plugin exports.
    pub roles: Vec<Role>,
    /// Whether the replication policy was recognised as an identity policy.
    pub identity: bool,
    /// Every case run.
    pub cases: Vec<Case>,
}

impl Report {
    /// Whether every case passed.
    pub fn passed(&self) -> bool {
        self.cases.iter().all(|c| c.outcome.is_ok())
    }

    /// The failing cases.
    pub fn failures(&self) -> impl Iterator<Item = &Case> {
        self.cases.iter().filter(|c| c.outcome.is_err())
    }

    /// A table of checks with pass/fail counts, then every failing case.
    pub fn render(&self) -> String {
        let mut rows: BTreeMap<(Role, &str), (usize, usize)> = BTreeMap::new();
        let mut order: Vec<(Role, &str)> = Vec::new();
        for case in &self.cases {
            let key = (case.role, case.check);
            if !rows.contains_key(&key) {
                order.push(key);
            }
            let row = rows.entry(key).or_default();
            if case.outcome.is_ok() {
                row.0 += 1
            } else {
                row.1 += 1
            }
        }
        let roles: Vec<String> = self.roles.iter().map(Role::to_string).collect();
        let mut out = format!("roles: {}\n", roles.join(", "));
        if self.identity {
            out.push_str("replication-policy recognised as an identity policy: checked by the identity rules\n");
        }
        let _ = writeln!(
            out,
            "\n{:<24} {:<46} {:>6} {:>6}  result",
            "role", "check", "passed", "failed"
        );
        for key in order {
            let (pass, fail) = rows[&key];
            let verdict = if fail == 0 { "PASS" } else { "FAIL" };
            let _ = writeln!(
                out,
                "{:<24} {:<46} {pass:>6} {fail:>6}  {verdict}",
                key.0.to_string(),
                key.1
            );
        }
        let failures: Vec<&Case> = self.failures().collect();
        if !failures.is_empty() {
            let _ = writeln!(out, "\nfailing cases:");
            for case in failures {
                let why = case
                    .outcome
                    .as_ref()
                    .err()
                    .map(String::as_str)
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "  {} / {}: {} -> {}",
                    case.role, case.check, case.input, why
                );
            }
        }
        let total = self.cases.len();
        let failed = self.cases.iter().filter(|c| c.outcome.is_err()).count();
        let _ = writeln!(
            out,
            "\n{} cases, {} passed, {} failed",
            total,
            total - failed,
            failed
        );
        out
    }
}

/// Runs every check for every role of `plugin`, configured with `config`. Fails only when
/// a role cannot be instantiated or configured; a failing or trapping call is a failed case.
pub fn check(plugin: &Plugin, config: &Config) -> Result<Report, PluginError> {
    let roles: Vec<(Role, Config)> = plugin
        .roles()
        .into_iter()
        .map(|r| (r, config.clone()))
        .collect();
    check_roles(plugin, &roles)
}

/// Runs every check for the given roles of `plugin`, each configured with its own config
/// (as a flow's slots configure them).
pub fn check_roles(plugin: &Plugin, roles: &[(Role, Config)]) -> Result<Report, PluginError> {
    let mut run = Run {
        cases: Vec::new(),
        role: Role::TopicFilter,
    };
    let mut identity = false;
    for (role, config) in roles {
        let (role, config) = (*role, config);
        run.role = role;
        match role {
            Role::ReplicationPolicy => identity = run.policy(&*plugin.replication_policy(config)?),
            Role::TopicFilter => run.topic_filter(&*plugin.topic_filter(config)?),
            Role::GroupFilter => run.group_filter(&*plugin.group_filter(config)?),
            Role::ConfigPropertyFilter => {
                run.config_filter(&*plugin.config_property_filter(config)?)
            }
            Role::RecordTransform => run.transform(&*plugin.record_transform(config)?),
        }
    }
    Ok(Report {
        roles: roles.iter().map(|(r, _)| *r).collect(),
        identity,
        cases: run.cases,
    })
}

struct Run {
    cases: Vec<Case>,
    role: Role,
}

fn show<T: std::fmt::Debug>(value: &Result<T, PluginError>) -> String {
    match value {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("error: {e}"),
    }
}

impl Run {
    fn case(&mut self, check: &'static str, input: String, outcome: Result<(), String>) {
        self.cases.push(Case {
            role: self.role,
            check,
            input,
            outcome,
        });
    }

    /// Records `actual == expected`.
    fn expect<T: PartialEq + std::fmt::Debug>(
        &mut self,
        check: &'static str,
        input: String,
        actual: Result<T, PluginError>,
        expected: T,
    ) {
        let outcome = match &actual {
            Ok(v) if *v == expected => Ok(()),
            _ => Err(format!("got {}, expected {expected:?}", show(&actual))),
        };
        self.case(check, input, outcome);
    }

    /// Records that two calls with the same input agree.
    fn twice<T: PartialEq + std::fmt::Debug>(
        &mut self,
        input: String,
        mut f: impl FnMut() -> Result<T, PluginError>,
    ) {
        let (first, second) = (f(), f());
        let outcome = match (&first, &second) {
            (Ok(a), Ok(b)) if a == b => Ok(()),
            _ => Err(format!("first {}, then {}", show(&first), show(&second))),
        };
        self.case("same answer twice", input, outcome);
    }

    fn policy(&mut self, p: &dyn ReplicationPolicy) -> bool {
        let identity = ALIASES
            .iter()
            .all(|a| matches!(p.format_remote_topic(a, "orders"), Ok(t) if t == "orders"));
        let plain_topics: Vec<&str> = TOPICS
            .iter()
            .copied()
            .filter(|t| !t.contains("heartbeats"))
            .collect();
        for a in ALIASES {
            for t in &plain_topics {
                let t = *t;
                let remote = p.format_remote_topic(a, t);
                let Ok(remote) = remote else {
                    self.case(
                        "format-remote-topic",
                        format!("({a}, {t})"),
                        Err(show(&remote)),
                    );
                    continue;
                };
                let input = format!("a={a} t={t} -> {remote}");
                self.expect(
                    "upstream-topic(format-remote-topic(a,t)) == t",
                    input.clone(),
                    p.upstream_topic(&remote),
                    Some(t.to_string()),
                );
                if !identity {
                    self.expect(
                        "topic-source(format-remote-topic(a,t)) == a",
                        input.clone(),
                        p.topic_source(&remote),
                        Some(a.to_string()),
                    );
                } else {
                    self.expect(
                        "identity: original-topic(t) == t",
                        input.clone(),
                        p.original_topic(t),
                        t.to_string(),
                    );
                }
                if !t.starts_with("__") {
                    self.expect(
                        "remote topics are not internal",
                        input.clone(),
                        p.is_internal_topic(&remote),
                        false,
                    );
                }
                for b in ["hop2", "dc_3"] {
                    let two = p.format_remote_topic(b, &remote).unwrap_or_default();
                    let expected = p.original_topic(t).unwrap_or_default();
                    self.expect(
                        "original-topic across two hops",
                        format!("{b} <- {a} <- {t}: {two}"),
                        p.original_topic(&two),
                        expected,
                    );
                }
                self.twice(format!("format-remote-topic({a}, {t})"), || {
                    p.format_remote_topic(a, t)
                });
                self.twice(format!("topic-source({remote})"), || {
                    p.topic_source(&remote)
                });
                self.twice(format!("upstream-topic({remote})"), || {
                    p.upstream_topic(&remote)
                });
            }
            let heartbeats = p.heartbeats_topic().unwrap_or_default();
            let remote_hb = p.format_remote_topic(a, &heartbeats).unwrap_or_default();
            self.expect(
                "heartbeats topics recognised, local and remote",
                heartbeats.clone(),
                p.is_heartbeats_topic(&heartbeats),
                true,
            );
            self.expect(
                "heartbeats topics recognised, local and remote",
                remote_hb.clone(),
                p.is_heartbeats_topic(&remote_hb),
                true,
            );
            self.expect(
                "topic-source of a remote heartbeats topic",
                remote_hb.clone(),
                p.topic_source(&remote_hb),
                Some(a.to_string()),
            );
            let syncs = p.offset_syncs_topic(a).unwrap_or_default();
            let checkpoints = p.checkpoints_topic(a).unwrap_or_default();
            self.expect(
                "internal topics recognised",
                syncs.clone(),
                p.is_internal_topic(&syncs),
                true,
            );
            self.expect(
                "internal topics recognised",
                syncs.clone(),
                p.is_mm2_internal_topic(&syncs),
                true,
            );
            self.expect(
                "internal topics recognised",
                checkpoints.clone(),
                p.is_internal_topic(&checkpoints),
                true,
            );
            self.expect(
                "internal topics recognised",
                checkpoints.clone(),
                p.is_checkpoints_topic(&checkpoints),
                true,
            );
            let topics: Vec<String> = plain_topics.iter().map(|t| t.to_string()).collect();
            let single: Result<Vec<String>, PluginError> =
                topics.iter().map(|t| p.format_remote_topic(a, t)).collect();
            let single = single.unwrap_or_default();
            self.expect(
                "batch equals single",
                format!("format-remote-topics({a}, ..{})", topics.len()),
                p.format_remote_topics(a, &topics),
                single,
            );
        }
        for t in [
            "__consumer_offsets",
            "__transaction_state",
            ".hidden",
            "connect-offsets-internal",
        ] {
            self.expect(
                "internal topics recognised",
                t.to_string(),
                p.is_internal_topic(t),
                true,
            );
        }
        identity
    }

    fn filter_checks(
        &mut self,
        single: &dyn Fn(&str) -> Result<bool, PluginError>,
        batch: &dyn Fn(&[String]) -> Result<Vec<bool>, PluginError>,
    ) {
        let names: Vec<String> = FILTER_NAMES.iter().map(|n| n.to_string()).collect();
        for n in &names {
            self.twice(format!("{n:?}"), || single(n));
        }
        let one_by_one: Result<Vec<bool>, PluginError> = names.iter().map(|n| single(n)).collect();
        match one_by_one {
            Ok(expected) => self.expect(
                "batch equals single",
                format!("{} names", names.len()),
                batch(&names),
                expected,
            ),
            Err(e) => self.case(
                "batch equals single",
                format!("{} names", names.len()),
                Err(e.to_string()),
            ),
        }
        self.expect(
            "batch of nothing is empty",
            "[]".to_string(),
            batch(&[]),
            Vec::new(),
        );
    }

    fn topic_filter(&mut self, f: &dyn TopicFilter) {
        self.filter_checks(&|n| f.should_replicate_topic(n), &|ns| {
            f.should_replicate_topics(ns)
        });
    }

    fn group_filter(&mut self, f: &dyn GroupFilter) {
        self.filter_checks(&|n| f.should_replicate_group(n), &|ns| {
            f.should_replicate_groups(ns)
        });
    }

    fn config_filter(&mut self, f: &dyn ConfigPropertyFilter) {
        for n in ["cleanup.policy", "retention.ms", "min.insync.replicas", "x"] {
            self.twice(format!("should-replicate-config-property({n})"), || {
                f.should_replicate_config_property(n)
            });
            self.twice(format!("should-replicate-source-default({n})"), || {
                f.should_replicate_source_default(n)
            });
        }
    }
}

#[cfg(test)]
mod tests;
mod transform;
