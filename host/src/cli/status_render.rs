//! `kmirror status`'s tables, from `/status`'s JSON: per flow its state, health and reasons,
//! its members, a table of partitions per mirrored topic (who owns each, its state,
//! position, end, lag, records in flight, how long progress went unstored, why it is
//! paused), the last passes and counters; then per plugin its calls and errors. Pure: the
//! JSON and the time in, the text and whether any flow is degraded out.

use super::table;
use crate::flow::telemetry::Counter;
use crate::plugin::stats::ErrorKind;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// Counters always shown; the others only when not zero.
const ALWAYS_SHOWN: [Counter; 4] = [
    Counter::Records,
    Counter::Bytes,
    Counter::CommitFailures,
    Counter::Errors,
];

/// The longest plugin error shown in the table.
const MAX_PLUGIN_ERROR_CHARS: usize = 100;

/// Whether `json` is kmirror's `/status`: a `flows` array of objects with a `flow` name and
/// a `health.state`; why not otherwise.
pub fn is_status(json: &Value) -> Result<(), String> {
    let flows = json
        .get("flows")
        .and_then(Value::as_array)
        .ok_or("no \"flows\" array")?;
    for (i, f) in flows.iter().enumerate() {
        let name = f
            .get("flow")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("flows[{i}] has no \"flow\" name"))?;
        if f["health"]["state"].as_str().is_none() {
            return Err(format!("flows[{i}] ({name}) has no health.state"));
        }
    }
    Ok(())
}

/// `ms` for a human: `420ms`, `3.2s`, `42s`, `4m05s`, `2h03m`, `3d4h`.
pub fn human_ms(ms: i64) -> String {
    let ms = ms.max(0);
    let s = ms / 1000;
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..10_000 => format!("{:.1}s", ms as f64 / 1000.0),
        10_000..60_000 => format!("{s}s"),
        60_000..3_600_000 => format!("{}m{:02}s", s / 60, s % 60),
        3_600_000..86_400_000 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// How long ago `at` (ms since the epoch) was, or `never`.
fn ago(at: &Value, now_ms: i64) -> String {
    at.as_i64()
        .map_or("never".into(), |t| format!("{} ago", human_ms(now_ms - t)))
}

/// A number cell, `-` when absent.
fn num(v: &Value) -> String {
    v.as_i64().map_or_else(
        || v.as_u64().map_or("-".into(), |n| n.to_string()),
        |n| n.to_string(),
    )
}

/// A text on one line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An object's entries sorted by their keys as numbers (partitions, task indexes).
fn by_number(v: &Value) -> Vec<(i64, &Value)> {
    let mut entries: Vec<(i64, &Value)> = v
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.parse().ok()?, v)))
        .collect();
    entries.sort_by_key(|(k, _)| *k);
    entries
}

/// Rows as an aligned table, each line indented by `indent`.
fn write_table(out: &mut String, indent: &str, rows: &[Vec<String>]) {
    let widths = table::widths(rows);
    for row in rows {
        let _ = writeln!(out, "{indent}{}", table::line(row, &widths));
    }
}

fn cells<const N: usize>(c: [&str; N]) -> Vec<String> {
    c.map(str::to_string).to_vec()
}

/// The status as text, and whether any flow is degraded.
pub fn render(json: &Value, now_ms: i64) -> (String, bool) {
    let mut out = String::new();
    let mut degraded = false;
    let flows = json["flows"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if flows.is_empty() {
        out.push_str("no flows running\n");
    }
    for (i, flow) in flows.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        degraded |= flow["health"]["state"].as_str() != Some("ok");
        render_flow(&mut out, flow, now_ms);
    }
    render_plugins(&mut out, &json["plugins"]);
    let reloads = &json["config_reloads"];
    let (accepted, rejected) = (num(&reloads["accepted"]), num(&reloads["rejected"]));
    if let Some(last) = reloads["last"].as_object() {
        let _ = writeln!(
            out,
            "\nconfig reloads: {accepted} accepted, {rejected} rejected; the last {}: {}",
            ago(&last["at_ms"], now_ms),
            one_line(last["message"].as_str().unwrap_or_default())
        );
    }
    (out, degraded)
}

