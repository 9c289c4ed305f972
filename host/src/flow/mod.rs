//! One source -> target flow: each loop a file, its decisions pure functions beside it.
//!
//! - [`discovery`]: which topics are mirrored under which names, and the plan of target
//!   changes from both clusters' snapshots.
//! - [`offset_syncs`]: when an OffsetSync is emitted.

pub mod discovery;
pub mod offset_syncs;
