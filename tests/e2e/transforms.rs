//! End to end: record transforms. An operator adds a chain to a running daemon — two
//! `.wasm` files into the plugin directory, one `record_transforms` line into the config,
//! a SIGHUP — and from then on records tagged internal are left out and two JSON fields are
//! masked; a replaced transform file is reviewed like any plugin (refused when it rejects
//! its slot's configuration, swapped in when it passes). And checkpoints stay exact around
//! records a transform dropped: a group positioned before, inside and right after a
//! dropped stretch translates to exactly the next record on the target, and `offsets
//! translate` agrees. A chain added by a reload holds for every record produced once the
//! reload is reported, on every partition, without a restart of the flow. Records are
//! checked with a client that is not kmirror's.

mod support;

use serde_json::Value;
use std::path::Path;
use std::time::Duration;
use support::*;

const T: Duration = Duration::from_secs(60);

/// A payment as JSON, tagged `internal: true` when `internal`.
fn payment(c: &Client, id: usize, internal: Option<bool>) {
    let value = format!(
        r#"{{"id": {id}, "card": {{"number": "4111 1111 1111 {id:04}", "expiry": "12/29"}}, "email": "user{id}@example.com"}}"#
    );
    let flag = internal.map(|i| if i { "true" } else { "false" });
    let headers: Vec<(&str, &[u8])> = flag
        .iter()
        .map(|f| ("internal", f.as_bytes()))
        .chain([("trace-id", b"t-1".as_slice())])
        .collect();
    c.produce(
        "payments",
        (id % 2) as i32,
        format!("k{id}").as_bytes(),
        value.as_bytes(),
        &headers,
        1_700_000_000_000 + id as i64,
    );
}

fn json(r: &Rec) -> Value {
    serde_json::from_slice(r.value.as_deref().expect("a value")).expect("JSON")
}

fn status(addr: &str) -> Value {
    http_get(addr, "/status")
        .map(|(_, s)| s)
        .unwrap_or_default()
}

fn copy_plugin(name: &str, to: &Path) {
    std::fs::copy(plugins_dir().join(name), to.join(name)).expect("copy plugin");
}

const CHAIN: &str = r#"record_transforms = [
  { plugin = "drop_by_header.wasm", config = { header = "internal", value = "true" } },
  { plugin = "json_mask.wasm", config = { fields = "card.number,email" } },
]"#;