fn render_flow(out: &mut String, flow: &Value, now_ms: i64) {
    let health = &flow["health"];
    let _ = writeln!(
        out,
        "flow {}  state {}  health {}  leader {}",
        flow["flow"].as_str().unwrap_or("?"),
        flow["state"].as_str().unwrap_or("?"),
        health["state"].as_str().unwrap_or("?"),
        if flow["leader"].as_bool() == Some(true) {
            "yes"
        } else {
            "no"
        }
    );
    for reason in health["reasons"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  degraded: {}",
            one_line(reason.as_str().unwrap_or("?"))
        );
    }
    let instances = flow["instances"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if !instances.is_empty() {
        let mut rows = vec![cells([
            "INSTANCE",
            "HOST",
            "ROLE",
            "PARTITIONS",
            "LAST-REPORT",
        ])];
        for i in instances {
            let mut name = i["instance"].as_str().unwrap_or("?").to_string();
            if i["this"].as_bool() == Some(true) {
                name.push_str(" (this)");
            }
            rows.push(vec![
                name,
                i["host"].as_str().unwrap_or("?").to_string(),
                if i["leader"].as_bool() == Some(true) {
                    "leader"
                } else {
                    "member"
                }
                .to_string(),
                num(&i["partitions"]),
                i["reported_ms_ago"]
                    .as_i64()
                    .map_or("-".into(), |ms| format!("{} ago", human_ms(ms))),
            ]);
        }
        out.push('\n');
        write_table(out, "  ", &rows);
    }
    for problem in flow["problems"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  problem: {}",
            one_line(problem.as_str().unwrap_or("?"))
        );
    }
    for (topic, f) in flow["failed_over"].as_object().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  failed over {}: {topic} -> {} (no longer mirrored)",
            ago(&f["at_ms"], now_ms),
            f["target"].as_str().unwrap_or("?")
        );
    }
    let audit = &flow["audit"];
    if audit.is_object() {
        let n = |k: &str| audit[k].as_u64().unwrap_or(0);
        let _ = writeln!(
            out,
            "  audit: {} pass(es), the last {}: {} record(s) equal, {} mismatched, {} missing, {} extra on the target ({} not placed by the offset syncs, {} unreadable at the source, {} not audited yet)",
            n("passes"),
            ago(&audit["last_pass_ms"], now_ms),
            n("equal"),
            n("mismatched"),
            n("missing"),
            n("extra"),
            n("unplaced"),
            n("unreadable"),
            n("behind"),
        );
        let (removed, compacted, failed) = (
            n("removed_on_target"),
            n("compacted_topics"),
            n("failed_reads"),
        );
        if removed + compacted + failed > 0 {
            let _ = writeln!(
                out,
                "  audit skipped: {removed} record(s) whose copies the target no longer holds (retention, DeleteRecords), {compacted} compacted topic(s); {failed} partition read(s) failed (tried again at the next pass)"
            );
        }
        let found = audit["differences"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        for d in &found[found.len().saturating_sub(5)..] {
            let _ = writeln!(
                out,
                "  audit found: {}",
                one_line(d.as_str().unwrap_or("?"))
            );
        }
    }
    for (alias, u) in flow["unreachable"].as_object().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  unreachable: cluster {alias} since {}: {}",
            ago(&u["since_ms"], now_ms),
            one_line(u["error"].as_str().unwrap_or("?"))
        );
    }
    let members = by_number(&flow["members"]);
    let mut owner: BTreeMap<(&str, i64), i64> = BTreeMap::new();
    if members.is_empty() {
        let _ = writeln!(out, "  no replication task has joined yet");
    } else {
        let mut rows = vec![cells([
            "MEMBER",
            "GENERATION",
            "PARTITIONS",
            "REBALANCES",
            "OLDEST-UNACKED",
        ])];
        for (index, m) in &members {
            let mut owned = 0;
            for (topic, ps) in m["partitions"].as_object().into_iter().flatten() {
                for (p, _) in by_number(ps) {
                    owner.insert((topic.as_str(), p), *index);
                    owned += 1;
                }
            }
            rows.push(vec![
                index.to_string(),
                num(&m["generation"]),
                owned.to_string(),
                num(&m["rebalances"]),
                m["oldest_unacked_ms"].as_i64().map_or("-".into(), human_ms),
            ]);
        }
        out.push('\n');
        write_table(out, "  ", &rows);
    }
    render_topics(out, flow, &owner, now_ms);
    let _ = writeln!(
        out,
        "\n  last discovery {}, last checkpoint pass {}, last commit {}",
        ago(&flow["last_discovery_ms"], now_ms),
        ago(&flow["last_checkpoint_pass_ms"], now_ms),
        ago(&flow["last_commit_ms"], now_ms)
    );
    let counters: Vec<String> = Counter::ALL
        .iter()
        .filter_map(|c| {
            let n = flow[c.name()].as_u64().unwrap_or(0);
            (ALWAYS_SHOWN.contains(c) || n > 0)
                .then(|| format!("{} {n}", c.name().replace('_', " ")))
        })
        .collect();
    let _ = writeln!(out, "  {}", counters.join(", "));
    let transforms = flow["transforms"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if !transforms.is_empty() {
        let mut rows = vec![cells([
            "TRANSFORM",
            "KEPT",
            "DROPPED",
            "REWRITTEN",
            "FAILED",
            "BATCH-FAILURES",
        ])];
        for t in transforms {
            rows.push(vec![
                format!(
                    "{} {}",
                    num(&t["position"]),
                    t["name"].as_str().unwrap_or("?")
                ),
                num(&t["kept"]),
                num(&t["dropped"]),
                num(&t["rewritten"]),
                num(&t["failed"]),
                num(&t["batch_failures"]),
            ]);
        }
        out.push('\n');
        write_table(out, "  ", &rows);
    }
    if let Some(acl) = flow["last_acl_sync"].as_object() {
        let state = if acl.get("disabled").and_then(Value::as_bool) == Some(true) {
            "off (the target serves no ACLs)".to_string()
        } else {
            format!(
                "{} created, {} deleted, {} failed",
                num(&acl["created"]),
                num(&acl["deleted"]),
                num(&acl["failed"])
            )
        };
        let _ = write!(
            out,
            "  last acl sync {}: {state}",
            ago(&acl["at_ms"], now_ms)
        );
        match acl.get("error").and_then(Value::as_str) {
            Some(e) => {
                let _ = writeln!(out, "; {}", one_line(e));
            }
            None => out.push('\n'),
        }
    }
    if let Some(e) = flow["last_error"].as_str() {
        let _ = writeln!(out, "  last error: {}", one_line(e));
    }
}

