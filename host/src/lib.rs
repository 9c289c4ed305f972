//! kmirror: a Kafka cluster mirror whose naming and filtering decisions are WebAssembly
//! plugins.
//!
//! # Layout
//!
//! - [`cli`]: the `kmirror` command line (clap) and its subcommands.
//! - [`config`]: the TOML configuration, strict validation with file:line errors.
//! - [`daemon`]: `run(config, shutdown)`: every flow until shutdown, then a graceful stop.
//! - [`flow`]: one source -> target flow: discovery, replication, offset syncs, heartbeats.
//! - [`formats`]: MM2's OffsetSync, Checkpoint and Heartbeat records, byte for byte.
//! - [`kafka`]: rdkafka clients and the admin operations kmirror uses.
//! - [`metrics`]: Prometheus metrics from the flows' counters.
//! - [`policy`]: the role traits the host uses — topic filter, group filter, replication
//!   policy, config-property filter — implemented by native built-ins and by components.
//! - [`status`]: the `/health` and `/status` HTTP endpoint.
//! - [`plugin`]: the WebAssembly runtime: engine and limits, compile cache, component
//!   loading and role detection, per-role instances, built-ins, and the `plugin check`,
//!   `plugin eval` and `plugin new` logic.

pub mod cli;
pub mod config;
pub mod daemon;
pub mod flow;
pub mod formats;
pub mod kafka;
pub mod metrics;
pub mod plugin;
pub mod policy;
pub mod status;
