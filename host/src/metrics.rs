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

use crate::flow::telemetry::{Counter, FlowTelemetry, LatencyHistogram};
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
struct MemberLabel {
    flow: String,
    member: u32,
}

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

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
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let h: &LatencyHistogram = &self.0.latency;
        let (sum, count, buckets) = h.snapshot();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// Every flow's metrics in the OpenMetrics text format (`kmirror_*`).
pub fn render(flows: &[Arc<FlowTelemetry>]) -> String {
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
            "degraded",
            "1 while the flow is degraded (see /status for the reasons)",
        ),
        (
            "ready",
            "1 once the flow reached both clusters and finished its first discovery pass",
        ),
    ];
    let lag = Family::<PartitionLabel, Gauge>::default();
    let rebalances = Family::<FlowLabel, PromCounter>::default();
    let generation = Family::<MemberLabel, Gauge>::default();
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
        "partition_lag_records",
        "Records of a source partition not yet mirrored (its end minus the mirrored position)",
        lag,
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
        let text = render(&[a]);
        assert!(text.contains("# TYPE kmirror_records counter"), "{text}");
        assert!(
            text.contains("kmirror_records_total{flow=\"a->b\"} 42"),
            "{text}"
        );
        assert!(
            text.contains("kmirror_mirrored_topics{flow=\"a->b\"} 0"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn every_counter_is_rendered_under_its_status_name() {
        let a = Arc::new(FlowTelemetry::new("a->b"));
        let text = render(std::slice::from_ref(&a));
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
                },
            );
        });
        let text = render(&[a]);
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
