//! `kmirror plugin eval`: call one WIT function by name and render its result as JSON.

use super::records;
use crate::plugin::Plugin;
use crate::policy::{Config, PluginError, Role};
use serde_json::{Value, json};

/// How many arguments a function takes.
#[derive(Debug, Clone, Copy)]
enum Arity {
    Exactly(usize),
    /// `n` fixed arguments, then a list of names (possibly empty).
    AtLeast(usize),
}

/// Every callable WIT function, its role and arity (`configure` is driven by `--config`).
const FUNCTIONS: [(&str, Role, Arity, &str); 19] = [
    (
        "should-replicate-topic",
        Role::TopicFilter,
        Arity::Exactly(1),
        "TOPIC",
    ),
    (
        "should-replicate-topics",
        Role::TopicFilter,
        Arity::AtLeast(0),
        "TOPIC...",
    ),
    (
        "should-replicate-group",
        Role::GroupFilter,
        Arity::Exactly(1),
        "GROUP",
    ),
    (
        "should-replicate-groups",
        Role::GroupFilter,
        Arity::AtLeast(0),
        "GROUP...",
    ),
    (
        "format-remote-topic",
        Role::ReplicationPolicy,
        Arity::Exactly(2),
        "SOURCE-ALIAS TOPIC",
    ),
    (
        "topic-source",
        Role::ReplicationPolicy,
        Arity::Exactly(1),
        "TOPIC",
    ),
    (
        "upstream-topic",
        Role::ReplicationPolicy,
        Arity::Exactly(1),
        "TOPIC",
    ),
    (
        "original-topic",
        Role::ReplicationPolicy,
        Arity::Exactly(1),
        "TOPIC",
    ),
    (
        "heartbeats-topic",
        Role::ReplicationPolicy,
        Arity::Exactly(0),
        "",
    ),
    (
        "offset-syncs-topic",
        Role::ReplicationPolicy,
        Arity::Exactly(1),
        "CLUSTER-ALIAS",
    ),
    (
        "checkpoints-topic",
        Role::ReplicationPolicy,
        Arity::Exactly(1),
        "CLUSTER-ALIAS",
    ),
    (
        "is-heartbeats-topic",
        Role::ReplicationPolicy,
        Arity::Exactly(1),
        "TOPIC",
    ),
    (
        "is-checkpoints-topic",
        Role::ReplicationPolicy,
        Arity::Exactly(1),
        "TOPIC",
    ),
    (
        "is-mm2-internal-topic",
        Role::ReplicationPolicy,
        Arity::Exactly(1),
        "TOPIC",
    ),
    (
        "is-internal-topic",
        Role::ReplicationPolicy,
        Arity::Exactly(1),
        "TOPIC",
    ),
    (
        "format-remote-topics",
        Role::ReplicationPolicy,
        Arity::AtLeast(1),
        "SOURCE-ALIAS TOPIC...",
    ),
    (
        "should-replicate-config-property",
        Role::ConfigPropertyFilter,
        Arity::Exactly(1),
        "NAME",
    ),
    (
        "should-replicate-source-default",
        Role::ConfigPropertyFilter,
        Arity::Exactly(1),
        "NAME",
    ),
    (
        "transform",
        Role::RecordTransform,
        Arity::AtLeast(0),
        "RECORD-JSON...",
    ),
];

/// Why an eval could not run.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// No such function.
    #[error("unknown function `{name}`; functions are: {known}")]
    UnknownFunction {
        /// The name given.
        name: String,
        /// The names that exist.
        known: String,
    },
    /// Wrong number of arguments.
    #[error("{function} takes {usage}, got {got} argument(s)")]
    Arity {
        /// The function.
        function: String,
        /// Its usage.
        usage: String,
        /// How many were given.
        got: usize,
    },
    /// A record argument is not a JSON record.
    #[error("transform takes JSON records: {message}")]
    Record {
        /// What is wrong.
        message: String,
    },
    /// Loading, configuring or calling the plugin failed.
    #[error(transparent)]
    Plugin(#[from] PluginError),
}

impl EvalError {
    /// Whether the error is the caller's (usage) rather than the plugin's.
    pub fn is_usage(&self) -> bool {
        !matches!(self, EvalError::Plugin(_))
    }
}