/// One table per topic: the partitions this instance mirrors, and those nobody owns.
fn render_topics(out: &mut String, flow: &Value, owner: &BTreeMap<(&str, i64), i64>, now_ms: i64) {
    let mirrored = &flow["mirrored"];
    let partitions = &flow["partitions"];
    let mut unowned: BTreeMap<&str, BTreeSet<i64>> = BTreeMap::new();
    for u in flow["unowned"].as_array().into_iter().flatten() {
        let Some((topic, p)) = u
            .as_str()
            .and_then(|u| u.strip_suffix(']')?.rsplit_once('['))
        else {
            continue;
        };
        if let Ok(p) = p.parse() {
            unowned.entry(topic).or_default().insert(p);
        }
    }
    let topics: BTreeSet<&str> = [mirrored, partitions]
        .iter()
        .flat_map(|m| m.as_object().into_iter().flatten().map(|(t, _)| t.as_str()))
        .chain(unowned.keys().copied())
        .collect();
    if topics.is_empty() {
        let _ = writeln!(out, "\n  no topic mirrored");
    }
    for topic in topics {
        let mut rows = vec![cells([
            "PARTITION",
            "OWNED-BY",
            "STATE",
            "POSITION",
            "END",
            "LAG",
            "IN-FLIGHT",
            "UNSTORED",
            "PAUSED",
        ])];
        let mut shown = BTreeMap::new();
        for (p, s) in by_number(&partitions[topic]) {
            let paused = &s["paused"];
            let paused = match paused["reason"].as_str() {
                Some(reason) => format!(
                    "at offset {} for {}: {}",
                    num(&paused["offset"]),
                    human_ms(now_ms - paused["since_ms"].as_i64().unwrap_or(now_ms)),
                    one_line(reason)
                ),
                None => String::new(),
            };
            let row = vec![
                p.to_string(),
                owner.get(&(topic, p)).map_or("-".into(), i64::to_string),
                s["state"].as_str().unwrap_or("?").to_string(),
                num(&s["position"]),
                num(&s["end"]),
                num(&s["lag"]),
                num(&s["in_flight"]),
                s["unstored_ms"].as_i64().map_or("-".into(), human_ms),
                paused,
            ];
            shown.insert(p, row);
        }
        for p in unowned.get(topic).into_iter().flatten() {
            shown.entry(*p).or_insert_with(|| {
                let mut row = vec!["-".to_string(); 9];
                row[0] = p.to_string();
                row[1] = "none".into();
                row[2] = "unowned".into();
                row[8] = String::new();
                row
            });
        }
        let route = &mirrored[topic];
        let mut heading = match (route[0].as_str(), route[1].as_i64()) {
            (Some(target), Some(n)) => format!("topic {topic} -> {target}, {n} partitions"),
            _ => format!("topic {topic} (not mirrored by the last discovery pass)"),
        };
        let elsewhere = route[1].as_i64().unwrap_or(0) - shown.len() as i64;
        if elsewhere > 0 {
            let _ = write!(heading, ", {elsewhere} not mirrored by this instance");
        }
        let _ = writeln!(out, "\n  {heading}");
        if !shown.is_empty() {
            rows.extend(shown.into_values());
            write_table(out, "  ", &rows);
        }
    }
}

