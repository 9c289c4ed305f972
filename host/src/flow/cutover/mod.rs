//! Cutover: what `kmirror failover` records and what a running flow does about it.
//!
//! - [`control`]: the flow's failover control topic on the target
//!   (`kmirror-failover.<source>.internal`): a record per source topic failed over (the
//!   flow stops mirroring it) and per consumer group failed over; the daemon's reader of it.
//! - [`readiness`]: per consumer group and partition, whether a failover of it is ready —
//!   its target offset exact or approximate, the records it would re-read, the unmirrored
//!   tail, the group active on the target, READ on the target topic — as pure functions.

pub mod control;
pub mod readiness;

/// The flow's failover control topic, on the target: named after the source, as MM2 names
/// its per-source internal topics (`<source>.checkpoints.internal`), so the flows of
/// several sources into one target keep theirs apart.
pub fn control_topic(source_alias: &str) -> String {
    format!("kmirror-failover.{source_alias}.internal")
}
