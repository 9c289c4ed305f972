//! Offset syncs (MM2's `OffsetSync` records): the data plane writes one when a source
//! offset and its target offset must be remembered, the checkpoint task reads them back
//! into a store that translates consumer-group offsets.
//!
//! - [`writer`]: when a sync is written (MM2's rules plus what exact translation needs), a
//!   pure state machine;
//! - [`sender`]: the writer's syncs sent to the offset-syncs topic, a few in flight;
//! - [`reader`]: tails the offset-syncs topic into the shared store;
//! - [`store`]: translation, exact between consecutive marked syncs, MM2's rule otherwise.
//!
//! The record format is in [`crate::formats::OffsetSync`]; the [`SyncMarker`] header is
//! kmirror's addition that MM2 readers ignore.

pub mod reader;
pub mod sender;
pub mod store;
pub mod writer;

pub use crate::formats::OffsetSync;
pub use reader::SharedStore;
pub use store::OffsetSyncStore;
pub use writer::{OffsetSyncWriter, Trigger};

/// A source partition.
pub type TopicPartition = (String, i32);

/// The record header carrying a [`SyncMarker`].
pub const MARKER_HEADER: &str = "kmirror-sync";

/// Identifies a sync within a writer session: consecutive `seq` of one `session` have no
/// sync missing between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncMarker {
    /// The writer's session (one per replicator start).
    pub session: u64,
    /// The per-partition sequence number.
    pub seq: u64,
}

impl SyncMarker {
    /// The header value: `<session hex>:<seq>`.
    pub fn encode(&self) -> String {
        format!("{:016x}:{}", self.session, self.seq)
    }

    /// Parses a header value.
    pub fn decode(value: &[u8]) -> Option<SyncMarker> {
        let text = std::str::from_utf8(value).ok()?;
        let (session, seq) = text.split_once(':')?;
        Some(SyncMarker {
            session: u64::from_str_radix(session, 16).ok()?,
            seq: seq.parse().ok()?,
        })
    }
}