fn render_plugins(out: &mut String, plugins: &Value) {
    let plugins = plugins.as_array().map(Vec::as_slice).unwrap_or_default();
    if plugins.is_empty() {
        return;
    }
    let mut header = cells(["PLUGIN", "SHA256", "CALLS"]);
    header.extend(ErrorKind::ALL.iter().map(|k| k.name().to_uppercase()));
    header.push("LAST-ERROR".into());
    let mut rows = vec![header];
    let mut rejections = Vec::new();
    for p in plugins {
        let name = p["name"].as_str().unwrap_or("?");
        let sha = p["loaded"]["sha256"]
            .as_str()
            .map_or("-".into(), |s| s.chars().take(12).collect::<String>());
        let mut row = vec![name.to_string(), sha, num(&p["calls"])];
        row.extend(ErrorKind::ALL.iter().map(|k| num(&p["errors"][k.name()])));
        let error = p["last_error"].as_str().map_or(String::new(), |e| {
            let line = one_line(e.lines().next().unwrap_or_default());
            match line.char_indices().nth(MAX_PLUGIN_ERROR_CHARS) {
                Some((i, _)) => format!("{}...", &line[..i]),
                None => line,
            }
        });
        row.push(error);
        rows.push(row);
        if let Some(why) = p["last_rejection"].as_str() {
            rejections.push(format!("  {name}: last reload rejected: {}", one_line(why)));
        }
    }
    out.push('\n');
    write_table(out, "", &rows);
    for r in rejections {
        let _ = writeln!(out, "{r}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_700_000_100_000;

    /// Two flows as `/status` shows them: `primary->backup` degraded (orders[0] paused,
    /// orders[2] owned by nobody), `backup->primary` ok.
    fn fixture() -> Value {
        let partition = |position: i64, end: i64, state: &str, paused: Value| {
            json!({ "position": position, "end": end, "lag": end - position, "in_flight": 0,
                    "state": state, "paused": paused, "unstored_ms": null })
        };
        let paused = json!({ "offset": 100, "since_ms": NOW - 12_000,
            "reason": "Broker: Message size too large (raise message.max.bytes of the target cluster's librdkafka settings, or max.message.bytes of the target topic)" });
        let owned = json!({ "orders": {
            "0": partition(100, 201, "paused", paused.clone()),
            "1": partition(200, 200, "mirroring", Value::Null) } });
        let mut one = partition(40, 40, "mirroring", Value::Null);
        one["unstored_ms"] = json!(3_200);
        json!({
            "flows": [
                { "flow": "primary->backup", "state": "running", "leader": true,
                  "health": { "alive": true, "ready": true, "state": "degraded", "reasons": [
                      "partition orders[0] is paused at offset 100: Broker: Message size too large",
                      "1 mirrored partition(s) have had no owner for longer than two session timeouts: orders[2] (the group is made to rebalance)" ] },
                  "members": { "0": { "partitions": owned.clone(), "oldest_unacked_ms": null,
                                      "rebalances": 1, "generation": 3 } },
                  "partitions": owned,
                  "mirrored": { "orders": ["primary.orders", 3] },
                  "problems": [], "unowned": ["orders[2]"], "unreachable": {},
                  "last_discovery_ms": NOW - 1_000, "last_checkpoint_pass_ms": null,
                  "last_commit_ms": NOW - 400, "last_error": "produce: Broker: Message size too large",
                  "records": 300, "bytes": 2_390, "commit_failures": 0, "errors": 2,
                  "unproducible_paused": 1, "heartbeats": 0 },
                { "flow": "backup->primary", "state": "running", "leader": false,
                  "health": { "alive": true, "ready": true, "state": "ok", "reasons": [] },
                  "members": {
                      "1": { "partitions": { "logs": { "10": one.clone() } },
                             "oldest_unacked_ms": null, "rebalances": 2, "generation": 7 },
                      "0": { "partitions": { "logs": { "2": partition(5, 9, "mirroring", Value::Null) } },
                             "oldest_unacked_ms": 1_500, "rebalances": 2, "generation": 7 } },
                  "partitions": { "logs": { "2": partition(5, 9, "mirroring", Value::Null), "10": one } },
                  "mirrored": { "logs": ["backup.logs", 12] },
                  "problems": [], "unowned": [], "unreachable": {},
                  "last_discovery_ms": NOW - 65_000, "last_checkpoint_pass_ms": NOW - 5_000,
                  "last_commit_ms": NOW, "records": 45, "bytes": 900, "commit_failures": 0, "errors": 0 }
            ],
            "plugins": [
                { "name": "/etc/kmirror/plugins/prod_prefix.wasm", "calls": 12,
                  "loaded": { "sha256": "3f2a9c1b0d4e5f60718293a4b5c6d7e8", "roles": ["replication-policy"], "loaded_at_ms": NOW },
                  "errors": { "trap": 1, "timeout": 0, "memory": 0, "error": 0 },
                  "last_error": "plugin trapped in format-remote-topic\nwasm backtrace:\n  0: frame",
                  "last_rejection": "exports no role", "reloads": { "accepted": 1, "rejected": 1 } }
            ],
            "config_reloads": { "accepted": 0, "rejected": 0, "last": null }
        })
    }

    fn line_with<'a>(text: &'a str, start: &str) -> &'a str {
        text.lines()
            .find(|l| l.trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no line starting with {start:?} in\n{text}"))
    }

    /// The columns of the first table row whose first two columns are `first`, `second`.
    fn row_of<'a>(text: &'a str, first: &str, second: &str) -> Vec<&'a str> {
        text.lines()
            .map(columns)
            .find(|c| c.len() > 1 && c[0] == first && c[1] == second)
            .unwrap_or_else(|| panic!("no row {first} {second} in\n{text}"))
    }

    fn columns(line: &str) -> Vec<&str> {
        line.split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect()
    }

    #[test]
    fn a_degraded_flow_shows_its_reasons_its_paused_and_unowned_partitions() {
        let (text, degraded) = render(&fixture(), NOW);
        assert!(degraded);
        let flow = line_with(&text, "flow primary->backup");
        assert_eq!(
            flow,
            "flow primary->backup  state running  health degraded  leader yes"
        );
        assert!(text.contains("  degraded: partition orders[0] is paused at offset 100: Broker: Message size too large\n"), "{text}");
        assert!(
            text.contains("  degraded: 1 mirrored partition(s) have had no owner"),
            "{text}"
        );
        assert_eq!(columns(line_with(&text, "MEMBER")).len(), 5);
        assert!(
            text.contains("topic orders -> primary.orders, 3 partitions"),
            "{text}"
        );
        let p0 = row_of(&text, "0", "0");
        assert_eq!(
            &p0[..8],
            ["0", "0", "paused", "100", "201", "101", "0", "-"]
        );
        assert!(
            p0[8].starts_with(
                "at offset 100 for 12s: Broker: Message size too large (raise message.max.bytes"
            ),
            "{text}"
        );
        let p1 = row_of(&text, "1", "0");
        assert_eq!(p1, ["1", "0", "mirroring", "200", "200", "0", "0", "-"]);
        let p2 = row_of(&text, "2", "none");
        assert_eq!(p2, ["2", "none", "unowned", "-", "-", "-", "-", "-"]);
        assert!(
            text.contains(
                "last discovery 1.0s ago, last checkpoint pass never, last commit 400ms ago"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "records 300, bytes 2390, unproducible paused 1, commit failures 0, errors 2\n"
            ),
            "{text}"
        );
        assert!(
            !text.contains("heartbeats 0"),
            "zero counters beyond the main ones are left out"
        );
        assert!(text.contains("last error: produce: Broker: Message size too large"));
    }

    #[test]
    fn an_ok_flow_lists_its_members_and_partitions_in_numeric_order() {
        let mut json = fixture();
        json["flows"].as_array_mut().unwrap().remove(0);
        let (text, degraded) = render(&json, NOW);
        assert!(!degraded, "{text}");
        assert!(text.contains("flow backup->primary  state running  health ok  leader no"));
        assert!(!text.contains("degraded:"));
        let members: Vec<Vec<&str>> = text
            .lines()
            .skip_while(|l| !l.contains("MEMBER"))
            .skip(1)
            .take(2)
            .map(columns)
            .collect();
        assert_eq!(
            members,
            [["0", "7", "1", "2", "1.5s"], ["1", "7", "1", "2", "-"]]
        );
        let p2 = text.find("\n  2 ").expect("partition 2");
        let p10 = text.find("\n  10 ").expect("partition 10");
        assert!(p2 < p10, "numeric order: {text}");
        assert_eq!(
            row_of(&text, "10", "1"),
            ["10", "1", "mirroring", "40", "40", "0", "0", "3.2s"]
        );
        assert!(
            text.contains(
                "topic logs -> backup.logs, 12 partitions, 10 not mirrored by this instance\n"
            ),
            "{text}"
        );
        assert!(text.contains(
            "last discovery 1m05s ago, last checkpoint pass 5.0s ago, last commit 0ms ago"
        ));
    }

    #[test]
    fn plugins_show_a_short_hash_calls_errors_by_kind_and_the_last_error() {
        let (text, _) = render(&fixture(), NOW);
        assert_eq!(
            columns(line_with(&text, "PLUGIN")),
            [
                "PLUGIN",
                "SHA256",
                "CALLS",
                "TRAP",
                "TIMEOUT",
                "MEMORY",
                "ERROR",
                "LAST-ERROR"
            ]
        );
        assert_eq!(
            columns(line_with(&text, "/etc/kmirror/plugins/prod_prefix.wasm")),
            [
                "/etc/kmirror/plugins/prod_prefix.wasm",
                "3f2a9c1b0d4e",
                "12",
                "1",
                "0",
                "0",
                "0",
                "plugin trapped in format-remote-topic"
            ]
        );
        assert!(text.contains("prod_prefix.wasm: last reload rejected: exports no role"));
        assert!(!text.contains("wasm backtrace"), "one line per plugin");
    }

    #[test]
    fn no_flows_is_ok_and_what_is_not_status_is_named() {
        let (text, degraded) = render(&json!({ "flows": [], "plugins": [] }), NOW);
        assert_eq!((text.as_str(), degraded), ("no flows running\n", false));
        assert!(is_status(&fixture()).is_ok());
        assert!(
            is_status(&json!({ "healthy": true }))
                .unwrap_err()
                .contains("flows")
        );
        let no_health = json!({ "flows": [{ "flow": "a->b" }] });
        assert!(is_status(&no_health).unwrap_err().contains("a->b"));
        assert!(is_status(&json!({ "flows": [{}] })).is_err());
    }

    #[test]
    fn the_last_acl_sync_is_shown_with_its_counts_or_why_it_is_off() {
        let mut json = fixture();
        json["flows"][0]["last_acl_sync"] = json!({
            "at_ms": NOW - 42_000, "created": 3, "deleted": 1, "failed": 1,
            "error": "topic orders: CreateAcls\n refused", "disabled": false
        });
        json["flows"][1]["last_acl_sync"] = json!({
            "at_ms": NOW - 1_000, "created": 0, "deleted": 0, "failed": 0,
            "error": null, "disabled": true
        });
        let (text, _) = render(&json, NOW);
        assert!(
            text.contains(
                "  last acl sync 42s ago: 3 created, 1 deleted, 1 failed; topic orders: CreateAcls refused\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("  last acl sync 1.0s ago: off (the target serves no ACLs)\n"),
            "{text}"
        );
    }

    #[test]
    fn the_transform_chain_shows_what_each_link_did() {
        let mut json = fixture();
        json["flows"][0]["transforms"] = json!([
            { "position": 0, "name": "drop_by_header.wasm", "kept": 90, "dropped": 10,
              "rewritten": 0, "failed": 0, "batch_failures": 0 },
            { "position": 1, "name": "json_mask.wasm", "kept": 40, "dropped": 0,
              "rewritten": 50, "failed": 1, "batch_failures": 1 },
        ]);
        let (text, _) = render(&json, NOW);
        let lines: Vec<&str> = text.lines().collect();
        let header = lines
            .iter()
            .position(|l| l.trim_start().starts_with("TRANSFORM"))
            .expect(&text);
        let cols = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        assert_eq!(
            cols(lines[header + 1]),
            ["0", "drop_by_header.wasm", "90", "10", "0", "0", "0"]
        );
        assert_eq!(
            cols(lines[header + 2]),
            ["1", "json_mask.wasm", "40", "0", "50", "1", "1"]
        );
    }

    #[test]
    fn the_audit_shows_its_counts_and_its_latest_differences() {
        let mut json = fixture();
        let found: Vec<String> = (0..7)
            .map(|i| {
                format!("orders[0]: target offset {i} of primary.orders is no source record's")
            })
            .collect();
        json["flows"][0]["audit"] = json!({
            "passes": 4, "last_pass_ms": NOW - 2_000, "equal": 220, "mismatched": 0,
            "missing": 10, "extra": 7, "unplaced": 3, "unreadable": 0, "behind": 40,
            "differences": found });
        let (text, _) = render(&json, NOW);
        assert!(
            text.contains("  audit: 4 pass(es), the last 2.0s ago: 220 record(s) equal, 0 mismatched, 10 missing, 7 extra on the target (3 not placed by the offset syncs, 0 unreadable at the source, 40 not audited yet)\n"),
            "{text}"
        );
        assert!(!text.contains("audit skipped"), "nothing skipped: {text}");
        let shown: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("  audit found: "))
            .collect();
        assert_eq!(shown.len(), 5, "the latest five: {text}");
        assert!(shown[4].ends_with("target offset 6 of primary.orders is no source record's"));
        // No audit (off, or not the leader): no line.
        let (text, _) = render(&fixture(), NOW);
        assert!(!text.contains("audit"), "{text}");
    }

    #[test]
    fn the_instances_show_who_leads_and_which_one_answers() {
        let mut json = fixture();
        json["flows"][0]["instances"] = json!([
            { "instance": "a-1-x", "host": "a", "partitions": 6, "leader": true, "this": false, "reported_ms_ago": 1200 },
            { "instance": "b-7-y", "host": "b", "partitions": 6, "leader": false, "this": true, "reported_ms_ago": 0 },
        ]);
        let (text, _) = render(&json, NOW);
        let lines: Vec<&str> = text.lines().collect();
        let header = lines
            .iter()
            .position(|l| l.trim_start().starts_with("INSTANCE"))
            .expect(&text);
        let cols = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        assert_eq!(
            cols(lines[header + 1]),
            ["a-1-x", "a", "leader", "6", "1.2s", "ago"]
        );
        assert_eq!(
            cols(lines[header + 2]),
            ["b-7-y", "(this)", "b", "member", "6", "0ms", "ago"]
        );
    }

    #[test]
    fn durations_read_as_a_human_would_say_them() {
        let cases = [
            (-5, "0ms"),
            (420, "420ms"),
            (3_249, "3.2s"),
            (42_000, "42s"),
            (245_000, "4m05s"),
            (7_380_000, "2h03m"),
            (273_600_000, "3d4h"),
        ];
        for (ms, want) in cases {
            assert_eq!(human_ms(ms), want, "{ms}");
        }
    }
}
