//! `kmirror plugin test FILE --input names.txt`: one role of a plugin evaluated over a file
//! of names (for a record transform: of JSON records, one per line, see
//! [`crate::authoring::records`]), as a table or JSON — what a policy review looks at. A replication policy's
//! rows show MM2's decision for each name as a source topic (mirrored as what, or skipped
//! as internal or as a cycle), and how it reads the name as a remote topic.

use super::table;
use crate::authoring::records;
use crate::flow::discovery::rules::{Decision, SkipReason, decide};
use crate::plugin::Plugin;
use crate::policy::{Config, PluginError, Role};
use serde_json::{Value, json};

/// The names of `text`: one per line, blank lines and `#` comments skipped.
pub fn names(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// The rows for `names` (each an object; an `error` key where a call failed), and whether
/// any call failed.
pub fn evaluate(
    plugin: &Plugin,
    role: Role,
    config: &Config,
    names: &[String],
    source_alias: &str,
    target_alias: &str,
) -> Result<(Vec<Value>, bool), PluginError> {
    let mut failed = false;
    let mut err = |e: PluginError| {
        failed = true;
        e.to_string()
    };
    let rows = match role {
        Role::TopicFilter => {
            let f = plugin.topic_filter(config)?;
            names
                .iter()
                .map(|n| match f.should_replicate_topic(n) {
                    Ok(b) => json!({ "name": n, "replicate": b }),
                    Err(e) => json!({ "name": n, "error": err(e) }),
                })
                .collect()
        }
        Role::GroupFilter => {
            let f = plugin.group_filter(config)?;
            names
                .iter()
                .map(|n| match f.should_replicate_group(n) {
                    Ok(b) => json!({ "name": n, "replicate": b }),
                    Err(e) => json!({ "name": n, "error": err(e) }),
                })
                .collect()
        }
        Role::ConfigPropertyFilter => {
            let f = plugin.config_property_filter(config)?;
            names
                .iter()
                .map(|n| {
                    match (
                        f.should_replicate_config_property(n),
                        f.should_replicate_source_default(n),
                    ) {
                        (Ok(a), Ok(b)) => json!({ "name": n, "copy": a, "copy_default": b }),
                        (Err(e), _) | (_, Err(e)) => json!({ "name": n, "error": err(e) }),
                    }
                })
                .collect()
        }
        Role::RecordTransform => {
            // Each line a JSON record: one batch, as the data plane calls it.
            let t = plugin.record_transform(config)?;
            let mut rows = Vec::new();
            let mut records = Vec::new();
            for (i, line) in names.iter().enumerate() {
                match records::parse(line, i as i64) {
                    Ok(r) => records.push(r),
                    Err(e) => rows.push(json!({ "name": format!("line {}", i + 1), "error": err(PluginError::Output { plugin: plugin.name(), function: "transform", message: e }) })),
                }
            }
            let views: Vec<_> = records.iter().map(records::OwnedRecord::view).collect();
            match t.transform(&views) {
                Ok(outcomes) => rows.extend(
                    records
                        .iter()
                        .zip(&outcomes)
                        .map(|(r, o)| records::outcome_json(r, o)),
                ),
                Err(e) => {
                    let e = err(e);
                    rows.extend(
                        records
                            .iter()
                            .map(|r| json!({ "name": r.name(), "error": e })),
                    );
                }
            }
            rows
        }
        Role::ReplicationPolicy => {
            let p = plugin.replication_policy(config)?;
            names
                .iter()
                .map(|n| {
                    let row = || -> Result<Value, PluginError> {
                        let (decision, target) =
                            match decide(n, true, &*p, source_alias, target_alias)? {
                                Decision::Mirror(t) => ("mirror", Some(t)),
                                Decision::Skip(SkipReason::Internal) => ("skip: internal", None),
                                Decision::Skip(SkipReason::Cycle) => ("skip: cycle", None),
                                Decision::Skip(_) => ("skip", None),
                            };
                        Ok(json!({
                            "name": n,
                            "decision": decision,
                            "target": target,
                            "topic_source": p.topic_source(n)?,
                            "upstream": p.upstream_topic(n)?,
                        }))
                    };
                    row().unwrap_or_else(|e| json!({ "name": n, "error": err(e) }))
                })
                .collect()
        }
    };
    Ok((rows, failed))
}

/// `rows` as an aligned text table, columns in the order of the first row.
pub fn table(rows: &[Value]) -> String {
    let columns: Vec<String> = rows
        .iter()
        .find(|r| r.get("error").is_none())
        .or(rows.first())
        .and_then(Value::as_object)
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    // serde_json's map keeps keys sorted; the name goes first.
    let mut columns: Vec<String> = columns
        .into_iter()
        .filter(|c| c != "name" && c != "outcome")
        .collect();
    if rows.iter().any(|r| r.get("outcome").is_some()) {
        columns.insert(0, "outcome".into());
    }
    columns.insert(0, "name".into());
    let cell = |row: &Value, c: &str| match &row[c] {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut cells: Vec<Vec<String>> = vec![columns.clone()];
    cells.extend(
        rows.iter()
            .filter(|r| r.get("error").is_none())
            .map(|r| columns.iter().map(|c| cell(r, c)).collect()),
    );
    let widths = table::widths(&cells);
    let line = |cells: Vec<String>| table::line(&cells, &widths) + "\n";
    let mut out = String::new();
    out.push_str(&line(columns.clone()));
    for row in rows {
        if let Some(e) = row.get("error").and_then(Value::as_str) {
            out.push_str(&format!(
                "{:<w$}  error: {e}\n",
                cell(row, "name"),
                w = widths[0]
            ));
        } else {
            out.push_str(&line(columns.iter().map(|c| cell(row, c)).collect()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::{PluginHost, PluginSource};

    #[test]
    fn a_policy_is_shown_name_by_name() {
        let host = PluginHost::new(Default::default(), None).unwrap();
        let plugin = Plugin::open(&host, &PluginSource::Builtin("default-policy".into())).unwrap();
        let input = names("# topics to review\norders\n\nbackup.orders\n__consumer_offsets\n");
        assert_eq!(input, ["orders", "backup.orders", "__consumer_offsets"]);
        let (rows, failed) = evaluate(
            &plugin,
            Role::ReplicationPolicy,
            &Config::new(),
            &input,
            "primary",
            "backup",
        )
        .unwrap();
        assert!(!failed);
        assert_eq!(rows[0]["target"], "primary.orders");
        assert_eq!(rows[1]["decision"], "skip: cycle");
        assert_eq!(rows[1]["topic_source"], "backup");
        assert_eq!(rows[2]["decision"], "skip: internal");
        let text = table(&rows);
        let first = text.lines().next().unwrap();
        assert!(
            first.starts_with("name") && first.contains("decision"),
            "{text}"
        );
        assert!(text.contains("primary.orders"), "{text}");
    }
}
