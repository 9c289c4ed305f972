//! End to end: live changes to a running `kmirror run` — component files replaced in its
//! plugin directory (hot reload), and the configuration reloaded on SIGHUP — against real
//! Tansu brokers, with records and topics checked by an independent client.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;

const T: Duration = Duration::from_secs(60);

/// A kmirror config: clusters, a status endpoint, the plugin directory `plugins`, and
/// `flows` (TOML `[[flows]]` tables).
fn config(
    dir: &Path,
    primary: &str,
    backup: &str,
    status: &str,
    plugins: &Path,
    flows: &str,
) -> PathBuf {
    config_file(dir, primary, backup, plugins, Some(status), flows)
}

/// Replaces `dir/name` with the built component `component` the way a deployment should:
/// written beside it, then renamed over it.
fn install(dir: &Path, name: &str, component: &str) {
    let bytes = std::fs::read(plugins_dir().join(component)).expect("built component");
    install_bytes(dir, name, &bytes);
}

fn install_bytes(dir: &Path, name: &str, bytes: &[u8]) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, bytes).expect("write component");
    std::fs::rename(&tmp, dir.join(name)).expect("rename component");
}

fn produce(c: &Client, topic: &str, from: usize, n: usize) {
    for i in from..from + n {
        let v = format!("{topic}-{i}");
        c.produce(
            topic,
            0,
            v.as_bytes(),
            v.as_bytes(),
            &[],
            1_700_000_000_000 + i as i64,
        );
    }
    c.flush();
}

/// `kmirror_plugin_reloads_total` of `plugin` for `result`, from `/metrics`.
fn reloads(status: &str, plugin: &Path, result: &str) -> u64 {
    let text = http_text(status, "/metrics").unwrap_or_default();
    let prefix = format!(
        "kmirror_plugin_reloads_total{{plugin=\"{}\",result=\"{result}\"}} ",
        plugin.display()
    );
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The plugin `path`'s entry in `/status`.
fn plugin_status(status: &str, path: &Path) -> Option<serde_json::Value> {
    let (_, json) = http_get(status, "/status")?;
    json["plugins"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == path.display().to_string())
        .cloned()
}

/// The flow's mirrored source topics -> target names, from `/status`.
fn mirrored(status: &str, flow: &str) -> Option<Vec<(String, String)>> {
    let (_, json) = http_get(status, "/status")?;
    let f = json["flows"]
        .as_array()?
        .iter()
        .find(|f| f["flow"] == flow)?;
    Some(
        f["mirrored"]
            .as_object()?
            .iter()
            .map(|(s, r)| (s.clone(), r[0].as_str().unwrap_or_default().to_string()))
            .collect(),
    )
}

fn wait_log(k: &Kmirror, what: &str) {
    wait_for(what, T, || k.logs().contains(what).then_some(()));
}

#[test]
fn a_replaced_policy_names_new_topics_and_renames_when_the_flow_allows_it() {
    let (primary, backup) = Broker::pair();
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    src.create_topic("orders", 1);
    produce(&src, "orders", 0, 20);

    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("plugins.d");
    std::fs::create_dir(&plugins).unwrap();
    install(&plugins, "policy.wasm", "default_policy.wasm");
    let status = free_addr();
    let flows = flow_table(
        "primary",
        "backup",
        "allow_policy_change = true\nreplication_policy = { plugin = \"policy.wasm\" }",
    );
    let cfg = config(
        dir.path(),
        &primary.addr,
        &backup.addr,
        &status,
        &plugins,
        &flows,
    );
    let k = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));
    dst.read_all("primary.orders", 1, 20, T);
    let policy = plugins.join("policy.wasm");
    let before = plugin_status(&status, &policy).expect("the policy in /status");
    assert!(before["calls"].as_u64().unwrap() > 0, "{before}");

    install(&plugins, "policy.wasm", "prod_prefix.wasm");
    wait_for("the reload to be accepted", T, || {
        (reloads(&status, &policy, "accepted") == 1).then_some(())
    });
    wait_log(
        &k,
        "allow_policy_change: the topic is mirrored under a new name",
    );
    let after = plugin_status(&status, &policy).unwrap();
    assert_ne!(
        before["loaded"]["sha256"], after["loaded"]["sha256"],
        "{after}"
    );

    // New topics follow the new policy; the renamed one goes on under its new name.
    src.create_topic("fresh", 1);
    produce(&src, "fresh", 0, 10);
    dst.read_all("prod-primary.fresh", 1, 10, T);
    // `fresh` arrived under its new name, so the data plane follows the new routes (they
    // come in one hand-over): every record produced to `orders` from now on goes to the
    // new name, none to the old one.
    produce(&src, "orders", 20, 5);
    let new_values: Vec<String> = (20..25).map(|i| format!("orders-{i}")).collect();
    let mut renamed = std::collections::BTreeMap::new();
    let arrived = poll_until(T, || {
        renamed = count_values(&dst.read_all("prod-primary.orders", 1, 5, Duration::from_secs(10)));
        new_values
            .iter()
            .all(|v| renamed.contains_key(v))
            .then_some(())
    });
    assert!(
        arrived.is_some(),
        "every record produced after the rename arrives under the new name: {renamed:?}"
    );
    assert!(
        dst.topics().contains_key("primary.orders"),
        "the old target topic is kept"
    );
    let old = count_values(&dst.read_all("primary.orders", 1, 20, T));
    assert!(
        (0..20).all(|i| old.contains_key(&format!("orders-{i}"))),
        "the old topic keeps the first 20 records: {old:?}"
    );
    let stray: Vec<&String> = new_values.iter().filter(|v| old.contains_key(*v)).collect();
    assert!(
        stray.is_empty(),
        "records produced after the rename arrived under the old name: {stray:?}"
    );
    assert!(!dst.topics().contains_key("primary.fresh"));
    assert!(k.logs().contains("plugin reloaded"), "{}", k.logs());
}

