//! The observability files: the Prometheus alerting rules pass `promtool check rules` and
//! fire exactly when they should (`promtool test rules`); the Grafana dashboard is an
//! importable dashboard whose every query parses; both name only metrics that `/metrics`
//! renders. (tests/e2e/observability.rs runs them against a real daemon and a real
//! Prometheus.)

mod common;

use common::{repo, yaml_docs};
use std::path::Path;

/// Runs `promtool` with `args` in `dir`; (success, stdout + stderr).
fn promtool(dir: &Path, args: &[&std::ffi::OsStr]) -> (bool, String) {
    let o = std::process::Command::new("promtool")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("promtool is not installed ({e}): run scripts/setup.sh"));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), all)
}

const RULES: &str = "deploy/prometheus/kmirror-rules.yml";
const DASHBOARD: &str = "deploy/grafana/kmirror-dashboard.json";

const ALERTS: [&str; 10] = [
    "KmirrorFlowDegraded",
    "KmirrorLagGrowing",
    "KmirrorPartitionPaused",
    "KmirrorSourceRecordsLost",
    "KmirrorAuditFoundDifferences",
    "KmirrorPartitionUnowned",
    "KmirrorPluginErrors",
    "KmirrorCommitsFailing",
    "KmirrorNotReady",
    "KmirrorNoLeader",
];

/// Every rule of the rules file, as JSON.
fn rules() -> Vec<serde_json::Value> {
    let docs = yaml_docs(&repo(RULES));
    docs[0]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .collect()
}

#[test]
fn the_alerting_rules_pass_promtool_and_tell_the_operator_what_to_do() {
    let (ok, out) = promtool(
        &repo(""),
        &["check".as_ref(), "rules".as_ref(), RULES.as_ref()],
    );
    assert!(ok, "{out}");
    let rules = rules();
    let names: Vec<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
    assert_eq!(names, ALERTS);
    for r in &rules {
        let severity = r["labels"]["severity"].as_str().unwrap_or_default();
        assert!(["warning", "critical"].contains(&severity), "{r}");
        assert!(r["for"].is_string(), "{r}");
        assert!(r["annotations"]["summary"].is_string(), "{r}");
        let description = r["annotations"]["description"].as_str().unwrap();
        assert!(
            description.contains("/status") || description.contains("kmirror status"),
            "{r}"
        );
    }
}

