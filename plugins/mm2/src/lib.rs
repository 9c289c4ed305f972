//! MirrorMaker 2's default naming and filtering semantics as plain Rust.
//!
//! kmirror's native built-ins (the host) and its guest SDK (plugins compiled to
//! WebAssembly) both build on this crate, so "MM2's default" means one thing everywhere.
//!
//! Layout:
//! - [`config`]: a role's ordered key/value configuration and strict key checking.
//! - [`pattern`]: MM2's comma-separated, whole-name regex lists.
//! - [`policy`]: the [`ReplicationPolicy`] trait with MM2's default bodies, and
//!   [`DefaultReplicationPolicy`] / [`IdentityReplicationPolicy`].
//! - [`filter`]: the filter traits and [`DefaultTopicFilter`], [`DefaultGroupFilter`],
//!   [`DefaultConfigPropertyFilter`].

pub mod config;
pub mod filter;
pub mod pattern;
pub mod policy;

pub use config::{Config, Configure};
pub use filter::{
    ConfigPropertyFilter, DefaultConfigPropertyFilter, DefaultGroupFilter, DefaultTopicFilter,
    GroupFilter, TopicFilter,
};
pub use pattern::PatternList;
pub use policy::{DefaultReplicationPolicy, IdentityReplicationPolicy, ReplicationPolicy};
