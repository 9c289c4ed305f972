//! `kmirror failover` end to end on two real Kafka clusters: the real binary as the daemon
//! and as the command, every result read by the test's own client.
//!
//! One cutover, interrupted twice and resumed: the readiness report (a group active on the
//! target named worst first, exact target offsets for the others); a wait that runs out
//! while the mirror is stalled changes nothing; the command killed after it stopped the
//! topics; the running daemon stops mirroring them (also after a restart), `/status`
//! lists them; re-runs commit the ready groups' exact offsets and checkpoints, refuse the
//! group active on the target by name, and commit it once its consumers stopped.

mod support;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::kafka::KafkaOptions;
use support::*;

const T: Duration = Duration::from_secs(90);

/// A consumer of `topic` in `group` on `addr`, polled on a thread of its own until dropped:
/// the group is active there.
struct Active {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Active {
    fn start(addr: &str, group: &str, topic: &str) -> Active {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", addr)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "latest")
            .create()
            .expect("consumer");
        c.subscribe(&[topic]).expect("subscribe");
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            // Bounded: ten minutes at most.
            let until = std::time::Instant::now() + Duration::from_secs(600);
            while !s.load(Ordering::Relaxed) && std::time::Instant::now() < until {
                let _ = c.poll(Duration::from_millis(100));
            }
            c.unsubscribe();
        });
        Active {
            stop,
            thread: Some(thread),
        }
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("consumer thread");
        }
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.stop();
    }
}

fn failover(config: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let mut args = vec![
        "failover",
        "--config",
        config.to_str().expect("path"),
        "--flow",
        "primary->backup",
    ];
    args.extend_from_slice(extra);
    kmirror_cli(&args)
}

/// Starts `kmirror failover` and kills it (SIGKILL) once its output shows `line`.
fn failover_killed_at(config: &Path, line: &str) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kmirror"));
    cmd.args(["failover", "--config"])
        .arg(config)
        .args(["--flow", "primary->backup"])
        .env("KMIRROR_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("kmirror failover");
    let out = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    let mut seen = String::new();
    let deadline = std::time::Instant::now() + T;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => {
                seen.push_str(&l);
                seen.push('\n');
                if l.contains(line) {
                    break;
                }
            }
            Err(_) => {
                let _ = child.kill();
                panic!("`{line}` not shown; output:\n{seen}");
            }
        }
    }
    child.kill().expect("kill");
    let _ = child.wait();
    seen
}

/// The flow's `/status` object.
fn flow_status(status: &str) -> Option<serde_json::Value> {
    Some(http_get(status, "/status")?.1["flows"][0].clone())
}

/// How many records `topic` holds on `client`'s cluster, read for a few seconds.
fn count(client: &Client, topic: &str, partitions: i32, at_least: usize) -> usize {
    client
        .read_all(topic, partitions, at_least + 1, Duration::from_secs(4))
        .len()
}

/// A new source topic mirrored: discovery ran passes after everything before it.
fn barrier(src: &Client, dst: &Client, name: &str) {
    src.create_topic(name, 1);
    src.produce_ids(name, 1, 0, 1);
    let (missing, _) = tally(dst, &format!("primary.{name}"), 1, 1, T);
    assert_eq!(missing, 0, "{name} mirrored");
}