/// Input series and the alerts they must (and must not) raise, with the production `for:`.
const ALERT_TESTS: &str = r#"
rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - {series: 'kmirror_degraded{flow="a->b",instance="k1",job="kmirror"}', values: '0 1x40'}
      - {series: 'kmirror_degraded{flow="c->d",instance="k1",job="kmirror"}', values: '0x40'}
      # a->b: above 1000 and growing; c->d: high but flat; e->f: growing but small;
      # g->h: grows for 20 minutes, then catches up.
      - {series: 'kmirror_partition_lag_records{flow="a->b",topic="t",partition="0",instance="k1",job="kmirror"}', values: '2000+100x40'}
      - {series: 'kmirror_partition_lag_records{flow="a->b",topic="t",partition="1",instance="k2",job="kmirror"}', values: '0x40'}
      - {series: 'kmirror_partition_lag_records{flow="c->d",topic="t",partition="0",instance="k1",job="kmirror"}', values: '5000x40'}
      - {series: 'kmirror_partition_lag_records{flow="e->f",topic="t",partition="0",instance="k1",job="kmirror"}', values: '0+10x40'}
      - {series: 'kmirror_partition_lag_records{flow="g->h",topic="t",partition="0",instance="k1",job="kmirror"}', values: '2000+100x20 3800-200x19'}
      - {series: 'kmirror_paused_partitions{flow="a->b",instance="k1",job="kmirror"}', values: '0 0 1x40'}
      - {series: 'kmirror_paused_partitions{flow="c->d",instance="k1",job="kmirror"}', values: '0x40'}
      # a->b loses records at 3m, c->d at 3m and again at 20m, e->f never.
      - {series: 'kmirror_source_truncations_total{flow="a->b",instance="k1",job="kmirror"}', values: '0 0 0 1x37'}
      - {series: 'kmirror_source_truncations_total{flow="c->d",instance="k1",job="kmirror"}', values: '0 0 0 1x17 2x20'}
      - {series: 'kmirror_source_truncations_total{flow="e->f",instance="k1",job="kmirror"}', values: '0x40'}
      # a->b's audit finds an extra record at 3m; c->d's finds only equal ones.
      - {series: 'kmirror_audit_records_total{flow="a->b",result="extra",instance="k1",job="kmirror"}', values: '0 0 0 1x37'}
      - {series: 'kmirror_audit_records_total{flow="a->b",result="equal",instance="k1",job="kmirror"}', values: '0+100x40'}
      - {series: 'kmirror_audit_records_total{flow="c->d",result="equal",instance="k1",job="kmirror"}', values: '0+100x40'}
      - {series: 'kmirror_audit_records_total{flow="c->d",result="missing",instance="k1",job="kmirror"}', values: '0x40'}
      # e->f: a new leader's audit whose first pass (its first sample) already found 10.
      - {series: 'kmirror_audit_records_total{flow="e->f",result="missing",instance="k2",job="kmirror"}', values: '_ _ _ 10x37'}
      - {series: 'kmirror_unowned_partitions{flow="a->b",instance="k1",job="kmirror"}', values: '0 0 3x40'}
      - {series: 'kmirror_unowned_partitions{flow="c->d",instance="k1",job="kmirror"}', values: '0x40'}
      - {series: 'kmirror_plugin_errors_total{plugin="/p/f.wasm",kind="trap",instance="k1",job="kmirror"}', values: '0+2x40'}
      - {series: 'kmirror_plugin_errors_total{plugin="/p/f.wasm",kind="timeout",instance="k1",job="kmirror"}', values: '7x40'}
      - {series: 'kmirror_commit_failures_total{flow="a->b",instance="k1",job="kmirror"}', values: '0+1x40'}
      - {series: 'kmirror_commit_failures_total{flow="c->d",instance="k1",job="kmirror"}', values: '3x40'}
      - {series: 'kmirror_ready{flow="a->b",instance="k1",job="kmirror"}', values: '0x40'}
      - {series: 'kmirror_ready{flow="c->d",instance="k1",job="kmirror"}', values: '0 1x40'}
      # a->b: neither instance leads; c->d: k2 does from 1m on.
      - {series: 'kmirror_leader{flow="a->b",instance="k1",job="kmirror"}', values: '0x40'}
      - {series: 'kmirror_leader{flow="a->b",instance="k2",job="kmirror"}', values: '0x40'}
      - {series: 'kmirror_leader{flow="c->d",instance="k1",job="kmirror"}', values: '0x40'}
      - {series: 'kmirror_leader{flow="c->d",instance="k2",job="kmirror"}', values: '0 1x40'}
    alert_rule_test:
      - {eval_time: 5m, alertname: KmirrorFlowDegraded}
      - eval_time: 6m
        alertname: KmirrorFlowDegraded
        exp_alerts: [exp_labels: {severity: warning, flow: "a->b", instance: k1, job: kmirror}]
      - {eval_time: 10m, alertname: KmirrorLagGrowing}
      - eval_time: 12m
        alertname: KmirrorLagGrowing
        exp_alerts:
          - exp_labels: {severity: warning, flow: "a->b", job: kmirror}
          - exp_labels: {severity: warning, flow: "g->h", job: kmirror}
      - eval_time: 35m
        alertname: KmirrorLagGrowing
        exp_alerts: [exp_labels: {severity: warning, flow: "a->b", job: kmirror}]
      - {eval_time: 2m, alertname: KmirrorPartitionPaused}
      - eval_time: 3m
        alertname: KmirrorPartitionPaused
        exp_alerts: [exp_labels: {severity: critical, flow: "a->b", instance: k1, job: kmirror}]
      - {eval_time: 2m, alertname: KmirrorSourceRecordsLost}
      - eval_time: 4m
        alertname: KmirrorSourceRecordsLost
        exp_alerts:
          - exp_labels: {severity: critical, flow: "a->b", instance: k1, job: kmirror}
          - exp_labels: {severity: critical, flow: "c->d", instance: k1, job: kmirror}
      - eval_time: 25m
        alertname: KmirrorSourceRecordsLost
        exp_alerts: [exp_labels: {severity: critical, flow: "c->d", instance: k1, job: kmirror}]
      - {eval_time: 39m, alertname: KmirrorSourceRecordsLost}
      - {eval_time: 2m, alertname: KmirrorAuditFoundDifferences}
      - eval_time: 4m
        alertname: KmirrorAuditFoundDifferences
        exp_alerts:
          - exp_labels: {severity: critical, flow: "a->b", result: extra, instance: k1, job: kmirror}
          - exp_labels: {severity: critical, flow: "e->f", result: missing, instance: k2, job: kmirror}
      - {eval_time: 30m, alertname: KmirrorAuditFoundDifferences}
      - {eval_time: 2m, alertname: KmirrorPartitionUnowned}
      - eval_time: 3m
        alertname: KmirrorPartitionUnowned
        exp_alerts: [exp_labels: {severity: critical, flow: "a->b", instance: k1, job: kmirror}]
      - {eval_time: 5m, alertname: KmirrorPluginErrors}
      - eval_time: 10m
        alertname: KmirrorPluginErrors
        exp_alerts: [exp_labels: {severity: warning, plugin: /p/f.wasm, kind: trap, instance: k1, job: kmirror}]
      - {eval_time: 5m, alertname: KmirrorCommitsFailing}
      - eval_time: 10m
        alertname: KmirrorCommitsFailing
        exp_alerts: [exp_labels: {severity: warning, flow: "a->b", instance: k1, job: kmirror}]
      - {eval_time: 4m, alertname: KmirrorNotReady}
      - eval_time: 5m
        alertname: KmirrorNotReady
        exp_alerts: [exp_labels: {severity: warning, flow: "a->b", instance: k1, job: kmirror}]
      - {eval_time: 4m, alertname: KmirrorNoLeader}
      - eval_time: 5m
        alertname: KmirrorNoLeader
        exp_alerts: [exp_labels: {severity: critical, flow: "a->b", job: kmirror}]
