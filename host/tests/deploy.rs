//! The deployment files as far as they can be checked here (no Docker engine, no
//! cluster): the example configuration validates and names every key; the Kubernetes
//! manifests parse with the expected kinds, replicas and probes, and their configuration
//! validates; the systemd unit passes `systemd-analyze verify`; the container build file is
//! multi-stage, unprivileged, with the plugin directory and cache as volumes.

mod common;

use common::kmirror;
use std::path::{Path, PathBuf};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn validate(config: &Path) -> (Option<i32>, String) {
    let o = kmirror()
        .arg("--no-cache")
        .args(["validate", "--config"])
        .arg(config)
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code(), all)
}

#[test]
fn the_example_configuration_validates_and_names_every_key() {
    let path = repo("examples/kmirror.toml");
    let (code, out) = validate(&path);
    assert_eq!(code, Some(0), "{out}");
    let text = std::fs::read_to_string(&path).unwrap();
    for key in [
        "bootstrap_servers",
        "librdkafka",
        "dir",
        "cache_dir",
        "memory_limit_mib",
        "call_timeout",
        "max_component_size_mib",
        "compile_timeout",
        "listen",
        "builtin",
        "config",
        "source",
        "target",
        "topic_filter",
        "group_filter",
        "replication_policy",
        "config_property_filter",
        "refresh_topics_interval",
        "offset_lag_max",
        "replication_factor",
        "emit_heartbeats_enabled",
        "emit_heartbeats_interval",
        "offset_syncs_topic_location",
        "offset_flush_interval",
        "start_offset",
        "sync_topic_configs",
        "emit_checkpoints_enabled",
        "emit_checkpoints_interval",
        "refresh_groups_interval",
        "sync_group_offsets",
        "sync_group_offsets_interval",
        "on_unproducible",
        "session_timeout",
        "shutdown_timeout",
        "unreachable_after",
        "replication_tasks",
        "allow_policy_change",
    ] {
        assert!(
            text.contains(&format!("{key} =")) || text.contains(&format!("{key}]")),
            "examples/kmirror.toml does not mention `{key}`"
        );
    }
}

#[test]
fn the_kubernetes_manifests_parse_with_the_expected_kinds_and_probes() {
    let path = repo("deploy/k8s/kmirror.yaml");
    let script = r#"
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
print(json.dumps(docs))
"#;
    let o = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let docs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let kinds: Vec<&str> = docs
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        vec!["ConfigMap", "PersistentVolumeClaim", "Deployment"]
    );
    let deployment = &docs[2];
    assert_eq!(deployment["spec"]["replicas"], 3);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/health");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/ready");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"],
        true
    );
    let mounts: Vec<&str> = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    assert!(
        mounts.contains(&"/etc/kmirror/plugins.d") && mounts.contains(&"/var/cache/kmirror"),
        "{mounts:?}"
    );
    // The ConfigMap's configuration is valid.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("plugins.d")).unwrap();
    let config = dir.path().join("kmirror.toml");
    std::fs::write(&config, docs[0]["data"]["kmirror.toml"].as_str().unwrap()).unwrap();
    let (code, out) = validate(&config);
    assert_eq!(code, Some(0), "{out}");
}

#[test]
fn the_systemd_unit_verifies() {
    let unit = std::fs::read_to_string(repo("deploy/systemd/kmirror.service")).unwrap();
    assert!(unit.contains("Restart=on-failure"));
    let Ok(found) = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
    else {
        eprintln!("systemd-analyze is not installed here: only the unit's content is checked");
        return;
    };
    assert!(found.status.success());
    // The unit names the installed binary; verify it against the one under test.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kmirror.service");
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/kmirror", env!("CARGO_BIN_EXE_kmirror")),
    )
    .unwrap();
    let o = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let relevant: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("kmirror.service") && !l.contains("User=") && !l.contains("Group="))
        .collect();
    assert!(relevant.is_empty(), "systemd-analyze: {err}");
}

#[test]
fn the_container_build_is_multi_stage_and_unprivileged() {
    let text = std::fs::read_to_string(repo("Dockerfile")).unwrap();
    let froms = text.lines().filter(|l| l.starts_with("FROM ")).count();
    assert!(froms >= 2, "multi-stage");
    let user = text
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("USER");
    assert!(user.trim() != "root" && user.trim() != "0", "non-root");
    assert!(text.contains("ENTRYPOINT [\"/usr/local/bin/kmirror\"]"));
    let volume = text
        .lines()
        .find(|l| l.starts_with("VOLUME"))
        .expect("VOLUME");
    assert!(
        volume.contains("/etc/kmirror/plugins.d") && volume.contains("/var/cache/kmirror"),
        "{volume}"
    );
}
