//! Tools for plugin authors, built on the runtime: what `kmirror plugin check`, `eval`,
//! `new` and `build` do.
//!
//! - [`conformance`]: the conformance suite a plugin's roles are checked against.
//! - [`eval`]: calling one WIT function by name, the result as JSON.
//! - [`scaffold`]: a new plugin project (Rust, Python, JavaScript) from the templates in
//!   `templates/`, with [`sdk`]: the guest SDK and WIT embedded in the binary.
//! - [`build`]: a project into a component, with cargo, componentize-py or componentize-js.

pub mod build;
pub mod conformance;
pub mod eval;
pub mod records;
pub mod scaffold;
pub mod sdk;
