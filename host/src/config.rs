//! The TOML configuration: the user contract, strict validation, errors with file:line.
//!
//! Parsing is strict (`deny_unknown_fields` everywhere, typed durations); [`load`] then
//! validates the whole file and reports *every* problem at once, each naming the file,
//! line, column and key. Plugins are loaded, role-checked and configured here, so
//! `kmirror validate` catches a wrong plugin without connecting to any cluster; each flow's
//! settings come out typed and in range ([`FlowSettings`]).
//!
//! - `model`: the file's shape and defaults;
//! - [`validate`]: loading, cluster and flow checks;
//! - `slots`: the four plugin slots of a flow;
//! - `settings`: a flow's validated runtime settings;
//! - `errors`: located errors.

mod errors;
pub mod mm2_import;
mod model;
#[cfg(test)]
mod reference;
mod settings;
mod slots;
mod unknown;
pub mod validate;

pub use errors::{ConfigError, ConfigErrors};
pub use model::*;
pub use settings::{
    AuditSettings, CheckpointSettings, FlowSettings, MIN_LEASE, SettingError, queued_for_at_most,
};
pub use slots::SlotSources;
pub use validate::{LoadedConfig, ResolvedFlow, load, load_str, load_with_plugins_dir, reload};
