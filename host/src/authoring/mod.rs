//! Tools for plugin authors, built on the runtime: what `kmirror plugin check`, `eval`
//! and `new` do.
//!
//! - [`conformance`]: the conformance suite a plugin's roles are checked against.
//! - [`eval`]: calling one WIT function by name, the result as JSON.
//! - [`scaffold`]: a new plugin crate from the templates in `templates/`.

pub mod conformance;
pub mod eval;
pub mod scaffold;