/// Calls `function` of `plugin` (configured with `config`) with `args`.
pub fn eval(
    plugin: &Plugin,
    function: &str,
    args: &[String],
    config: &Config,
) -> Result<Value, EvalError> {
    let (name, role, arity, usage) =
        FUNCTIONS
            .iter()
            .find(|f| f.0 == function)
            .ok_or_else(|| EvalError::UnknownFunction {
                name: function.to_string(),
                known: FUNCTIONS.iter().map(|f| f.0).collect::<Vec<_>>().join(", "),
            })?;
    let ok = match arity {
        Arity::Exactly(n) => args.len() == *n,
        Arity::AtLeast(n) => args.len() >= *n,
    };
    if !ok {
        let usage = if usage.is_empty() {
            "no arguments".to_string()
        } else {
            usage.to_string()
        };
        return Err(EvalError::Arity {
            function: name.to_string(),
            usage,
            got: args.len(),
        });
    }
    let a = |i: usize| args[i].as_str();
    Ok(match role {
        Role::TopicFilter => {
            let f = plugin.topic_filter(config)?;
            match *name {
                "should-replicate-topic" => json!(f.should_replicate_topic(a(0))?),
                _ => json!(f.should_replicate_topics(args)?),
            }
        }
        Role::GroupFilter => {
            let f = plugin.group_filter(config)?;
            match *name {
                "should-replicate-group" => json!(f.should_replicate_group(a(0))?),
                _ => json!(f.should_replicate_groups(args)?),
            }
        }
        Role::ConfigPropertyFilter => {
            let f = plugin.config_property_filter(config)?;
            match *name {
                "should-replicate-config-property" => {
                    json!(f.should_replicate_config_property(a(0))?)
                }
                _ => json!(f.should_replicate_source_default(a(0))?),
            }
        }
        Role::RecordTransform => {
            let t = plugin.record_transform(config)?;
            let records = args
                .iter()
                .enumerate()
                .map(|(i, a)| records::parse(a, i as i64))
                .collect::<Result<Vec<_>, String>>()
                .map_err(|message| EvalError::Record { message })?;
            let views: Vec<_> = records.iter().map(records::OwnedRecord::view).collect();
            let outcomes = t.transform(&views)?;
            records
                .iter()
                .zip(&outcomes)
                .map(|(r, o)| records::outcome_json(r, o))
                .collect()
        }
        Role::ReplicationPolicy => {
            let p = plugin.replication_policy(config)?;
            match *name {
                "format-remote-topic" => json!(p.format_remote_topic(a(0), a(1))?),
                "topic-source" => json!(p.topic_source(a(0))?),
                "upstream-topic" => json!(p.upstream_topic(a(0))?),
                "original-topic" => json!(p.original_topic(a(0))?),
                "heartbeats-topic" => json!(p.heartbeats_topic()?),
                "offset-syncs-topic" => json!(p.offset_syncs_topic(a(0))?),
                "checkpoints-topic" => json!(p.checkpoints_topic(a(0))?),
                "is-heartbeats-topic" => json!(p.is_heartbeats_topic(a(0))?),
                "is-checkpoints-topic" => json!(p.is_checkpoints_topic(a(0))?),
                "is-mm2-internal-topic" => json!(p.is_mm2_internal_topic(a(0))?),
                "is-internal-topic" => json!(p.is_internal_topic(a(0))?),
                _ => json!(p.format_remote_topics(a(0), &args[1..])?),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::builtin;

    fn run(name: &str, function: &str, args: &[&str]) -> Result<Value, EvalError> {
        let plugin = Plugin::Builtin(builtin::find(name).unwrap());
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        eval(&plugin, function, &args, &Config::new())
    }

    #[test]
    fn the_documented_examples() {
        assert_eq!(
            run(
                "default-policy",
                "format-remote-topic",
                &["us-west", "topic1"]
            )
            .unwrap(),
            json!("us-west.topic1")
        );
        assert_eq!(
            run("default-policy", "topic-source", &["us-west.topic1"]).unwrap(),
            json!("us-west")
        );
        assert_eq!(
            run("default-policy", "upstream-topic", &["topic1"]).unwrap(),
            Value::Null
        );
        assert_eq!(
            run(
                "default-topic-filter",
                "should-replicate-topic",
                &["__consumer_offsets"]
            )
            .unwrap(),
            json!(false)
        );
        assert_eq!(
            run("default-policy", "format-remote-topics", &["a", "x", "y"]).unwrap(),
            json!(["a.x", "a.y"])
        );
    }

    #[test]
    fn usage_errors() {
        let e = run("default-policy", "nope", &[]).unwrap_err();
        assert!(e.is_usage() && e.to_string().contains("unknown function `nope`"));
        let e = run("default-policy", "format-remote-topic", &["a"]).unwrap_err();
        assert!(
            e.is_usage() && e.to_string().contains("SOURCE-ALIAS TOPIC, got 1"),
            "{e}"
        );
        let e = run("default-policy", "should-replicate-topic", &["a"]).unwrap_err();
        assert!(
            !e.is_usage()
                && e.to_string()
                    .contains("does not export the topic-filter role"),
            "{e}"
        );
    }
}
