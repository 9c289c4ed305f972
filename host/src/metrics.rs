//! Prometheus metrics (OpenMetrics text), rendered at scrape time from every flow's
//! telemetry: each [`Counter`] as `kmirror_<name>_total{flow}`, plus gauges.

use crate::flow::telemetry::{Counter, FlowTelemetry};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter as PromCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FlowLabel {
    flow: String,
}

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every flow's counters in the OpenMetrics text format (`kmirror_*`).
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
    let mirrored = Family::<FlowLabel, Gauge>::default();
    for f in flows {
        mirrored
            .get_or_create(&label(f))
            .set(f.status().mirrored.len() as i64);
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
}