"#;

/// `promtool test rules` compares annotations too: the rules are tested without them (the
/// templates are checked by `promtool check rules`).
#[test]
fn the_alerts_fire_when_and_only_when_they_should() {
    let dir = tempfile::tempdir().unwrap();
    let mut rules = yaml_docs(&repo(RULES))[0].clone();
    for group in rules["groups"].as_array_mut().unwrap() {
        for rule in group["rules"].as_array_mut().unwrap() {
            rule.as_object_mut().unwrap().remove("annotations");
        }
    }
    // JSON is YAML.
    std::fs::write(dir.path().join("rules.yml"), rules.to_string()).unwrap();
    std::fs::write(dir.path().join("tests.yml"), ALERT_TESTS).unwrap();
    let (ok, out) = promtool(
        dir.path(),
        &["test".as_ref(), "rules".as_ref(), "tests.yml".as_ref()],
    );
    assert!(ok, "{out}");
    for alert in ALERTS {
        assert!(
            ALERT_TESTS.contains(&format!("alertname: {alert}\n")),
            "{alert} untested"
        );
    }
}

/// Every panel of the dashboard, rows' nested panels included.
fn dashboard_panels(dashboard: &serde_json::Value) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().unwrap() {
        out.push(p.clone());
        out.extend(p["panels"].as_array().into_iter().flatten().cloned());
    }
    out
}

/// The dashboard's queries with Grafana's variables replaced as a query of flow `flow` over
/// `rate_interval` would see them.
fn dashboard_queries(
    dashboard: &serde_json::Value,
    flow: &str,
    rate_interval: &str,
) -> Vec<String> {
    dashboard_panels(dashboard)
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| {
            t["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", rate_interval)
                .replace("$flow", flow)
        })
        .collect()
}

fn dashboard() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(repo(DASHBOARD)).unwrap()).unwrap()
}

#[test]
fn the_dashboard_is_importable_and_every_query_parses() {
    let d = dashboard();
    assert!(d["schemaVersion"].as_u64().unwrap() >= 36, "schemaVersion");
    assert!(d["uid"].is_string() && d["title"].is_string());
    let vars = d["templating"]["list"].as_array().unwrap();
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("${name}"))
    };
    assert_eq!(var("DS_PROMETHEUS")["type"], "datasource");
    assert_eq!(var("DS_PROMETHEUS")["query"], "prometheus");
    assert_eq!(
        var("flow")["query"]["query"],
        "label_values(kmirror_ready, flow)"
    );
    let panels = dashboard_panels(&d);
    let mut ids = std::collections::BTreeSet::new();
    for p in &panels {
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "duplicate panel id: {p}"
        );
        let g = &p["gridPos"];
        assert!(
            g["x"].as_u64().unwrap() + g["w"].as_u64().unwrap() <= 24,
            "{p}"
        );
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${DS_PROMETHEUS}", "{}", p["title"]);
            assert!(
                p["targets"].as_array().is_some_and(|t| !t.is_empty()),
                "{}",
                p["title"]
            );
            for t in p["targets"].as_array().unwrap() {
                assert_eq!(t["datasource"]["uid"], "${DS_PROMETHEUS}", "{}", p["title"]);
            }
        }
    }
    // Every query parses as PromQL: promtool checks them as recording rules.
    let queries = dashboard_queries(&d, "primary->backup", "1m");
    let rules: Vec<serde_json::Value> = queries
        .iter()
        .enumerate()
        .map(|(i, q)| {
            assert!(!q.contains('$'), "a variable left in {q}");
            serde_json::json!({"record": format!("dashboard:query{i}"), "expr": q})
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("queries.yml");
    let groups = serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]});
    std::fs::write(&file, groups.to_string()).unwrap();
    let (ok, out) = promtool(
        dir.path(),
        &["check".as_ref(), "rules".as_ref(), file.as_ref()],
    );
    assert!(ok, "{out}");
    // The panels the dashboard promises.
    let all = queries.join("\n");
    for metric in [
        "kmirror_records_total",
        "kmirror_bytes_total",
        "kmirror_partition_lag_records",
        "kmirror_replication_latency_seconds_bucket",
        "kmirror_paused_partitions",
        "kmirror_unowned_partitions",
        "kmirror_degraded",
        "kmirror_ready",
        "kmirror_leader",
        "kmirror_rebalances_total",
        "kmirror_plugin_calls_total",
        "kmirror_plugin_errors_total",
        "kmirror_commit_failures_total",
        "kmirror_offset_syncs_total",
    ] {
        assert!(all.contains(metric), "no panel shows {metric}");
    }
}

