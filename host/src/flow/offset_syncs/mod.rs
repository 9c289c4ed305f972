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
/// sync missing between them. The owner `generation` is the consumer-group generation in
/// which the writer was assigned the partition: a replicator that lost its partition (a
/// stalled instance that comes back) writes older generations than the partition's new
/// owner, so the store can refuse its late syncs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncMarker {
    /// The writer's session (one per replicator start).
    pub session: u64,
    /// The per-partition sequence number.
    pub seq: u64,
    /// The owner generation (absent in markers of earlier kmirror versions).
    pub generation: Option<i32>,
}

impl SyncMarker {
    /// A marker without an owner generation.
    pub fn new(session: u64, seq: u64) -> Self {
        SyncMarker {
            session,
            seq,
            generation: None,
        }
    }

    /// The header value: `<session hex>:<seq>[:<generation>]`.
    pub fn encode(&self) -> String {
        match self.generation {
            Some(g) => format!("{:016x}:{}:{g}", self.session, self.seq),
            None => format!("{:016x}:{}", self.session, self.seq),
        }
    }

    /// Parses a header value.
    pub fn decode(value: &[u8]) -> Option<SyncMarker> {
        let text = std::str::from_utf8(value).ok()?;
        let mut parts = text.split(':');
        let session = u64::from_str_radix(parts.next()?, 16).ok()?;
        let seq = parts.next()?.parse().ok()?;
        let generation = match parts.next() {
            Some(g) => Some(g.parse().ok()?),
            None => None,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(SyncMarker {
            session,
            seq,
            generation,
        })
    }
}

#[cfg(test)]
mod marker_tests {
    use super::SyncMarker;

    #[test]
    fn markers_round_trip_with_and_without_a_generation() {
        for m in [
            SyncMarker::new(0xabc, 7),
            SyncMarker {
                generation: Some(12),
                ..SyncMarker::new(u64::MAX, 0)
            },
        ] {
            assert_eq!(SyncMarker::decode(m.encode().as_bytes()), Some(m));
        }
        assert_eq!(
            SyncMarker::decode(b"00000000000000ff:3"),
            Some(SyncMarker::new(255, 3)),
            "an earlier version's marker"
        );
        for bad in ["", "zz:1", "1", "1:x", "1:2:x", "1:2:3:4"] {
            assert_eq!(SyncMarker::decode(bad.as_bytes()), None, "{bad}");
        }
    }
}
