//! The error a plugin load or call ends in. The runtime converts wasmtime's errors into it
//! at its boundary (`plugin::instance`), so nothing above sees wasmtime.

use super::Role;
use std::path::PathBuf;
use std::time::Duration;

/// Why a plugin could not be loaded or a call into it failed.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The component file could not be read.
    #[error("cannot read plugin {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a valid component for this host.
    #[error("cannot compile plugin {path}: {message}")]
    Compile {
        /// The file.
        path: PathBuf,
        /// What the compiler said.
        message: String,
    },
    /// The component exports none of kmirror's roles.
    #[error(
        "plugin {path} exports no kmirror role (kmirror:plugin/topic-filter, group-filter, replication-policy or config-property-filter @0.1); it exports: {exports}"
    )]
    NoRole {
        /// The file.
        path: PathBuf,
        /// What it does export.
        exports: String,
    },
    /// The plugin lacks the role it is asked for.
    #[error("plugin {plugin} does not export the {role} role; it exports: {exports}")]
    MissingRole {
        /// The plugin.
        plugin: String,
        /// The role asked for.
        role: Role,
        /// The roles it has.
        exports: String,
    },
    /// No built-in has this name.
    #[error("unknown built-in `{name}`; built-ins are: {known}")]
    UnknownBuiltin {
        /// The name asked for.
        name: String,
        /// The names that exist.
        known: String,
    },
    /// The component could not be instantiated (for example it imports something the host
    /// does not provide).
    #[error("cannot instantiate plugin {plugin}: {message}")]
    Instantiate {
        /// The plugin.
        plugin: String,
        /// Why.
        message: String,
    },
    /// The role's `configure` returned an error.
    #[error("plugin {plugin} rejected its {role} configuration: {message}")]
    Config {
        /// The plugin.
        plugin: String,
        /// The role being configured.
        role: Role,
        /// The plugin's message.
        message: String,
    },
    /// A call ran past its deadline and was interrupted.
    #[error("plugin {plugin}: {function} did not return within {deadline:?} and was interrupted")]
    Timeout {
        /// The plugin.
        plugin: String,
        /// The WIT function called.
        function: &'static str,
        /// The deadline.
        deadline: Duration,
    },
    /// A call tried to grow memory past the instance's cap.
    #[error("plugin {plugin}: {function} exceeded the memory limit of {limit} bytes")]
    MemoryLimit {
        /// The plugin.
        plugin: String,
        /// The WIT function called.
        function: &'static str,
        /// The cap in bytes.
        limit: usize,
    },
    /// A call trapped (a panic in the guest, an out-of-bounds access, ...).
    #[error(
        "plugin {plugin}: {function} trapped ({kind}): {message}{}",
        guest_output(output)
    )]
    Trap {
        /// The plugin.
        plugin: String,
        /// The WIT function called.
        function: &'static str,
        /// What kind of trap.
        kind: TrapKind,
        /// The runtime's description.
        message: String,
        /// The tail of what the guest wrote to stderr/stdout before it trapped (its panic
        /// message), empty if nothing.
        output: String,
    },
    /// A call returned an answer the host refuses (a string too long, a list of the wrong
    /// length).
    #[error("plugin {plugin}: {function} returned an invalid answer: {message}")]
    Output {
        /// The plugin.
        plugin: String,
        /// The WIT function called.
        function: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The call was abandoned because the daemon is stopping.
    #[error("plugin {plugin}: {function} abandoned: the daemon is stopping")]
    Cancelled {
        /// The plugin.
        plugin: String,
        /// The WIT function called.
        function: &'static str,
    },
    /// Any other failure of a call.
    #[error("plugin {plugin}: {function} failed: {message}")]
    Call {
        /// The plugin.
        plugin: String,
        /// The WIT function called.
        function: &'static str,
        /// The runtime's description.
        message: String,
    },
    /// The engine could not be set up.
    #[error("cannot set up the plugin engine: {0}")]
    Engine(String),
}

/// The kind of a trap, without wasmtime's types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrapKind {
    /// `unreachable` — what a Rust guest's panic or abort becomes.
    Unreachable,
    /// A memory or table access out of bounds.
    OutOfBounds,
    /// The guest's stack overflowed.
    StackOverflow,
    /// An integer division by zero or overflow.
    Arithmetic,
    /// Any other trap.
    Other,
}

impl std::fmt::Display for TrapKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TrapKind::Unreachable => "unreachable: the plugin panicked or aborted",
            TrapKind::OutOfBounds => "out-of-bounds access",
            TrapKind::StackOverflow => "stack overflow",
            TrapKind::Arithmetic => "arithmetic fault",
            TrapKind::Other => "trap",
        })
    }
}

/// `; guest output: ...` when the guest wrote something before it failed.
fn guest_output(output: &str) -> String {
    let output = output.trim();
    if output.is_empty() {
        String::new()
    } else {
        format!("; guest output: {output}")
    }
}

impl PluginError {
    /// A short, stable name of the error's kind, for metrics labels and log fields.
    pub fn kind(&self) -> &'static str {
        match self {
            PluginError::Read { .. } => "read",
            PluginError::Compile { .. } => "compile",
            PluginError::NoRole { .. } => "no_role",
            PluginError::MissingRole { .. } => "missing_role",
            PluginError::UnknownBuiltin { .. } => "unknown_builtin",
            PluginError::Instantiate { .. } => "instantiate",
            PluginError::Config { .. } => "config",
            PluginError::Timeout { .. } => "timeout",
            PluginError::MemoryLimit { .. } => "memory_limit",
            PluginError::Trap { .. } => "trap",
            PluginError::Output { .. } => "output",
            PluginError::Cancelled { .. } => "cancelled",
            PluginError::Call { .. } => "call",
            PluginError::Engine(_) => "engine",
        }
    }
}