/// The names `kmirror_*` in `text`.
fn metric_names(text: &str) -> std::collections::BTreeSet<String> {
    let name = regex::Regex::new(r"\bkmirror_[a-z_]+").unwrap();
    name.find_iter(text)
        .map(|m| m.as_str().to_string())
        .collect()
}

/// What `/metrics` renders for a flow with a mirrored partition and a task in a group, and
/// a loaded plugin: (the series' names, the metric families' names).
fn rendered_names() -> (
    std::collections::BTreeSet<String>,
    std::collections::BTreeSet<String>,
) {
    use kmirror::flow::telemetry::{FlowTelemetry, MemberStatus, PartitionStatus};
    use std::sync::Arc;
    let telemetry = kmirror::telemetry::Telemetry::default();
    let flow = Arc::new(FlowTelemetry::new("primary->backup"));
    flow.update(|s| {
        let partition = PartitionStatus {
            position: Some(10),
            end: Some(15),
            lag: Some(5),
            in_flight: 0,
            state: "mirroring",
            paused: None,
            unstored_ms: None,
        };
        let member = MemberStatus {
            partitions: [("orders".to_string(), [(0, partition)].into())].into(),
            generation: Some(3),
            ..MemberStatus::default()
        };
        s.publish_member(0, Some(member));
    });
    flow.source_truncated(
        "orders",
        0,
        &kmirror::flow::replication::truncation::Truncation::Deleted { from: 5, to: 40 },
        false,
    );
    flow.update(|s| s.audit = Some(kmirror::flow::telemetry::AuditStatus::default()));
    telemetry.add_flow(flow);
    let plugin = telemetry.plugins.entry("/plugins/policy.wasm");
    plugin.call(std::time::Duration::from_micros(20), None, None);
    plugin.loaded("ab12", &[kmirror::policy::Role::ReplicationPolicy]);
    let text = kmirror::metrics::render(&telemetry);
    let series = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect();
    let families = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_string)
        .collect();
    (series, families)
}

/// Queries name series exactly as they are scraped (`kmirror_records_total`, not the family
/// `kmirror_records`; a histogram's `_bucket`); prose may name a family.
#[test]
fn the_dashboard_and_the_rules_name_only_exported_metrics() {
    let (series, families) = rendered_names();
    assert!(
        series.contains("kmirror_partition_lag_records"),
        "{series:?}"
    );
    assert!(series.contains("kmirror_group_generation"), "{series:?}");
    assert!(
        series.contains("kmirror_plugin_call_duration_seconds_bucket"),
        "{series:?}"
    );
    let mut queries = dashboard_queries(&dashboard(), ".*", "1m");
    queries.push(dashboard()["templating"].to_string());
    queries.extend(
        rules()
            .iter()
            .map(|r| r["expr"].as_str().unwrap().to_string()),
    );
    let in_queries = metric_names(&queries.join("\n"));
    let unknown: Vec<&String> = in_queries.difference(&series).collect();
    assert!(
        unknown.is_empty(),
        "queries name series /metrics does not have: {unknown:?}"
    );
    let text = std::fs::read_to_string(repo(DASHBOARD)).unwrap()
        + &std::fs::read_to_string(repo(RULES)).unwrap();
    let unknown: Vec<String> = metric_names(&text)
        .into_iter()
        .filter(|n| !series.contains(n) && !families.contains(n))
        .collect();
    assert!(
        unknown.is_empty(),
        "the files name metrics /metrics does not have: {unknown:?}"
    );
}