#[test]
fn a_failover_interrupted_twice_goes_on_where_it_stopped() {
    let (primary, backup) = Broker::kafka_pair(&KafkaOptions::default(), &KafkaOptions::default());
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    src.create_topic("orders", 2);
    src.create_topic("payments", 1);
    src.produce_ids("orders", 2, 0, 200);
    src.produce_ids("payments", 1, 0, 20);
    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let flows = "[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\nrefresh_topics_interval = \"1s\"\noffset_flush_interval = \"500ms\"\nemit_heartbeats_enabled = false\nreplication_factor = 1\n";
    let config = config_file(
        dir.path(),
        &primary.addr,
        &backup.addr,
        &plugins_dir(),
        Some(&status),
        flows,
    );
    let mut k = Kmirror::start(&config, &dir.path().join("kmirror.log"));
    assert_eq!(
        tally(&dst, "primary.orders", 2, 200, T),
        (0, 0),
        "log:\n{}",
        k.logs()
    );
    assert_eq!(tally(&dst, "primary.payments", 1, 20, T), (0, 0));

    // app and pay read part of their topics on the source; busy's consumers run on the
    // target already.
    commit(&primary.addr, "app", "orders", &[(0, 60), (1, 70)]);
    commit(&primary.addr, "busy", "orders", &[(0, 100), (1, 100)]);
    commit(&primary.addr, "pay", "payments", &[(0, 10)]);
    let mut busy = Active::start(&backup.addr, "busy", "primary.orders");
    wait_for("busy active on the target", T, || {
        (!group_members(&backup.addr, "busy").is_empty()).then_some(())
    });

    // The leader's checkpoint pass places every group too, in /metrics.
    wait_for("app placed exactly in /metrics", T, || {
        let m = http_text(&status, "/metrics")?;
        (m.contains(r#"kmirror_group_failover_partitions{flow="primary->backup",group="app",placement="exact"} 2"#)
            && m.contains(r#"kmirror_group_failover_tail_records{flow="primary->backup",group="app"} 0"#))
            .then_some(())
    });

    // The readiness report: busy first and not ready; app and pay ready, placed exactly.
    let (code, out, err) = wait_for("a report placing every group exactly", T, || {
        let (code, out, err) = failover(&config, &["--dry-run", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).ok()?;
        let groups = v["readiness"]["groups"].as_array()?.clone();
        let exact = groups
            .iter()
            .flat_map(|g| g["partitions"].as_array().cloned().unwrap_or_default())
            .all(|p| p["placement"]["kind"] == "exact");
        (groups.len() == 3 && exact).then_some((code, v, err))
    });
    assert_eq!(code, Some(1), "busy is not ready: {out}\n{err}");
    let groups = out["readiness"]["groups"].as_array().expect("groups");
    assert_eq!(groups[0]["group"], "busy", "worst first: {out}");
    assert!(groups[0]["active_on_target"].is_string(), "{out}");
    let app = groups.iter().find(|g| g["group"] == "app").expect("app");
    let placed: Vec<(i64, i64)> = app["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| {
            (
                p["partition"].as_i64().unwrap(),
                p["placement"]["offset"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(placed, [(0, 60), (1, 70)], "{out}");
    assert_eq!(app["partitions"][0]["tail"], 0, "{out}");
    assert!(
        committed(&backup.addr, "app", "primary.orders", 2).is_empty(),
        "a dry run commits nothing"
    );
    let (code, text, err) = kmirror_cli(&[
        "status",
        "--config",
        config.to_str().expect("path"),
        "--groups",
    ]);
    assert_eq!(code, Some(1), "{text}\n{err}");
    assert!(
        text.contains("group busy: NOT ready") && text.contains("group app: ready"),
        "{text}"
    );

    // The mirror stalls with records left: the wait runs out and nothing changes.
    k.signal("-STOP");
    src.produce_ids("orders", 2, 200, 210);
    let (code, out, err) = failover(&config, &["--wait", "3s"]);
    k.signal("-CONT");
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        err.contains("did not reach the source's end") && err.contains("nothing was changed"),
        "{err}"
    );
    assert!(committed(&backup.addr, "app", "primary.orders", 2).is_empty());
    let f = flow_status(&status).expect("status");
    assert_eq!(
        f["failed_over"],
        serde_json::json!({}),
        "nothing stopped: {f}"
    );
    assert_eq!(
        tally(&dst, "primary.orders", 2, 210, T),
        (0, 0),
        "still mirrored"
    );

    // Killed once it stopped the topics, before any group was committed.
    // Killed right after it stopped the last topic (its record acked), before it let the
    // instances settle.
    let seen = failover_killed_at(&config, "stopped mirroring payments");
    assert!(
        seen.contains("stopped mirroring orders") && seen.contains("stopped mirroring payments"),
        "{seen}"
    );
    assert!(
        committed(&backup.addr, "app", "primary.orders", 2).is_empty(),
        "{seen}"
    );
    let shown = wait_for("/status to list the topics failed over", T, || {
        let f = flow_status(&status)?;
        let listed = f["failed_over"].as_object()?;
        (listed.contains_key("orders") && listed.contains_key("payments")).then_some(f)
    });
    assert!(shown["mirrored"].get("orders").is_none(), "{shown}");
    wait_for("the orders partitions let go", T, || {
        let f = flow_status(&status)?;
        f["partitions"].get("orders").is_none().then_some(())
    });
    // Written to the source now, never mirrored.
    src.produce_ids("orders", 2, 210, 220);
    barrier(&src, &dst, "after-stop");
    assert_eq!(
        count(&dst, "primary.orders", 2, 210),
        210,
        "nothing mirrored after the failover"
    );

    // Run again: the topics are not waited for again; app and pay fail over at exactly
    // where they were; busy is refused by name.
    let (code, out, err) = failover(&config, &[]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        out.contains("group busy: NOT failed over: active on the target"),
        "{out}"
    );
    assert!(out.contains("group app: failed over"), "{out}");
    assert!(
        !err.contains("waiting for the mirror"),
        "not waited for again: {err}"
    );
    assert_eq!(
        committed(&backup.addr, "app", "primary.orders", 2),
        [(0, 60), (1, 70)].into()
    );
    assert_eq!(
        committed(&backup.addr, "pay", "primary.payments", 1),
        [(0, 10)].into()
    );
    let cps = checkpoints(&backup.addr);
    assert_eq!(
        cps.get(&("app".into(), "primary.orders".into(), 1)),
        Some(&(70, 70)),
        "{cps:?}"
    );

    // busy's consumers stopped: the last run fails it over, at exactly its source offsets.
    busy.stop();
    wait_for("busy to have no member on the target", T, || {
        group_members(&backup.addr, "busy").is_empty().then_some(())
    });
    let (code, out, err) = failover(&config, &[]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(
        committed(&backup.addr, "busy", "primary.orders", 2),
        [(0, 100), (1, 100)].into()
    );
    assert_eq!(
        committed(&backup.addr, "app", "primary.orders", 2),
        [(0, 60), (1, 70)].into(),
        "not moved again"
    );

    // A restarted daemon reads the failover before its first pass: still not mirrored.
    assert_eq!(k.stop(), Some(0), "log:\n{}", k.logs());
    let mut k = Kmirror::start(&config, &dir.path().join("kmirror.log"));
    src.produce_ids("payments", 1, 20, 30);
    barrier(&src, &dst, "after-restart");
    assert_eq!(
        count(&dst, "primary.payments", 1, 20),
        20,
        "log:\n{}",
        k.logs()
    );
    assert_eq!(count(&dst, "primary.orders", 2, 210), 210);
    assert_eq!(k.stop(), Some(0), "log:\n{}", k.logs());
}

/// A consumer of `topic` in `group` from its committed offsets: the values it is handed
/// within a few seconds.
fn resume(addr: &str, group: &str, topic: &str) -> Vec<String> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", addr)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    c.subscribe(&[topic]).expect("subscribe");
    let mut out = Vec::new();
    let until = std::time::Instant::now() + Duration::from_secs(12);
    while std::time::Instant::now() < until {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            use rdkafka::Message;
            out.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
        }
    }
    out
}

/// `kmirror failback` (issue 37 item 3), the whole round trip on real Kafka: A -> B
/// mirrored; failed over with group app; A takes 10 more records nobody mirrors (its
/// divergent tail); the writers move to B (30 records of B's era) and app reads part of
/// them there; failback to A through the daemon's reverse flow. Afterwards A holds every
/// record of B's era once, after the tail; the tail is in the quarantine topic with its
/// origin named; app resumes on A exactly after what it read on B — none of the tail.
#[test]
fn a_failback_brings_the_targets_era_home_once_and_quarantines_the_divergent_tail() {
    let (primary, backup) = Broker::kafka_pair(&KafkaOptions::default(), &KafkaOptions::default());
    let (a, b) = (Client::new(&primary.addr), Client::new(&backup.addr));
    a.create_topic("orders", 2);
    a.produce_ids("orders", 2, 0, 100);
    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let flow = |s: &str, t: &str| {
        format!(
            "[[flows]]\nsource = \"{s}\"\ntarget = \"{t}\"\nrefresh_topics_interval = \"1s\"\noffset_flush_interval = \"500ms\"\nemit_heartbeats_enabled = false\nreplication_factor = 1\n"
        )
    };
    let flows = format!(
        "{}\n{}",
        flow("primary", "backup"),
        flow("backup", "primary")
    );
    let config = config_file(
        dir.path(),
        &primary.addr,
        &backup.addr,
        &plugins_dir(),
        Some(&status),
        &flows,
    );
    let mut k = Kmirror::start(&config, &dir.path().join("kmirror.log"));
    assert_eq!(
        tally(&b, "primary.orders", 2, 100, T),
        (0, 0),
        "log:\n{}",
        k.logs()
    );
    commit(&primary.addr, "app", "orders", &[(0, 30), (1, 30)]);
    let (code, out, err) = failover(&config, &["--groups", "app"]);
    assert_eq!(code, Some(0), "{out}\n{err}\nlog:\n{}", k.logs());
    assert_eq!(
        committed(&backup.addr, "app", "primary.orders", 2),
        [(0, 30), (1, 30)].into()
    );

    // A's divergent tail: written after the failover, never mirrored.
    a.produce_ids("orders", 2, 100, 110);
    // B's era: the writers moved; app read all of A's era and 5 of B's per partition there.
    for i in 0..30 {
        let v = format!("b-{i}");
        b.produce(
            "primary.orders",
            i % 2,
            v.as_bytes(),
            v.as_bytes(),
            &[],
            1_700_000_000_000,
        );
    }
    b.flush();
    commit(&backup.addr, "app", "primary.orders", &[(0, 55), (1, 55)]);

    let (code, plan, err) = kmirror_cli(&[
        "failback",
        "--config",
        config.to_str().expect("path"),
        "--flow",
        "primary->backup",
        "--dry-run",
    ]);
    assert_eq!(code, Some(0), "{plan}\n{err}");
    assert!(
        plan.contains("primary.orders on backup goes home to orders on primary"),
        "{plan}"
    );
    assert_eq!(
        count(&b, "primary.orders", 2, 130),
        130,
        "a dry run changes nothing"
    );
    let (code, out, err) = kmirror_cli(&[
        "failback",
        "--config",
        config.to_str().expect("path"),
        "--flow",
        "primary->backup",
        "--groups",
        "app",
        "--wait",
        "60s",
    ]);
    assert_eq!(code, Some(0), "{out}\n{err}\nlog:\n{}", k.logs());
    assert!(
        out.contains("orders[0]: its divergent tail, offsets 50..55, is in kmirror-quarantine.orders.internal (5 record(s))"),
        "{out}"
    );

    // A holds every record of B's era once, after its own 110.
    let home = a.read_all("orders", 2, 140, Duration::from_secs(20));
    let values = count_values(&home);
    for i in 0..30 {
        assert_eq!(values.get(&format!("b-{i}")), Some(&1), "b-{i}: {values:?}");
    }
    assert_eq!(home.len(), 140, "{values:?}");
    // The tail, in quarantine, each record naming its origin.
    let q = a.read_all(
        "kmirror-quarantine.orders.internal",
        2,
        10,
        Duration::from_secs(10),
    );
    let mut tail: Vec<String> = q
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect();
    tail.sort();
    let want: Vec<String> = {
        let mut w: Vec<String> = (100..110).map(|i| format!("id-{i}")).collect();
        w.sort();
        w
    };
    assert_eq!(tail, want);
    assert!(q.iter().all(|r| {
        r.headers.iter().any(|(k, v)| {
            k == "kmirror-quarantined-from"
                && v.as_deref().is_some_and(|v| v.starts_with(b"orders/"))
        })
    }));
    // app resumes on A after what it read on B: B's era from its sixth record on, per
    // partition; nothing of the tail, nothing of A's era again.
    assert_eq!(
        committed(&primary.addr, "app", "orders", 2),
        [(0, 60), (1, 60)].into()
    );
    let got = resume(&primary.addr, "app", "orders");
    assert_eq!(got.len(), 20, "{got:?}");
    assert!(got.iter().all(|v| v.starts_with("b-")), "{got:?}");
    // The daemon's reverse flow stopped mirroring it (failed over home).
    let f = http_get(&status, "/status").expect("status").1;
    let reverse = f["flows"]
        .as_array()
        .expect("flows")
        .iter()
        .find(|f| f["flow"] == "backup->primary")
        .cloned()
        .expect("reverse flow");
    assert_eq!(
        reverse["failed_over"]["primary.orders"]["target"], "orders",
        "{reverse}"
    );
    // Run again: nothing is prepared twice.
    let (code, out, err) = kmirror_cli(&[
        "failback",
        "--config",
        config.to_str().expect("path"),
        "--flow",
        "primary->backup",
        "--groups",
        "app",
        "--now",
    ]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("failed back already"), "{out}");
    assert_eq!(
        a.read_all(
            "kmirror-quarantine.orders.internal",
            2,
            10,
            Duration::from_secs(4)
        )
        .len(),
        10
    );
    assert_eq!(k.stop(), Some(0), "log:\n{}", k.logs());
}
