//! The TOML configuration: the user contract, strict validation, errors with file:line.
//!
//! Parsing is strict (`deny_unknown_fields` everywhere, typed durations); [`load`] then
//! validates the whole file and reports *every* problem at once, each naming the file,
//! line, column and key. Plugins are loaded and role-checked here, so `kmirror validate`
//! catches a wrong plugin without connecting to any cluster.

mod model;
pub mod validate;

pub use model::*;
pub use validate::{
    ConfigError, ConfigErrors, LoadedConfig, ResolvedFlow, ResolvedSlot, load, load_str,
};