#[test]
fn a_renaming_a_broken_or_a_removed_component_leaves_the_running_one_serving() {
    let (primary, backup) = Broker::pair();
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    for t in ["orders", "hidden-a"] {
        src.create_topic(t, 1);
        produce(&src, t, 0, 10);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("plugins.d");
    std::fs::create_dir(&plugins).unwrap();
    install(&plugins, "policy.wasm", "default_policy.wasm");
    install(&plugins, "filter.wasm", "regex_filter.wasm");
    let status = free_addr();
    let flows = flow_table(
        "primary",
        "backup",
        r#"replication_policy = { plugin = "policy.wasm" }
topic_filter = { plugin = "filter.wasm", config = { "topics.exclude" = "hidden.*, __.*" } }"#,
    );
    let cfg = config(
        dir.path(),
        &primary.addr,
        &backup.addr,
        &status,
        &plugins,
        &flows,
    );
    let k = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));
    dst.read_all("primary.orders", 1, 10, T);
    let (policy, filter) = (plugins.join("policy.wasm"), plugins.join("filter.wasm"));

    // A policy that would rename `orders`: refused, the old one serves.
    install(&plugins, "policy.wasm", "prod_prefix.wasm");
    wait_for("the renaming policy to be rejected", T, || {
        (reloads(&status, &policy, "rejected") == 1).then_some(())
    });
    let p = plugin_status(&status, &policy).unwrap();
    let why = p["last_rejection"].as_str().unwrap_or_default();
    assert!(
        why.contains("rename") && why.contains("allow_policy_change"),
        "{p}"
    );

    // A filter that admits everything: `hidden-a` is mirrored from the next pass on.
    install(&plugins, "filter.wasm", "test_trap.wasm");
    wait_for("the new filter", T, || {
        (reloads(&status, &filter, "accepted") == 1).then_some(())
    });
    dst.read_all("primary.hidden-a", 1, 10, T);

    // The exclusion back: `hidden-a` stops being mirrored; its target topic stays.
    install(&plugins, "filter.wasm", "regex_filter.wasm");
    wait_for("the old filter again", T, || {
        (reloads(&status, &filter, "accepted") == 2).then_some(())
    });
    wait_for("hidden-a to leave the mirrored topics", T, || {
        let m = mirrored(&status, "primary->backup")?;
        (!m.iter().any(|(s, _)| s == "hidden-a") && m.iter().any(|(s, _)| s == "orders"))
            .then_some(())
    });
    produce(&src, "hidden-a", 10, 5);
    produce(&src, "orders", 10, 5);
    dst.read_all("primary.orders", 1, 15, T);
    assert!(dst.topics().contains_key("primary.hidden-a"));

    // A filter that traps on a mirrored topic (`panic`): rejected, the old one serves.
    src.create_topic("panic", 1);
    produce(&src, "panic", 0, 3);
    dst.read_all("primary.panic", 1, 3, T);
    install(&plugins, "filter.wasm", "test_trap.wasm");
    wait_for("the trapping filter to be rejected", T, || {
        (reloads(&status, &filter, "rejected") == 1).then_some(())
    });
    let f = plugin_status(&status, &filter).unwrap();
    let why = f["last_rejection"].as_str().unwrap_or_default();
    assert!(why.contains("panic") && why.contains("trapped"), "{f}");

    // Bytes that are no component: rejected.
    install_bytes(&plugins, "filter.wasm", b"not a component");
    wait_for("the garbage to be rejected", T, || {
        (reloads(&status, &filter, "rejected") == 2).then_some(())
    });

    // The file removed: a warning, and the last loaded version serves on.
    std::fs::remove_file(&filter).unwrap();
    wait_log(&k, "a plugin file in use is gone");
    src.create_topic("later", 1);
    src.create_topic("hidden-b", 1);
    produce(&src, "later", 0, 4);
    produce(&src, "hidden-b", 0, 4);
    dst.read_all("primary.later", 1, 4, T);
    assert!(
        !dst.topics().contains_key("primary.hidden-b"),
        "the filter in force excludes it"
    );
    assert_eq!(
        reloads(&status, &filter, "accepted"),
        2,
        "nothing else was accepted"
    );
    let text = http_text(&status, "/metrics").unwrap();
    assert!(text.contains("kmirror_plugin_errors_total"), "{text}");
    drop(k);
}

