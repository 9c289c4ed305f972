//! The record-transform role: what becomes of each record in flight — kept, dropped or
//! rewritten (key, value, headers; never its topic, partition or timestamp). One record
//! gives at most one record (the WIT contract says why).

use super::PluginError;
use std::sync::Arc;

/// A record as a transform sees it: borrowed from the fetched message, or from what the
/// previous transform of the chain made of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordIn<'a> {
    /// The source topic.
    pub topic: &'a str,
    /// Its partition.
    pub partition: i32,
    /// Its offset in the source partition.
    pub offset: i64,
    /// Its timestamp (ms since the epoch).
    pub timestamp: i64,
    /// The key.
    pub key: Option<&'a [u8]>,
    /// The value.
    pub value: Option<&'a [u8]>,
    /// The headers, in order.
    pub headers: Vec<(&'a str, Option<&'a [u8]>)>,
}

/// A record's new key, value and headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rewritten {
    /// The key.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Option<Vec<u8>>,
    /// The headers, in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl Rewritten {
    /// Its size as the output bound counts it: key, value, header names and values.
    pub fn size(&self) -> usize {
        self.key.as_ref().map_or(0, Vec::len)
            + self.value.as_ref().map_or(0, Vec::len)
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
                .sum::<usize>()
    }

    /// `record` with these contents.
    pub fn over<'a>(&'a self, record: &RecordIn<'a>) -> RecordIn<'a> {
        RecordIn {
            topic: record.topic,
            partition: record.partition,
            offset: record.offset,
            timestamp: record.timestamp,
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            headers: self
                .headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_deref()))
                .collect(),
        }
    }
}

/// What becomes of one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Mirrored as it is.
    Keep,
    /// Not mirrored.
    Drop,
    /// Mirrored with other contents.
    Rewrite(Rewritten),
}

/// The largest record a transform may give (key, value and headers together): larger is a
/// malformed answer.
pub const MAX_TRANSFORMED_RECORD_BYTES: usize = 8 << 20;

/// Transforms records: one outcome per record, in order.
pub trait RecordTransform: Send + Sync {
    /// What becomes of each of `records`.
    fn transform(&self, records: &[RecordIn<'_>]) -> Result<Vec<Outcome>, PluginError>;
}

/// One transform of a flow's chain.
#[derive(Clone)]
pub struct ChainLink {
    /// What it is called in messages and metrics: its plugin file's name.
    pub name: String,
    /// The transform.
    pub transform: Arc<dyn RecordTransform>,
}

impl std::fmt::Debug for ChainLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainLink")
            .field("name", &self.name)
            .finish()
    }
}
