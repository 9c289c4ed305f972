//! Checkpoints (MM2's `MirrorCheckpointTask`): source consumer groups' committed offsets,
//! translated through the offset syncs, written to `<source>.checkpoints.internal` on the
//! target, where `kmirror offsets`, MM2's `RemoteClusterUtils` and group offset sync read
//! them.
//!
//! - [`rules`]: which checkpoint a committed offset becomes and when it is emitted (pure);
//! - [`task`]: the loop: groups, their offsets, translation, emission, group offset sync.

pub mod rules;
pub mod task;

pub use rules::{CheckpointKey, checkpoint, key, should_emit};
pub use task::{Checkpoints, read_checkpoints};
