//! The native built-ins: MM2's default policies and filters, by the names users give them.

use super::{Config, PluginError, Role};
use crate::policy::{Native, RoleHandle};
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
    /// Builds it from its configuration.
    pub build: fn(&Config) -> Result<RoleHandle, String>,
}

/// Every built-in.
pub static BUILTINS: [Builtin; 5] = [
    Builtin {
        name: "default-policy",
        role: Role::ReplicationPolicy,
        summary: "MM2's DefaultReplicationPolicy: <source>.<topic>",
        build: |c| {
            Ok(RoleHandle::ReplicationPolicy(Arc::new(Native(
                DefaultReplicationPolicy::configure(c)?,
            ))))
        },
    },
    Builtin {
        name: "identity-policy",
        role: Role::ReplicationPolicy,
        summary: "MM2's IdentityReplicationPolicy: topics keep their names",
        build: |c| {
            Ok(RoleHandle::ReplicationPolicy(Arc::new(Native(
                IdentityReplicationPolicy::configure(c)?,
            ))))
        },
    },
    Builtin {
        name: "default-topic-filter",
        role: Role::TopicFilter,
        summary: "MM2's DefaultTopicFilter: `topics` minus `topics.exclude`",
        build: |c| {
            Ok(RoleHandle::TopicFilter(Arc::new(Native(
                DefaultTopicFilter::configure(c)?,
            ))))
        },
    },
    Builtin {
        name: "default-group-filter",
        role: Role::GroupFilter,
        summary: "MM2's DefaultGroupFilter: `groups` minus `groups.exclude`",
        build: |c| {
            Ok(RoleHandle::GroupFilter(Arc::new(Native(
                DefaultGroupFilter::configure(c)?,
            ))))
        },
    },
    Builtin {
        name: "default-config-property-filter",
        role: Role::ConfigPropertyFilter,
        summary: "MM2's DefaultConfigPropertyFilter: all but `config.properties.exclude`",
        build: |c| {
            Ok(RoleHandle::ConfigPropertyFilter(Arc::new(Native(
                DefaultConfigPropertyFilter::configure(c)?,
            ))))
        },
    },
];

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

    #[test]
    fn builtins_build_and_reject_bad_config() {
        for b in &BUILTINS {
            assert!((b.build)(&Config::new()).is_ok(), "{}", b.name);
            let bad: Config = [("no.such.key", "x")].into_iter().collect();
            let err = (b.build)(&bad).err().unwrap_or_default();
            assert!(
                err.contains("unknown key `no.such.key`"),
                "{}: {err}",
                b.name
            );
        }
    }
}