#[test]
fn sighup_adds_and_removes_flows_and_an_invalid_file_changes_nothing() {
    let (primary, backup) = Broker::pair();
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    src.create_topic("orders", 1);
    produce(&src, "orders", 0, 10);
    dst.create_topic("local", 1);
    produce(&dst, "local", 0, 7);

    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("plugins.d");
    std::fs::create_dir(&plugins).unwrap();
    let status = free_addr();
    let forward = flow_table("primary", "backup", "");
    let cfg = config(
        dir.path(),
        &primary.addr,
        &backup.addr,
        &status,
        &plugins,
        &forward,
    );
    let k = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));
    dst.read_all("primary.orders", 1, 10, T);

    // Add the reverse flow.
    let both = format!("{forward}\n{}", flow_table("backup", "primary", ""));
    config(
        dir.path(),
        &primary.addr,
        &backup.addr,
        &status,
        &plugins,
        &both,
    );
    k.hup();
    wait_log(&k, "configuration reloaded");
    src.read_all("backup.local", 1, 7, T);
    assert!(
        !k.logs().contains("stopping flow flow=primary->backup"),
        "the unchanged flow is not touched: {}",
        k.logs()
    );
    produce(&src, "orders", 10, 5);
    dst.read_all("primary.orders", 1, 15, T);
    let (_, s) = http_get(&status, "/status").unwrap();
    assert_eq!(s["flows"].as_array().unwrap().len(), 2, "{s}");
    assert_eq!(s["config_reloads"]["accepted"], 1, "{s}");

    // An invalid file: rejected whole, both flows go on.
    let broken = both.replace(
        "refresh_topics_interval = \"1s\"",
        "refresh_topics_intervall = \"1s\"",
    );
    config(
        dir.path(),
        &primary.addr,
        &backup.addr,
        &status,
        &plugins,
        &broken,
    );
    k.hup();
    wait_log(&k, "configuration reload rejected");
    let (_, s) = http_get(&status, "/status").unwrap();
    assert_eq!(s["config_reloads"]["rejected"], 1, "{s}");
    let why = s["config_reloads"]["last"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("refresh_topics_intervall"), "{s}");
    produce(&dst, "local", 7, 3);
    src.read_all("backup.local", 1, 10, T);

    // Remove the reverse flow: it stops gracefully; the forward one goes on.
    config(
        dir.path(),
        &primary.addr,
        &backup.addr,
        &status,
        &plugins,
        &forward,
    );
    k.hup();
    wait_log(&k, "stopping flow");
    wait_for("one flow left", T, || {
        let (_, s) = http_get(&status, "/status")?;
        (s["flows"].as_array()?.len() == 1).then_some(())
    });
    assert!(
        k.logs().contains("stopping flow flow=backup->primary"),
        "{}",
        k.logs()
    );
    produce(&src, "orders", 15, 5);
    dst.read_all("primary.orders", 1, 20, T);

    // Change the forward flow: it restarts with the new settings and goes on.
    let changed = flow_table("primary", "backup", "offset_lag_max = 50");
    config(
        dir.path(),
        &primary.addr,
        &backup.addr,
        &status,
        &plugins,
        &changed,
    );
    k.hup();
    wait_log(&k, "restarted: primary->backup");
    produce(&src, "orders", 20, 5);
    let all = dst.read_all("primary.orders", 1, 25, T);
    assert_eq!(count_values(&all).len(), 25, "every record, once restarted");
    let mut k = k;
    assert_eq!(k.stop(), Some(0));
}

/// `kmirror plan --json` rows of flow `primary->backup`, by source topic.
fn plan_rows(doc: &serde_json::Value) -> std::collections::BTreeMap<String, serde_json::Value> {
    doc["flows"][0]["topics"]
        .as_array()
        .expect("topics")
        .iter()
        .map(|r| (r["source"].as_str().unwrap().to_string(), r.clone()))
        .collect()
}

