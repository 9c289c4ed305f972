//! The native built-ins: MM2's default policies and filters, by the names users give them.

use crate::policy::{
    Config, ConfigPropertyFilter, GroupFilter, Native, Outcome, PluginError, RecordIn,
    RecordTransform, ReplicationPolicy, Role, TopicFilter,
};
use kmirror_mm2::{
    Configure, DefaultConfigPropertyFilter, DefaultGroupFilter, DefaultReplicationPolicy,
    DefaultTopicFilter, IdentityReplicationPolicy,
};
use std::sync::Arc;

/// A named native built-in.
#[derive(Debug)]
pub struct Builtin {
    /// The name users give it (`default-policy`, ...).
    pub name: &'static str,
    /// The role it plays.
    pub role: Role,
    /// What it is, in one line.
    pub summary: &'static str,
}

/// Every built-in.
pub static BUILTINS: [Builtin; 6] = [
    Builtin {
        name: "default-policy",
        role: Role::ReplicationPolicy,
        summary: "MM2's DefaultReplicationPolicy: <source>.<topic>",
    },
    Builtin {
        name: "identity-policy",
        role: Role::ReplicationPolicy,
        summary: "MM2's IdentityReplicationPolicy: topics keep their names",
    },
    Builtin {
        name: "default-topic-filter",
        role: Role::TopicFilter,
        summary: "MM2's DefaultTopicFilter: `topics` minus `topics.exclude`",
    },
    Builtin {
        name: "default-group-filter",
        role: Role::GroupFilter,
        summary: "MM2's DefaultGroupFilter: `groups` minus `groups.exclude`",
    },
    Builtin {
        name: "default-config-property-filter",
        role: Role::ConfigPropertyFilter,
        summary: "MM2's DefaultConfigPropertyFilter: all but `config.properties.exclude`",
    },
    Builtin {
        name: "keep-all",
        role: Role::RecordTransform,
        summary: "a record transform keeping every record as it is",
    },
];

/// The `keep-all` record transform.
struct KeepAll;

impl RecordTransform for KeepAll {
    fn transform(&self, records: &[RecordIn<'_>]) -> Result<Vec<Outcome>, PluginError> {
        Ok(vec![Outcome::Keep; records.len()])
    }
}

/// The record transform built-ins.
pub(crate) fn record_transform(
    name: &str,
    c: &Config,
) -> Option<Result<Arc<dyn RecordTransform>, String>> {
    match name {
        "keep-all" => Some(
            c.check_keys("keep-all", &[])
                .map(|()| Arc::new(KeepAll) as _),
        ),
        _ => None,
    }
}

/// Builds a built-in of one role from its name and configuration; `None` if no built-in of
/// that role has the name.
pub(crate) type Constructor<T> = fn(&str, &Config) -> Option<Result<Arc<T>, String>>;

/// The topic filter built-ins.
pub(crate) fn topic_filter(name: &str, c: &Config) -> Option<Result<Arc<dyn TopicFilter>, String>> {
    match name {
        "default-topic-filter" => {
            Some(DefaultTopicFilter::configure(c).map(|b| Arc::new(Native(b)) as _))
        }
        _ => None,
    }
}

/// The group filter built-ins.
pub(crate) fn group_filter(name: &str, c: &Config) -> Option<Result<Arc<dyn GroupFilter>, String>> {
    match name {
        "default-group-filter" => {
            Some(DefaultGroupFilter::configure(c).map(|b| Arc::new(Native(b)) as _))
        }
        _ => None,
    }
}

/// The replication policy built-ins.
pub(crate) fn replication_policy(
    name: &str,
    c: &Config,
) -> Option<Result<Arc<dyn ReplicationPolicy>, String>> {
    match name {
        "default-policy" => {
            Some(DefaultReplicationPolicy::configure(c).map(|b| Arc::new(Native(b)) as _))
        }
        "identity-policy" => {
            Some(IdentityReplicationPolicy::configure(c).map(|b| Arc::new(Native(b)) as _))
        }
        _ => None,
    }
}

/// The config-property filter built-ins.
pub(crate) fn config_property_filter(
    name: &str,
    c: &Config,
) -> Option<Result<Arc<dyn ConfigPropertyFilter>, String>> {
    match name {
        "default-config-property-filter" => {
            Some(DefaultConfigPropertyFilter::configure(c).map(|b| Arc::new(Native(b)) as _))
        }
        _ => None,
    }
}

impl Builtin {
    /// This built-in configured as `role`, built by `constructor` (the role's table).
    pub(crate) fn configured<T: ?Sized>(
        &self,
        role: Role,
        config: &Config,
        constructor: Constructor<T>,
    ) -> Result<Arc<T>, PluginError> {
        let plugin = format!("builtin:{}", self.name);
        match constructor(self.name, config) {
            Some(Ok(built)) => Ok(built),
            Some(Err(message)) => Err(PluginError::Config {
                plugin,
                role,
                message,
            }),
            None => Err(PluginError::MissingRole {
                plugin,
                role,
                exports: self.role.to_string(),
            }),
        }
    }
}

/// The built-in called `name`.
pub fn find(name: &str) -> Result<&'static Builtin, PluginError> {
    BUILTINS
        .iter()
        .find(|b| b.name == name)
        .ok_or_else(|| PluginError::UnknownBuiltin {
            name: name.to_string(),
            known: BUILTINS
                .iter()
                .map(|b| b.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The built-in MM2 uses by default for `role`.
pub fn default_for(role: Role) -> &'static Builtin {
    let name = match role {
        Role::TopicFilter => "default-topic-filter",
        Role::GroupFilter => "default-group-filter",
        Role::ReplicationPolicy => "default-policy",
        Role::RecordTransform => "keep-all",
        Role::ConfigPropertyFilter => "default-config-property-filter",
    };
    BUILTINS
        .iter()
        .find(|b| b.name == name)
        .unwrap_or(&BUILTINS[0])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::Plugin;

    #[test]
    fn every_role_has_a_default_and_names_are_unique() {
        for role in Role::ALL {
            assert_eq!(default_for(role).role, role);
        }
        let mut names: Vec<_> = BUILTINS.iter().map(|b| b.name).collect();
        names.dedup();
        assert_eq!(names.len(), BUILTINS.len());
        let err = find("nope").unwrap_err().to_string();
        assert!(
            err.contains("unknown built-in `nope`") && err.contains("default-policy"),
            "{err}"
        );
    }

    /// Configures `b` as its own role.
    fn build(b: &'static Builtin, config: &Config) -> Result<(), PluginError> {
        let plugin = Plugin::Builtin(b);
        match b.role {
            Role::TopicFilter => plugin.topic_filter(config).map(drop),
            Role::GroupFilter => plugin.group_filter(config).map(drop),
            Role::ReplicationPolicy => plugin.replication_policy(config).map(drop),
            Role::RecordTransform => plugin.record_transform(config).map(drop),
            Role::ConfigPropertyFilter => plugin.config_property_filter(config).map(drop),
        }
    }

    #[test]
    fn builtins_build_and_reject_bad_config() {
        for b in &BUILTINS {
            assert!(build(b, &Config::new()).is_ok(), "{}", b.name);
            let bad: Config = [("no.such.key", "x")].into_iter().collect();
            let err = build(b, &bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.contains("unknown key `no.such.key`"),
                "{}: {err}",
                b.name
            );
        }
    }

    #[test]
    fn a_builtin_has_only_its_own_role() {
        let err = Plugin::Builtin(find("default-policy").unwrap())
            .topic_filter(&Config::new())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("does not export the topic-filter role"),
            "{err}"
        );
    }
}