#[test]
fn a_chain_added_to_a_running_daemon_drops_internal_records_and_masks_fields() {
    let (primary, backup) = Broker::pair();
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    src.create_topic("payments", 2);
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("plugins.d");
    std::fs::create_dir(&plugins).unwrap();
    let status_addr = free_addr();
    let write = |extra: &str| {
        config_file(
            dir.path(),
            &primary.addr,
            &backup.addr,
            &plugins,
            Some(&status_addr),
            &flow_table("primary", "backup", extra),
        )
    };
    let cfg = write("");
    let k = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));

    // Before: mirrored as they are.
    for id in 0..10 {
        payment(&src, id, (id % 5 == 0).then_some(true));
    }
    src.flush();
    let before = dst.read_all("primary.payments", 2, 10, T);
    assert_eq!(before.len(), 10, "log:\n{}", k.logs());
    assert!(before.iter().all(|r| json(r)["card"]["number"] != "***"));

    // Two files into the plugin directory, one line into the config, a reload.
    copy_plugin("drop_by_header.wasm", &plugins);
    copy_plugin("json_mask.wasm", &plugins);
    write(CHAIN);
    k.hup();
    wait_for("the flow running with its two transforms", T, || {
        let s = status(&status_addr);
        let f = &s["flows"][0];
        let owned = f["partitions"]["payments"]
            .as_object()
            .map_or(0, |p| p.len());
        (f["transforms"].as_array().map_or(0, Vec::len) == 2 && owned == 2).then_some(())
    });

    // After: internal records left out, the two fields masked, everything else intact.
    let tagged = |id: usize| match id % 4 {
        0 => Some(true),
        1 => Some(false),
        _ => None,
    };
    for id in 100..140 {
        payment(&src, id, tagged(id));
    }
    src.flush();
    let kept = (100..140).filter(|id| tagged(*id) != Some(true)).count();
    let all = dst.read_all("primary.payments", 2, 10 + kept, T);
    let after: Vec<&Rec> = all
        .iter()
        .filter(|r| json(r)["id"].as_u64().is_some_and(|id| id >= 100))
        .collect();
    assert_eq!(after.len(), kept, "log:\n{}", k.logs());
    for r in &after {
        let v = json(r);
        let id = v["id"].as_u64().unwrap() as usize;
        assert_ne!(tagged(id), Some(true), "internal record {id} mirrored");
        assert_eq!(v["card"]["number"], "***", "{v}");
        assert_eq!(v["email"], "***", "{v}");
        assert_eq!(v["card"]["expiry"], "12/29", "the rest intact: {v}");
        assert_eq!(r.key.as_deref(), Some(format!("k{id}").as_bytes()));
        assert_eq!(r.timestamp, Some(1_700_000_000_000 + id as i64));
        assert!(
            r.headers
                .iter()
                .any(|(k, v)| k == "trace-id" && v.as_deref() == Some(b"t-1"))
        );
    }
    let s = status(&status_addr);
    let chain = &s["flows"][0]["transforms"];
    assert_eq!(chain[0]["name"], "drop_by_header.wasm");
    assert_eq!(chain[0]["dropped"], 10);
    assert_eq!(chain[1]["name"], "json_mask.wasm");
    assert_eq!(chain[1]["rewritten"], kept as u64);
    let metrics = http_text(&status_addr, "/metrics").unwrap_or_default();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("kmirror_transform_records_total{")
                && l.contains("transform=\"drop_by_header.wasm\"")
                && l.contains("outcome=\"dropped\"")
                && l.ends_with(" 10")),
        "{metrics}"
    );

    // A replacement that refuses its slot's configuration is rejected; the old one serves.
    let reloads = |result: &str| -> u64 {
        let m = http_text(&status_addr, "/metrics").unwrap_or_default();
        m.lines()
            .filter(|l| {
                l.starts_with("kmirror_plugin_reloads_total{")
                    && l.contains(&format!("result=\"{result}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let staged = plugins.join("json_mask.wasm.new");
    std::fs::copy(plugins_dir().join("header_strip.wasm"), &staged).unwrap();
    std::fs::rename(&staged, plugins.join("json_mask.wasm")).unwrap();
    wait_for("the replacement rejected", T, || {
        (reloads("rejected") >= 1).then_some(())
    });
    for id in 200..204 {
        payment(&src, id, None);
    }
    src.flush();
    let masked = dst.read_all("primary.payments", 2, 10 + kept + 4, T);
    let late: Vec<Value> = masked
        .iter()
        .map(json)
        .filter(|v| v["id"].as_u64() >= Some(200))
        .collect();
    assert_eq!(late.len(), 4);
    assert!(
        late.iter().all(|v| v["email"] == "***"),
        "still masked: {late:?}"
    );

    // One that passes every check is swapped in between two batches.
    let staged = plugins.join("drop_by_header.wasm.new");
    std::fs::copy(plugins_dir().join("wasip2/drop_by_header.wasm"), &staged).unwrap();
    std::fs::rename(&staged, plugins.join("drop_by_header.wasm")).unwrap();
    wait_for("the replacement accepted", T, || {
        (reloads("accepted") >= 1).then_some(())
    });
    for id in 300..304 {
        payment(&src, id, Some(id % 2 == 0));
    }
    src.flush();
    let end = dst.read_all("primary.payments", 2, 10 + kept + 4 + 2, T);
    let last: Vec<u64> = end
        .iter()
        .filter_map(|r| json(r)["id"].as_u64())
        .filter(|id| *id >= 300)
        .collect();
    assert_eq!(last.len(), 2, "{last:?}\nlog:\n{}", k.logs());
    assert!(last.iter().all(|id| id % 2 == 1), "{last:?}");
}

/// Issue 34 item 13: a chain added by a reload is a privacy control, so it must hold for
/// every record produced once the reload is reported, on every partition. Before, adding
/// a chain restarted the flow, its tasks left one at a time, and the last one mirrored the
/// departed task's partition with the old configuration for seconds: 50 of 50 records
/// produced 6 s after "configuration reloaded" reached the target unmasked. The chain now
/// changes in place, between two batches, and the flow is not restarted.
#[test]
fn a_chain_added_by_a_reload_holds_for_every_record_produced_once_it_is_reported() {
    let (primary, backup) = Broker::pair();
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    src.create_topic("payments", 2);
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("plugins.d");
    std::fs::create_dir(&plugins).unwrap();
    let status_addr = free_addr();
    // Two replication tasks, one partition each: the shape that restarted task by task.
    let write = |extra: &str| {
        config_file(
            dir.path(),
            &primary.addr,
            &backup.addr,
            &plugins,
            Some(&status_addr),
            &flow_table(
                "primary",
                "backup",
                &format!("replication_tasks = 2\n{extra}"),
            ),
        )
    };
    let cfg = write("");
    let k = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));
    for id in 0..10 {
        payment(&src, id, None);
    }
    src.flush();
    dst.read_all("primary.payments", 2, 10, T);
    copy_plugin("drop_by_header.wasm", &plugins);
    copy_plugin("json_mask.wasm", &plugins);
    write(CHAIN);
    k.hup();
    // Records produced while the reload is under way, on both partitions, until it is
    // reported: either chain may take them.
    let mut id = 1000;
    let reported = poll_until(T, || {
        payment(&src, id, Some(id % 4 == 0));
        src.flush();
        id += 1;
        k.logs().contains("configuration reloaded").then_some(())
    });
    assert!(reported.is_some(), "log:\n{}", k.logs());
    let during = id - 1000;
    // Once reported: every record, on both partitions, goes through the new chain.
    let tagged = |id: usize| id.is_multiple_of(4).then_some(true);
    for id in 5000..5100 {
        payment(&src, id, tagged(id));
    }
    src.flush();
    let kept_after = (5000..5100).filter(|id| tagged(*id).is_none()).count();
    let all = dst.read_all("primary.payments", 2, 10 + during + kept_after, T);
    let after: Vec<Value> = all
        .iter()
        .map(json)
        .filter(|v| v["id"].as_u64().is_some_and(|id| id >= 5000))
        .collect();
    let unmasked = after.iter().filter(|v| v["email"] != "***").count();
    let internal = after
        .iter()
        .filter(|v| v["id"].as_u64().is_some_and(|id| id % 4 == 0))
        .count();
    eprintln!(
        "FIGURES records produced after the reload was reported: {} mirrored, {unmasked} unmasked, {internal} internal kept",
        after.len()
    );
    assert_eq!(
        (unmasked, internal),
        (0, 0),
        "records after the reload left untransformed; log:\n{}",
        k.logs()
    );
    assert_eq!(after.len(), kept_after, "log:\n{}", k.logs());
    for p in 0..2 {
        assert!(
            after
                .iter()
                .any(|v| v["id"].as_u64().is_some_and(|id| id % 2 == p)),
            "partition {p} checked"
        );
    }
    // Nothing of the reload window is lost: each record is there, or dropped as internal.
    let seen: std::collections::BTreeSet<u64> =
        all.iter().filter_map(|r| json(r)["id"].as_u64()).collect();
    for id in 1000..1000 + during as u64 {
        assert!(
            seen.contains(&id) || id % 4 == 0,
            "record {id} produced during the reload lost"
        );
    }
    let log = k.logs();
    assert!(log.contains("record transforms changed in place"), "{log}");
    assert!(
        !log.contains("stopping flow"),
        "the flow was restarted: {log}"
    );
    let mut k = k;
    assert_eq!(k.stop(), Some(0));
}

/// The test's flow: checkpoints every half second, offset syncs only where runs break.
fn checkpoint_config(
    dir: &Path,
    primary: &str,
    backup: &str,
    plugins: &Path,
    status: &str,
) -> std::path::PathBuf {
    config_file(
        dir,
        primary,
        backup,
        plugins,
        Some(status),
        &r#"[[flows]]
source = "primary"
target = "backup"
refresh_topics_interval = "1s"
offset_flush_interval = "500ms"
emit_heartbeats_enabled = false
emit_checkpoints_interval = "500ms"
refresh_groups_interval = "500ms"
offset_lag_max = 1000
replication_factor = 1
record_transforms = [{ plugin = "drop_by_header.wasm", config = { header = "internal" } }]
"#
        .to_string(),
    )
}

#[test]
fn checkpoints_stay_exact_around_records_a_transform_dropped() {
    let (primary, backup) = Broker::pair();
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    src.create_topic("orders", 1);
    // Offsets 0..30; 10..20 are tagged internal and left out: the target holds 0..10 and
    // 20..30 at its offsets 0..20.
    for i in 0..30i64 {
        let headers: &[(&str, &[u8])] = if (10..20).contains(&i) {
            &[("internal", b"1")]
        } else {
            &[]
        };
        src.produce(
            "orders",
            0,
            b"k",
            format!("r{i}").as_bytes(),
            headers,
            1_700_000_000_000 + i,
        );
    }
    src.flush();
    // Groups before, inside, right after the dropped stretch, and at the end.
    let groups = [
        ("g-before", 5, 5),
        ("g-inside", 15, 10),
        ("g-after", 20, 10),
        ("g-end", 30, 20),
    ];
    for (g, at, _) in groups {
        commit(&primary.addr, g, "orders", &[(0, at)]);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("plugins.d");
    std::fs::create_dir(&plugins).unwrap();
    copy_plugin("drop_by_header.wasm", &plugins);
    let status_addr = free_addr();
    let cfg = checkpoint_config(
        dir.path(),
        &primary.addr,
        &backup.addr,
        &plugins,
        &status_addr,
    );
    let k = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));

    let mirrored = dst.read_all("primary.orders", 1, 20, T);
    let values: Vec<String> = mirrored
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect();
    let expected: Vec<String> = (0..10).chain(20..30).map(|i| format!("r{i}")).collect();
    assert_eq!(values, expected, "log:\n{}", k.logs());
    let cps = wait_for("a checkpoint of every group", T, || {
        let cps = checkpoints(&backup.addr);
        groups
            .iter()
            .all(|(g, _, down)| {
                cps.get(&(g.to_string(), "primary.orders".to_string(), 0))
                    .is_some_and(|(_, d)| d == down)
            })
            .then_some(cps)
    });
    for (g, at, down) in groups {
        assert_eq!(
            cps[&(g.to_string(), "primary.orders".to_string(), 0)],
            (at, down),
            "{g}: exactly the next record on the target"
        );
    }
    let target_at = |down: i64| -> String {
        String::from_utf8_lossy(mirrored[down as usize].value.as_deref().unwrap_or_default())
            .into_owned()
    };
    assert_eq!(
        target_at(10),
        "r20",
        "after the stretch: its first record after it"
    );

    // `offsets translate` agrees.
    for (g, _, down) in groups {
        let (code, out, err) = kmirror_cli(&[
            "offsets",
            "translate",
            "--config",
            cfg.to_str().unwrap(),
            "--flow",
            "primary->backup",
            "--group",
            g,
            "--json",
        ]);
        assert_eq!(code, Some(0), "{err}");
        let rows: Value = serde_json::from_str(&out).expect("json");
        assert!(
            rows.as_array()
                .expect("rows")
                .iter()
                .any(|r| r["topic"] == "primary.orders"
                    && r["partition"] == 0
                    && r["offset"] == down),
            "{g}: {out}"
        );
    }
}