fn plan(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = kmirror_cli(&[&["plan", "--json"], args].concat());
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn plan_shows_every_topic_and_what_a_candidate_would_change_writing_nothing() {
    let (primary, backup) = Broker::pair();
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    for (t, n) in [("orders", 3), ("grown", 4), ("fresh", 2), ("hidden-a", 1)] {
        src.create_topic(t, n);
    }
    src.create_topic("backup.loop", 1);
    dst.create_topic("primary.orders", 3);
    dst.create_topic("primary.grown", 2);
    produce(&src, "orders", 0, 10);
    commit(&primary.addr, "billing", "orders", &[(0, 4)]);
    commit(&primary.addr, "console-consumer-7", "orders", &[(0, 2)]);

    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("plugins.d");
    std::fs::create_dir(&plugins).unwrap();
    install(&plugins, "policy.wasm", "default_policy.wasm");
    install(&plugins, "filter.wasm", "regex_filter.wasm");
    let slots = r#"replication_policy = { plugin = "policy.wasm" }
topic_filter = { plugin = "filter.wasm", config = { "topics.exclude" = "hidden.*" } }
refresh_groups_interval = "1s""#;
    let flows =
        flow_table("primary", "backup", slots).replace("emit_checkpoints_enabled = false\n", "");
    let cfg = config(
        dir.path(),
        &primary.addr,
        &backup.addr,
        &free_addr(),
        &plugins,
        &flows,
    );
    let (source_before, target_before) = (src.topics(), dst.topics());

    let doc = plan(&["--config", cfg.to_str().unwrap()]);
    let rows = plan_rows(&doc);
    let row = |t: &str| {
        (
            rows[t]["target"].clone(),
            rows[t]["action"].clone(),
            rows[t]["reason"].clone(),
        )
    };
    assert_eq!(row("orders").0, "primary.orders", "{doc}");
    assert_eq!(row("orders").1, "in sync", "{doc}");
    assert_eq!(rows["grown"]["action"], "grow", "{doc}");
    assert_eq!(rows["grown"]["target_partitions"], 2, "{doc}");
    assert_eq!(rows["grown"]["partitions"], 4, "{doc}");
    assert_eq!(row("fresh").1, "create", "{doc}");
    assert_eq!(row("hidden-a").1, "skip", "{doc}");
    assert_eq!(row("hidden-a").2, "filtered", "{doc}");
    assert_eq!(row("backup.loop").2, "cycle", "{doc}");
    let groups = &doc["flows"][0]["checkpointed_groups"];
    assert_eq!(
        groups,
        &serde_json::json!([{ "group": "billing", "partitions": 1 }]),
        "{doc}"
    );
    assert_eq!(doc["flows"][0]["filtered_groups"], 1, "{doc}");

    // The table says the same.
    let (code, table, _) = kmirror_cli(&["plan", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    assert!(table.contains("skip: filtered"), "{table}");
    assert!(table.contains("billing (1 partitions)"), "{table}");

    // A candidate plugin directory: a prefixing policy renames, a filter that admits
    // everything adds `hidden-a`.
    let candidate = dir.path().join("candidate.d");
    std::fs::create_dir(&candidate).unwrap();
    install(&candidate, "policy.wasm", "prod_prefix.wasm");
    install(&candidate, "filter.wasm", "test_trap.wasm");
    let doc = plan(&[
        "--config",
        cfg.to_str().unwrap(),
        "--plugin-dir",
        candidate.to_str().unwrap(),
    ]);
    let changes = &doc["flows"][0]["candidate"];
    let renamed: Vec<_> = changes["renamed"].as_array().unwrap().iter().collect();
    assert!(
        renamed.contains(&&serde_json::json!([
            "orders",
            "primary.orders",
            "prod-primary.orders"
        ])),
        "{changes}"
    );
    assert!(
        changes["added"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(["hidden-a", "prod-primary.hidden-a"])),
        "{changes}"
    );

    // A candidate configuration that excludes `fresh` and adds the reverse flow.
    let text = std::fs::read_to_string(&cfg).unwrap();
    let other = dir.path().join("candidate.toml");
    std::fs::write(
        &other,
        format!(
            "{}\n{}",
            text.replace("hidden.*", "hidden.*, fresh"),
            flow_table("backup", "primary", "")
        ),
    )
    .unwrap();
    let doc = plan(&[
        "--config",
        cfg.to_str().unwrap(),
        "--candidate",
        other.to_str().unwrap(),
    ]);
    let changes = &doc["flows"][0]["candidate"];
    assert_eq!(
        changes["dropped"],
        serde_json::json!([["fresh", "primary.fresh", "filtered"]]),
        "{changes}"
    );
    assert_eq!(changes["renamed"], serde_json::json!([]), "{changes}");
    assert_eq!(
        doc["candidate_flows"]["added"],
        serde_json::json!(["backup->primary"])
    );

    // Nothing was written anywhere: no topic created or grown, no internal topic.
    assert_eq!(dst.topics(), target_before);
    assert_eq!(src.topics(), source_before);
}
