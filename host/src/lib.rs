//! kmirror: a Kafka cluster mirror whose naming and filtering decisions are WebAssembly
//! plugins.
//!
//! # Layout
//!
//! From the bottom up; a module imports only from the layers below it.
//!
//! - [`policy`]: the plugin contract as the host sees it — the five roles (topic filter,
//!   group filter, replication policy, config-property filter, record transform), their
//!   traits, [`policy::PluginError`], MM2's native implementations, and a flow's
//!   [`policy::FlowRoles`].
//! - [`formats`]: MM2's OffsetSync, Checkpoint and Heartbeat records, byte for byte;
//!   [`histogram`]: atomic fixed-bucket histograms.
//! - [`plugin`]: the WebAssembly runtime — engine and limits, compile cache, component
//!   loading and role detection, per-role instances — and the native built-ins.
//! - [`kafka`]: rdkafka clients, the admin operations kmirror uses (and those the rdkafka
//!   crate lacks, through librdkafka directly: group offsets, described assignments, topic
//!   ACLs, incremental config changes), and the internal-topic writer and readers.
//! - [`authoring`]: tools for plugin authors: the conformance suite (`plugin check`),
//!   `plugin eval`, records as JSON (`plugin test` of a transform), the `plugin new`
//!   scaffold and `plugin build`.
//! - [`config`]: the TOML configuration, strict validation with file:line errors, and each
//!   flow's validated settings.
//! - [`flow`]: one source -> target flow, one MM2 concept per module: `discovery`,
//!   `replication` (with the record-transform chain), `offset_syncs`, `checkpoints`,
//!   `group_sync`, `heartbeats`; the instances' coordination (`leadership`, `duties`, `ownership`), topic ACL sync
//!   (`acls`), the takeover from MM2 (`takeover`), the plugin facade, telemetry, and the
//!   supervisor that wires them.
//! - [`telemetry`]: what the daemon shows: its flows' telemetry, every plugin's stats,
//!   config reloads; [`metrics`], [`status`]: `/metrics` (Prometheus) and `/health` +
//!   `/status`, rendered from it.
//! - [`daemon`]: `run(config, shutdown)`: every flow until shutdown, then a graceful stop.
//! - [`cli`]: the `kmirror` command line (clap) and its subcommands.

pub mod authoring;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod flow;
pub mod formats;
pub mod histogram;
pub mod kafka;
pub mod metrics;
pub mod plugin;
pub mod policy;
pub mod status;
pub mod telemetry;
