//! `kmirror status` end to end: the real binary mirroring between two Tansu brokers, and
//! the real binary again reading its status endpoint.
//!
//! - while every partition mirrors: the tables name the flow, the topic and each of its
//!   partitions, and it exits 0, the same from `--url` and from `--config`; `--json` is the
//!   daemon's JSON;
//! - a record larger than the target's `message.max.bytes` pauses its partition: exit 1, the
//!   paused partition and its reason in the table;
//! - with the daemon stopped: exit 2, naming the URL.

mod support;

use std::time::Duration;
use support::*;

const T: Duration = Duration::from_secs(120);

/// The target refuses records larger than this (librdkafka's own check, in kmirror's
/// producer).
const TARGET_MAX_BYTES: usize = 10_000;

/// The table's row of `partition` under the table of `topic`.
fn row<'a>(out: &'a str, topic: &str, partition: i32) -> Option<&'a str> {
    let heading = format!("topic {topic} ->");
    out.lines()
        .skip_while(|l| !l.trim_start().starts_with(&heading))
        .skip(2)
        .take_while(|l| !l.trim().is_empty())
        .find(|l| l.split_whitespace().next() == Some(&partition.to_string()))
}

#[test]
fn status_shows_the_mirror_its_paused_partition_and_a_stopped_daemon() {
    let (primary, backup) = Broker::pair();
    // The test's own producer may send what the target's settings in kmirror refuse.
    let src = Client::with(&primary.addr, &[("message.max.bytes", "4000000")]);
    let topic = unique("orders");
    src.create_topic(&topic, 3);
    for i in 0..30 {
        let id = format!("id-{i}");
        src.produce(
            &topic,
            i % 3,
            id.as_bytes(),
            id.as_bytes(),
            &[],
            1_700_000_000_000,
        );
    }
    src.flush();

    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let flows = flow_table(
        "primary",
        "backup",
        "replication_policy = { plugin = \"default_policy.wasm\" }\nunreachable_after = \"2s\"",
    );
    let cfg = config_file(
        dir.path(),
        &primary.addr,
        &backup.addr,
        &plugins_dir(),
        Some(&status),
        &flows,
    );
    let text = std::fs::read_to_string(&cfg).expect("config");
    std::fs::write(
        &cfg,
        format!(
            "{text}\n[clusters.backup.librdkafka]\n\"message.max.bytes\" = \"{TARGET_MAX_BYTES}\"\n"
        ),
    )
    .expect("config");
    let mut k = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));
    let url = format!("http://{status}");
    let ok = poll_until(T, || {
        let (_, s) = http_get(&status, "/status")?;
        let f = &s["flows"][0];
        // Settled: every partition owned here with its position known (just after a
        // rebalance a member owns a partition before it knows where it is).
        let settled = (0..3).all(|p| f["partitions"][&topic][p.to_string()]["position"] == 10);
        let reported = f["instances"].as_array().is_some_and(|i| {
            i.iter()
                .any(|i| i["this"] == true && i["leader"] == true && i["partitions"] == 3)
        });
        (settled && reported && f["health"]["state"] == "ok" && f["leader"] == true).then_some(())
    });
    assert!(
        ok.is_some(),
        "not mirrored and ok in time; log:\n{}",
        k.logs()
    );

    let (code, out, err) = kmirror_cli(&["status", "--url", &url]);
    eprintln!("kmirror status --url {url}\n{out}{err}");
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("flow primary->backup  state running  health ok  leader yes"),
        "{out}"
    );
    assert!(
        out.contains(&format!("topic {topic} -> primary.{topic}, 3 partitions\n")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.contains(" (this) ") && l.split_whitespace().any(|c| c == "leader")),
        "the instance table names this instance as the leader: {out}"
    );
    for p in 0..3 {
        let r = row(&out, &topic, p).unwrap_or_else(|| panic!("no row of {p} in\n{out}"));
        let cells: Vec<&str> = r.split_whitespace().collect();
        // The end and lag are the broker's (Tansu's end can trail); the position is ours.
        assert_eq!(cells[2..4], ["mirroring", "10"], "{r}");
    }
    assert!(
        out.contains("default_policy.wasm"),
        "the plugin is listed: {out}"
    );

    let config = cfg.to_str().expect("utf-8 path");
    let (code, by_config, err) = kmirror_cli(&["status", "--config", config]);
    assert_eq!(code, Some(0), "{by_config}{err}");
    let first = |s: &str| s.lines().next().unwrap_or_default().to_string();
    assert_eq!(first(&by_config), first(&out));
    assert!(by_config.contains(&format!("topic {topic} -> primary.{topic}")));

    let (code, json, err) = kmirror_cli(&["status", "--url", &url, "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let json: serde_json::Value = serde_json::from_str(&json).expect("--json is JSON");
    assert_eq!(json["flows"][0]["flow"], "primary->backup", "{json}");
    assert_eq!(
        json["flows"][0]["mirrored"][&topic][0],
        format!("primary.{topic}")
    );

    let big = vec![b'x'; 2 * TARGET_MAX_BYTES];
    src.produce(&topic, 0, b"too-big", &big, &[], 1_700_000_000_000);
    src.flush();
    let paused = poll_until(T, || {
        let (_, s) = http_get(&status, "/status")?;
        let p = &s["flows"][0]["partitions"][&topic]["0"]["paused"];
        (!p.is_null()).then_some(())
    });
    assert!(
        paused.is_some(),
        "partition 0 not paused; log:\n{}",
        k.logs()
    );
    let (code, out, err) = kmirror_cli(&["status", "--url", &url]);
    eprintln!("kmirror status --url {url} (a record too large for the target)\n{out}{err}");
    assert_eq!(code, Some(1), "degraded: {out}{err}");
    assert!(out.contains("health degraded"), "{out}");
    assert!(
        out.contains(&format!(
            "degraded: partition {topic}[0] is paused at offset 10"
        )),
        "{out}"
    );
    let r = row(&out, &topic, 0).unwrap_or_else(|| panic!("no row of 0 in\n{out}"));
    assert!(
        r.contains("paused") && r.contains("at offset 10 for "),
        "{r}"
    );
    assert!(r.contains("message.max.bytes"), "the reason: {r}");
    let healthy = row(&out, &topic, 1).expect("row of 1");
    assert!(healthy.contains("mirroring"), "{healthy}");
    let (code, _, _) = kmirror_cli(&["status", "--url", &url, "--json"]);
    assert_eq!(code, Some(1), "--json exits 1 too");

    assert_eq!(k.stop(), Some(0));
    let (code, out, err) = kmirror_cli(&["status", "--url", &url]);
    eprintln!("kmirror status --url {url} (stopped)\n{out}{err}");
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("cannot reach kmirror at") && err.contains(&format!("{url}/status")),
        "{err}"
    );
}
