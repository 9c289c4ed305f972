//! A flow's plan as text: the topic table, then groups, ACLs and candidate changes.

use super::rows::FlowPlan;
use crate::cli::table;

/// A flow's plan as a table.
pub fn render(p: &FlowPlan) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "flow {}", p.flow);
    for e in &p.errors {
        let _ = writeln!(s, "  error: {e}");
    }
    let cell = |n: Option<i32>| n.map_or("-".to_string(), |n| n.to_string());
    let mut rows: Vec<Vec<String>> = vec![
        ["source topic", "target topic", "partitions", "action"]
            .map(str::to_string)
            .to_vec(),
    ];
    for r in &p.topics {
        let action = match &r.reason {
            Some(why) if r.action == "skip" => format!("skip: {why}"),
            Some(why) => format!("{} ({why})", r.action),
            None => r.action.to_string(),
        };
        rows.push(vec![
            r.source.clone(),
            r.target.clone().unwrap_or_else(|| "-".into()),
            format!("{} -> {}", r.partitions, cell(r.target_partitions)),
            action,
        ]);
    }
    if !p.topics.is_empty() {
        let widths = table::widths(&rows);
        for row in &rows {
            let _ = writeln!(s, "  {}", table::line(row, &widths));
        }
    }
    match &p.checkpointed_groups {
        None => {
            let _ = writeln!(s, "  checkpoints are off for this flow");
        }
        Some(groups) => {
            let listed: Vec<String> = groups
                .iter()
                .map(|g| format!("{} ({} partitions)", g.group, g.partitions))
                .collect();
            let _ = writeln!(
                s,
                "  groups checkpointed: {}",
                if listed.is_empty() {
                    "none".to_string()
                } else {
                    listed.join(", ")
                }
            );
            if !p.groups_without_offsets.is_empty() {
                let _ = writeln!(
                    s,
                    "  groups accepted, no offsets on mirrored topics yet: {}",
                    p.groups_without_offsets.join(", ")
                );
            }
            let _ = writeln!(s, "  groups filtered out: {}", p.filtered_groups);
        }
    }
    if p.transforms.is_empty() {
        let _ = writeln!(
            s,
            "  record transforms: none (records are mirrored as they are)"
        );
    }
    for (i, (plugin, config)) in p.transforms.iter().enumerate() {
        let _ = writeln!(s, "  record transform {i}: {plugin} {{ {config} }}");
    }
    if !p.transforms.is_empty() {
        let _ = writeln!(
            s,
            "  on a transform error: {} the record's partition",
            if p.on_transform_error == "skip" {
                "skip the record, go on with"
            } else {
                "pause"
            }
        );
    }
    match &p.acls {
        None => {
            let _ = writeln!(s, "  topic ACLs are not synced for this flow");
        }
        Some(a) => {
            if let Some(why) = &a.note {
                let _ = writeln!(s, "  topic ACLs: {why}");
            }
            if a.create.is_empty() && a.delete.is_empty() {
                let _ = writeln!(s, "  topic ACLs to create on the target: none");
            }
            for b in &a.create {
                let _ = writeln!(s, "  create ACL: {b}");
            }
            for b in &a.delete {
                let _ = writeln!(s, "  delete ACL: {b}");
            }
        }
    }
    if let Some(c) = &p.candidate {
        if c.is_empty() {
            let _ = writeln!(s, "  with the candidate: no mirrored topic changes");
        }
        for (topic, from, to) in &c.renamed {
            let _ = writeln!(s, "  with the candidate: {topic} renamed: {from} -> {to}");
        }
        for (topic, target, why) in &c.dropped {
            let _ = writeln!(
                s,
                "  with the candidate: {topic} dropped ({why}); {target} is kept on the target"
            );
        }
        for (topic, target) in &c.added {
            let _ = writeln!(s, "  with the candidate: {topic} added as {target}");
        }
    }
    s
}
