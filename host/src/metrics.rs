//! Prometheus metrics (OpenMetrics text), rendered from every flow's counters at scrape time.

use crate::flow::FlowStats;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::Ordering;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FlowLabel {
    flow: String,
}

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every flow's counters in the OpenMetrics text format (`kmirror_*`).
pub fn render(flows: &[Arc<FlowStats>]) -> String {
    let mut registry = Registry::with_prefix("kmirror");
    let counters: [(&str, &str, fn(&FlowStats) -> u64); 9] = [
        ("records", "Records mirrored (acked by the target)", |f| {
            f.records.load(Ordering::Relaxed)
        }),
        ("bytes", "Key and value bytes mirrored", |f| {
            f.bytes.load(Ordering::Relaxed)
        }),
        ("offset_syncs", "Offset syncs written", |f| {
            f.syncs.load(Ordering::Relaxed)
        }),
        ("heartbeats", "Heartbeats written", |f| {
            f.heartbeats.load(Ordering::Relaxed)
        }),
        ("checkpoints", "Checkpoints written", |f| {
            f.checkpoints.load(Ordering::Relaxed)
        }),
        (
            "group_offset_syncs",
            "Group offsets committed to the target",
            |f| f.group_syncs.load(Ordering::Relaxed),
        ),
        (
            "active_target_groups_skipped",
            "Group offset syncs skipped: the target group was active",
            |f| f.active_groups_skipped.load(Ordering::Relaxed),
        ),
        (
            "malformed_offset_syncs",
            "Malformed offset-sync records skipped",
            |f| f.malformed_syncs.load(Ordering::Relaxed),
        ),
        ("errors", "Errors (Kafka, plugins), each also logged", |f| {
            f.errors.load(Ordering::Relaxed)
        }),
    ];
    for (name, help, value) in counters {
        let family = Family::<FlowLabel, Counter>::default();
        for f in flows {
            family
                .get_or_create(&FlowLabel {
                    flow: f.flow.clone(),
                })
                .inc_by(value(f));
        }
        registry.register(name, help, family);
    }
    let mirrored = Family::<FlowLabel, Gauge>::default();
    for f in flows {
        let n = f
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .mirrored
            .len();
        mirrored
            .get_or_create(&FlowLabel {
                flow: f.flow.clone(),
            })
            .set(n as i64);
    }
    registry.register("mirrored_topics", "Source topics being mirrored", mirrored);
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_labelled_by_flow() {
        let a = Arc::new(FlowStats::new("a->b"));
        a.records.store(42, Ordering::Relaxed);
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
}
