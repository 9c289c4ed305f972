//! What an instance mirrored of partitions whose assignment was lost, so that a partition
//! coming back to one of its tasks is not mirrored again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Progress of partitions whose assignment was lost (a stalled or cut-off member): what
/// this instance had mirrored, kept for a while so that if a partition comes back to one of
/// its tasks before anyone stored further progress, it is not mirrored again.
#[derive(Debug, Default)]
pub struct Orphans {
    known: HashMap<(Arc<str>, i32), (i64, Instant)>,
}

/// How long the progress of a lost partition is remembered: long enough for the rebalance
/// that follows a lost assignment, short enough that a source topic recreated (or a
/// progress group reset) meanwhile is unlikely.
pub const ORPHAN_TTL: Duration = Duration::from_secs(120);

impl Orphans {
    /// Remembers that `topic`/`partition` was mirrored up to `offset`.
    pub fn remember(&mut self, topic: Arc<str>, partition: i32, offset: i64, now: Instant) {
        self.known
            .retain(|_, (_, at)| now.duration_since(*at) < ORPHAN_TTL);
        let e = self
            .known
            .entry((topic, partition))
            .or_insert((offset, now));
        *e = (e.0.max(offset), now);
    }

    /// Takes what is remembered of `topic`/`partition`.
    pub fn take(&mut self, topic: &str, partition: i32, now: Instant) -> Option<i64> {
        let key = (Arc::from(topic), partition);
        let (offset, at) = self.known.remove(&key)?;
        (now.duration_since(at) < ORPHAN_TTL).then_some(offset)
    }
}
