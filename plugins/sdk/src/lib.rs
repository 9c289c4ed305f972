//! kmirror's guest SDK: write a plugin in plain Rust, build it to a WebAssembly component.
//!
//! A plugin implements one or more role traits on its own types, plus [`Configure`] to
//! build them from the role's configuration, and names them in [`export_plugin!`]:
//!
//! ```ignore
//! use kmirror_plugin_sdk::{Config, Configure, ReplicationPolicy};
//!
//! pub struct Arrow;
//!
//! impl Configure for Arrow {
//!     fn configure(config: &Config) -> Result<Self, String> {
//!         config.check_keys("arrow", &[])?;
//!         Ok(Arrow)
//!     }
//! }
//!
//! impl ReplicationPolicy for Arrow {
//!     fn format_remote_topic(&self, source: &str, topic: &str) -> String {
//!         format!("{source}->{topic}")
//!     }
//!     fn topic_source(&self, topic: &str) -> Option<String> {
//!         topic.split_once("->").map(|(s, _)| s.to_string())
//!     }
//!     fn upstream_topic(&self, topic: &str) -> Option<String> {
//!         topic.split_once("->").map(|(_, t)| t.to_string())
//!     }
//! }
//!
//! kmirror_plugin_sdk::export_plugin!(replication_policy: Arrow);
//! ```
//!
//! A record transform ([`RecordTransform`]) keeps, drops or rewrites each record in flight;
//! see [`transform`].
//!
//! MM2's default bodies come with the traits: `original_topic`, the internal topic names,
//! the `is_*` predicates and every batch form. The role types are plain Rust, so their
//! logic is unit-tested natively with `cargo test`.
//!
//! Build for `wasm32-wasip2` (cargo emits a component) or for `wasm32-unknown-unknown`
//! and turn the module into a component with `wit-component` (no WASI imports at all).

pub use kmirror_mm2::{
    Config, ConfigPropertyFilter, Configure, DefaultConfigPropertyFilter, DefaultGroupFilter,
    DefaultReplicationPolicy, DefaultTopicFilter, GroupFilter, IdentityReplicationPolicy,
    PatternList, ReplicationPolicy, TopicFilter, filter, policy,
};
pub use kmirror_plugin_sdk_macros::export_plugin;
pub use transform::{Header, Outcome, Record, RecordTransform};

pub mod transform;

#[doc(hidden)]
pub mod __private;
