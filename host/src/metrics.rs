//! Prometheus metrics (OpenMetrics text), rendered at scrape time from every flow's
//! telemetry: each [`Counter`] as `kmirror_<name>_total{flow}`, per-partition lag, the
//! replication-latency histogram, and gauges of the flow's state.
//!
//! MM2's metrics map as: `record-count` -> `kmirror_records_total`, `byte-count` ->
//! `kmirror_bytes_total`, `replication-latency-ms` (source timestamp to the target's ack) ->
//! `kmirror_replication_latency_seconds` (the same span, a histogram instead of avg/max),
//! `record-age-ms` -> `kmirror_partition_lag_records` together with the latency (kmirror
//! reports how far behind each partition is, in records, instead of the age of the records
//! polled), `checkpoint-latency-ms` -> the age of `last_checkpoint_pass_ms` in `/status`.

use crate::flow::telemetry::{Counter, FlowTelemetry};
use crate::histogram::Histogram;
use crate::plugin::stats::{ErrorKind, PluginStats};
use crate::telemetry::Telemetry;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter as PromCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use std::sync::Arc;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FlowLabel {
    flow: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabel {
    flow: String,
    topic: String,
    partition: i32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransformLabel {
    flow: String,
    position: usize,
    transform: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabel {
    flow: String,
    group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PlacementLabel {
    flow: String,
    group: String,
    placement: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AuditLabel {
    flow: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MemberLabel {
    flow: String,
    member: u32,
}

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabel {
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginKindLabel {
    plugin: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginResultLabel {
    plugin: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLoadedLabel {
    plugin: String,
    sha256: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// A histogram rendered at scrape time.
struct Rendered<'a>(&'a Histogram);

impl std::fmt::Debug for Rendered<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Histogram")
    }
}

impl TypedMetric for Rendered<'_> {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Rendered<'_> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.0.snapshot();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// A plugin's call-duration histogram.
struct CallDurations(Arc<PluginStats>);

impl std::fmt::Debug for CallDurations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CallDurations({})", self.0.name)
    }
}

impl TypedMetric for CallDurations {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for CallDurations {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        Rendered(&self.0.durations).encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// Every plugin's calls, errors by kind, durations, reloads and load time; config reloads.
fn plugins(registry: &mut Registry, telemetry: &Telemetry) {
    let calls = Family::<PluginLabel, PromCounter>::default();
    let errors = Family::<PluginKindLabel, PromCounter>::default();
    let reloads = Family::<PluginResultLabel, PromCounter>::default();
    let loaded = Family::<PluginLoadedLabel, Gauge>::default();
    let all = telemetry.plugins.all();
    for p in &all {
        let plugin = || p.name.clone();
        calls
            .get_or_create(&PluginLabel { plugin: plugin() })
            .inc_by(p.calls());
        for kind in ErrorKind::ALL {
            errors
                .get_or_create(&PluginKindLabel {
                    plugin: plugin(),
                    kind: kind.name(),
                })
                .inc_by(p.errors(kind));
        }
        let (accepted, rejected) = p.reloads();
        for (result, n) in [("accepted", accepted), ("rejected", rejected)] {
            reloads
                .get_or_create(&PluginResultLabel {
                    plugin: plugin(),
                    result,
                })
                .inc_by(n);
        }
        if let Some(l) = p.current() {
            loaded
                .get_or_create(&PluginLoadedLabel {
                    plugin: plugin(),
                    sha256: l.sha256,
                })
                .set((l.loaded_at_ms / 1000) as i64);
        }
    }
    registry.register("plugin_calls", "Calls into a plugin", calls);
    registry.register(
        "plugin_errors",
        "Failed plugin calls by kind: trap, timeout, memory (over its cap), error (an error returned or an answer refused)",
        errors,
    );
    registry.register(
        "plugin_reloads",
        "Hot reloads of a plugin file: accepted (it replaced the running version) or rejected (the running version kept serving)",
        reloads,
    );
    registry.register(
        "plugin_loaded_timestamp_seconds",
        "When the running version of a plugin (by content hash) was loaded",
        loaded,
    );
    for p in all {
        registry
            .sub_registry_with_label(("plugin".into(), p.name.clone().into()))
            .register(
                "plugin_call_duration_seconds",
                "How long plugin calls take",
                CallDurations(p),
            );
    }
    let config = Family::<ResultLabel, PromCounter>::default();
    let (accepted, rejected) = telemetry.config_reloads();
    config
        .get_or_create(&ResultLabel { result: "accepted" })
        .inc_by(accepted);
    config
        .get_or_create(&ResultLabel { result: "rejected" })
        .inc_by(rejected);
    registry.register(
        "config_reloads",
        "Configuration reloads (SIGHUP): accepted, or rejected with the old configuration kept",
        config,
    );
}

/// A flow's latency histogram as a Prometheus histogram.
struct Latency(Arc<FlowTelemetry>);

impl std::fmt::Debug for Latency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Latency({})", self.0.flow)
    }
}

impl TypedMetric for Latency {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Latency {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        Rendered(&self.0.latency).encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// Every flow's and plugin's metrics in the OpenMetrics text format (`kmirror_*`).
pub fn render(telemetry: &Telemetry) -> String {
    let flows = &telemetry.flows()[..];
    let mut registry = Registry::with_prefix("kmirror");
    let label = |f: &FlowTelemetry| FlowLabel {
        flow: f.flow.clone(),
    };
    for counter in Counter::ALL {
        let family = Family::<FlowLabel, PromCounter>::default();
        for f in flows {
            family.get_or_create(&label(f)).inc_by(f.count(counter));
        }
        registry.register(counter.name(), counter.help(), family);
    }
    let gauges = [
        ("mirrored_topics", "Source topics being mirrored"),
        (
            "owned_partitions",
            "Source partitions this instance mirrors",
        ),
        (
            "paused_partitions",
            "Partitions paused at a record the target will not take",
        ),
        (
            "unowned_partitions",
            "Mirrored partitions no instance has owned for longer than two session timeouts (judged by the leader)",
        ),
        (
            "degraded",
            "1 while the flow is degraded (see /status for the reasons)",
        ),
        (
            "ready",
            "1 once the flow reached both clusters and finished its first discovery pass",
        ),
        (
            "leader",
            "1 while this instance leads the flow (target changes, checkpoints, group offset sync, heartbeats)",
        ),
    ];
    let lag = Family::<PartitionLabel, Gauge>::default();
    let truncated = Family::<PartitionLabel, PromCounter>::default();
    let transformed = Family::<TransformLabel, PromCounter>::default();
    let rebalances = Family::<FlowLabel, PromCounter>::default();
    let generation = Family::<MemberLabel, Gauge>::default();
    let placed = Family::<PlacementLabel, Gauge>::default();
    let rereads = Family::<GroupLabel, Gauge>::default();
    let tail = Family::<GroupLabel, Gauge>::default();
    let active = Family::<GroupLabel, Gauge>::default();
    let audited = Family::<AuditLabel, PromCounter>::default();
    let audit_passes = Family::<FlowLabel, PromCounter>::default();
    let audit_failed = Family::<FlowLabel, PromCounter>::default();
    let audit_behind = Family::<FlowLabel, Gauge>::default();
    let audit_last = Family::<FlowLabel, Gauge>::default();
    let families: Vec<Family<FlowLabel, Gauge>> =
        gauges.iter().map(|_| Family::default()).collect();
    for f in flows {
        let status = f.status();
        let health = f.health();
        let owned: usize = status.partitions.values().map(|p| p.len()).sum();
        let paused = status
            .partitions
            .values()
            .flat_map(|p| p.values())
            .filter(|p| p.paused.is_some())
            .count();
        let values = [
            status.mirrored.len() as i64,
            owned as i64,
            paused as i64,
            status.unowned.len() as i64,
            i64::from(health.state != "ok"),
            i64::from(health.ready),
            i64::from(status.leader),
        ];
        for (family, v) in families.iter().zip(values) {
            family.get_or_create(&label(f)).set(v);
        }
        rebalances
            .get_or_create(&label(f))
            .inc_by(status.rebalances);
        for (member, m) in &status.members {
            if let Some(g) = m.generation {
                generation
                    .get_or_create(&MemberLabel {
                        flow: f.flow.clone(),
                        member: *member,
                    })
                    .set(i64::from(g));
            }
        }
        for (group, g) in &status.groups {
            let unplaced = g.partitions.saturating_sub(g.exact + g.approximate);
            for (placement, n) in [
                ("exact", g.exact),
                ("approximate", g.approximate),
                ("unplaced", unplaced),
            ] {
                placed
                    .get_or_create(&PlacementLabel {
                        flow: f.flow.clone(),
                        group: group.clone(),
                        placement,
                    })
                    .set(n as i64);
            }
            let label = GroupLabel {
                flow: f.flow.clone(),
                group: group.clone(),
            };
            rereads.get_or_create(&label).set(g.rereads);
            tail.get_or_create(&label).set(g.tail);
            if let Some(a) = g.active_on_target {
                active.get_or_create(&label).set(i64::from(a));
            }
        }
        if let Some(a) = &status.audit {
            for (result, n) in [
                ("equal", a.equal),
                ("mismatched", a.mismatched),
                ("missing", a.missing),
                ("extra", a.extra),
                ("unplaced", a.unplaced),
                ("unreadable", a.unreadable),
                ("removed_on_target", a.removed_on_target),
            ] {
                audited
                    .get_or_create(&AuditLabel {
                        flow: f.flow.clone(),
                        result,
                    })
                    .inc_by(n);
            }
            audit_passes.get_or_create(&label(f)).inc_by(a.passes);
            audit_failed.get_or_create(&label(f)).inc_by(a.failed_reads);
            audit_behind.get_or_create(&label(f)).set(a.behind as i64);
            if let Some(at) = a.last_pass_ms {
                audit_last.get_or_create(&label(f)).set(at / 1000);
            }
        }
        for t in &status.transforms {
            for (outcome, n) in [
                ("kept", t.kept),
                ("dropped", t.dropped),
                ("rewritten", t.rewritten),
                ("failed", t.failed),
            ] {
                transformed
                    .get_or_create(&TransformLabel {
                        flow: f.flow.clone(),
                        position: t.position,
                        transform: t.name.clone(),
                        outcome,
                    })
                    .inc_by(n);
            }
        }
        for (topic, partitions) in &status.source_truncated {
            for (p, t) in partitions {
                truncated
                    .get_or_create(&PartitionLabel {
                        flow: f.flow.clone(),
                        topic: topic.clone(),
                        partition: *p,
                    })
                    .inc_by(t.records);
            }
        }
        for (topic, partitions) in &status.partitions {
            for (p, s) in partitions {
                if let Some(l) = s.lag {
                    lag.get_or_create(&PartitionLabel {
                        flow: f.flow.clone(),
                        topic: topic.clone(),
                        partition: *p,
                    })
                    .set(l);
                }
            }
        }
    }
    for ((name, help), family) in gauges.iter().zip(families) {
        registry.register(*name, *help, family);
    }
    registry.register(
        "rebalances",
        "Times partitions were assigned to or revoked from this instance's replication tasks",
        rebalances,
    );
    registry.register(
        "group_generation",
        "The consumer-group generation each replication task of this instance last joined",
        generation,
    );
    registry.register(
        "group_failover_partitions",
        "Partitions a consumer group committed on, by how a failover would place its target offset now: exact, approximate (it re-reads records) or unplaced (no offset sync)",
        placed,
    );
    registry.register(
        "group_failover_rereads",
        "Records a consumer group would re-read on the target if it failed over now",
        rereads,
    );
    registry.register(
        "group_failover_tail_records",
        "Records behind a consumer group's position on the source that the offset syncs do not place on the target yet (not mirrored, or mirrored within the last offset flush): what a failover now would leave behind, at most",
        tail,
    );
    registry.register(
        "group_active_on_target",
        "1 while a consumer group has members on the target (its offsets are not synced there, and a failover refuses it)",
        active,
    );
    registry.register(
        "audit_records",
        "Source records the background audit (audit_interval) read, by result: equal, mismatched (its copy differs), missing (no copy at its mapped offset), extra (a target record no source record maps to), unplaced (the offset map does not place it: not compared), unreadable (gone at the source before audited), removed_on_target (its copy is below the target's log start: retention or DeleteRecords there)",
        audited,
    );
    registry.register(
        "audit_passes",
        "Passes of the background audit on this instance (the leader)",
        audit_passes,
    );
    registry.register(
        "audit_failed_reads",
        "Partition reads of the background audit that failed (audited again from where they were at the next pass)",
        audit_failed,
    );
    registry.register(
        "audit_behind_records",
        "Source records mirrored and placed by the offset map but not audited yet",
        audit_behind,
    );
    registry.register(
        "audit_last_pass_timestamp_seconds",
        "When the background audit last finished a pass (Unix time)",
        audit_last,
    );
    registry.register(
        "transform_records",
        "Records through each record transform of a flow's chain (position 0 first), by outcome: kept, dropped, rewritten, failed",
        transformed,
    );
    registry.register(
        "partition_lag_records",
        "Records of a source partition not yet mirrored (its end minus the mirrored position)",
        lag,
    );
    registry.register(
        "source_truncated_records",
        "Records of a source partition deleted at the source (retention, DeleteRecords) before this instance mirrored them",
        truncated,
    );
    for f in flows {
        registry
            .sub_registry_with_label(("flow".into(), f.flow.clone().into()))
            .register(
                "replication_latency_seconds",
                "Time from a record's timestamp on the source to the target's acknowledgement",
                Latency(f.clone()),
            );
    }
    plugins(&mut registry, telemetry);
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::telemetry::PartitionStatus;

    #[test]
    fn counters_are_labelled_by_flow() {
        let a = Arc::new(FlowTelemetry::new("a->b"));
        a.add(Counter::Records, 42);
        let text = render(&shown(&[a]));
        assert!(text.contains("# TYPE kmirror_records counter"), "{text}");
        assert!(
            text.contains("kmirror_records_total{flow=\"a->b\"} 42"),
            "{text}"
        );
        assert!(
            text.contains("kmirror_mirrored_topics{flow=\"a->b\"} 0"),
            "{text}"
        );
        a_gauge_per_value(&text);
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    fn shown(flows: &[Arc<FlowTelemetry>]) -> Telemetry {
        let t = Telemetry::default();
        for f in flows {
            t.add_flow(f.clone());
        }
        t
    }

    #[test]
    fn plugins_and_reloads_are_exported() {
        let t = Telemetry::default();
        let p = t.plugins.entry("/p/policy.wasm");
        p.call(std::time::Duration::from_micros(20), None, None);
        p.loaded("ab12", &[crate::policy::Role::ReplicationPolicy]);
        p.reload_rejected("renames orders");
        t.config_reloaded(true, "ok");
        let text = render(&t);
        for line in [
            "kmirror_plugin_calls_total{plugin=\"/p/policy.wasm\"} 1",
            "kmirror_plugin_errors_total{plugin=\"/p/policy.wasm\",kind=\"trap\"} 0",
            "kmirror_plugin_reloads_total{plugin=\"/p/policy.wasm\",result=\"rejected\"} 1",
            "kmirror_plugin_call_duration_seconds_count{plugin=\"/p/policy.wasm\"} 1",
            "kmirror_config_reloads_total{result=\"accepted\"} 1",
        ] {
            assert!(text.contains(line), "{line}:\n{text}");
        }
        assert!(
            text.contains(
                "kmirror_plugin_loaded_timestamp_seconds{plugin=\"/p/policy.wasm\",sha256=\"ab12\"}"
            ),
            "{text}"
        );
    }

    /// Every gauge of the flow is rendered (none dropped by a mismatched list).
    fn a_gauge_per_value(text: &str) {
        for g in [
            "mirrored_topics",
            "owned_partitions",
            "paused_partitions",
            "unowned_partitions",
            "degraded",
            "ready",
            "leader",
        ] {
            assert!(
                text.contains(&format!("kmirror_{g}{{flow=\"a->b\"}} ")),
                "{g}: {text}"
            );
        }
    }

    #[test]
    fn every_counter_is_rendered_under_its_status_name() {
        let a = Arc::new(FlowTelemetry::new("a->b"));
        let text = render(&shown(std::slice::from_ref(&a)));
        let json = a.to_json();
        for c in Counter::ALL {
            assert!(
                text.contains(&format!("kmirror_{}_total{{flow=\"a->b\"}} 0", c.name())),
                "{text}"
            );
            assert_eq!(json[c.name()], 0, "{json}");
        }
    }

    #[test]
    fn records_lost_at_the_source_are_counted_per_partition() {
        use crate::flow::replication::truncation::Truncation;
        let a = Arc::new(FlowTelemetry::new("a->b"));
        a.source_truncated("orders", 1, &Truncation::Deleted { from: 5, to: 35 }, false);
        a.source_truncated(
            "orders",
            1,
            &Truncation::Deleted { from: 50, to: 60 },
            false,
        );
        let text = render(&shown(std::slice::from_ref(&a)));
        assert!(
            text.contains(
                "kmirror_source_truncated_records_total{flow=\"a->b\",topic=\"orders\",partition=\"1\"} 40"
            ),
            "{text}"
        );
        let json = a.to_json();
        let t = &json["source_truncated"]["orders"]["1"];
        assert_eq!(t["records"], 40, "{json}");
        assert_eq!(t["last"]["kind"], "deleted", "{json}");
        assert_eq!(t["last"]["from"], 50, "{json}");
    }

    #[test]
    fn each_groups_failover_placement_is_exported() {
        let f = Arc::new(FlowTelemetry::new("a->b"));
        f.update(|s| {
            s.groups.insert(
                "app".into(),
                crate::flow::telemetry::GroupStatus {
                    partitions: 5,
                    exact: 3,
                    approximate: 1,
                    rereads: 42,
                    tail: 7,
                    active_on_target: Some(true),
                },
            );
            s.groups.insert(
                "idle".into(),
                crate::flow::telemetry::GroupStatus::default(),
            );
        });
        let text = render(&shown(&[f]));
        for line in [
            r#"kmirror_group_failover_partitions{flow="a->b",group="app",placement="exact"} 3"#,
            r#"kmirror_group_failover_partitions{flow="a->b",group="app",placement="approximate"} 1"#,
            r#"kmirror_group_failover_partitions{flow="a->b",group="app",placement="unplaced"} 1"#,
            r#"kmirror_group_failover_rereads{flow="a->b",group="app"} 42"#,
            r#"kmirror_group_failover_tail_records{flow="a->b",group="app"} 7"#,
            r#"kmirror_group_active_on_target{flow="a->b",group="app"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing:\n{text}");
        }
        assert!(
            !text.contains(r#"kmirror_group_active_on_target{flow="a->b",group="idle"}"#),
            "unknown is not shown as 0:\n{text}"
        );
    }

    #[test]
    fn the_audit_is_exported_only_where_it_runs() {
        let f = Arc::new(FlowTelemetry::new("a->b"));
        let idle = Arc::new(FlowTelemetry::new("c->d"));
        f.update(|s| {
            s.audit = Some(crate::flow::telemetry::AuditStatus {
                passes: 3,
                last_pass_ms: Some(1_700_000_000_123),
                equal: 900,
                mismatched: 2,
                missing: 1,
                behind: 40,
                ..Default::default()
            })
        });
        let text = render(&shown(&[f, idle]));
        for line in [
            r#"kmirror_audit_records_total{flow="a->b",result="equal"} 900"#,
            r#"kmirror_audit_records_total{flow="a->b",result="mismatched"} 2"#,
            r#"kmirror_audit_records_total{flow="a->b",result="missing"} 1"#,
            r#"kmirror_audit_records_total{flow="a->b",result="extra"} 0"#,
            r#"kmirror_audit_passes_total{flow="a->b"} 3"#,
            r#"kmirror_audit_behind_records{flow="a->b"} 40"#,
            r#"kmirror_audit_last_pass_timestamp_seconds{flow="a->b"} 1700000000"#,
        ] {
            assert!(text.contains(line), "{line} missing:\n{text}");
        }
        assert!(
            !text.contains(r#"kmirror_audit_passes_total{flow="c->d"}"#),
            "{text}"
        );
    }

    #[test]
    fn partition_lag_and_latency_are_exported() {
        let a = Arc::new(FlowTelemetry::new("a->b"));
        a.latency.observe_ms(20, 3);
        a.update(|s| {
            s.partitions.entry("orders".into()).or_default().insert(
                1,
                PartitionStatus {
                    position: Some(10),
                    end: Some(15),
                    lag: Some(5),
                    in_flight: 0,
                    state: "mirroring",
                    paused: None,
                    unstored_ms: None,
                },
            );
        });
        let text = render(&shown(&[a]));
        assert!(
            text.contains(
                "kmirror_partition_lag_records{flow=\"a->b\",topic=\"orders\",partition=\"1\"} 5"
            ),
            "{text}"
        );
        assert!(
            text.contains("kmirror_replication_latency_seconds_count{flow=\"a->b\"} 3"),
            "{text}"
        );
        assert!(
            text.contains(
                "kmirror_replication_latency_seconds_bucket{le=\"0.025\",flow=\"a->b\"} 3"
            ) || text.contains(
                "kmirror_replication_latency_seconds_bucket{flow=\"a->b\",le=\"0.025\"} 3"
            ),
            "{text}"
        );
        assert!(
            text.contains("kmirror_owned_partitions{flow=\"a->b\"} 1"),
            "{text}"
        );
    }
}
