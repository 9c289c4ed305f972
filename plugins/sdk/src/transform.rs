//! The record-transform role: what becomes of each record in flight.
//!
//! ```ignore
//! use kmirror_plugin_sdk::{Config, Configure, Outcome, Record, RecordTransform};
//!
//! pub struct DropTombstones;
//!
//! impl Configure for DropTombstones {
//!     fn configure(config: &Config) -> Result<Self, String> {
//!         config.check_keys("drop-tombstones", &[])?;
//!         Ok(DropTombstones)
//!     }
//! }
//!
//! impl RecordTransform for DropTombstones {
//!     fn transform(&self, record: Record) -> Outcome {
//!         if record.value.is_none() { Outcome::Drop } else { Outcome::Keep }
//!     }
//! }
//!
//! kmirror_plugin_sdk::export_plugin!(record_transform: DropTombstones);
//! ```

/// A record header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Its name.
    pub key: String,
    /// Its value.
    pub value: Option<Vec<u8>>,
}

impl Header {
    /// A header `key` with `value`.
    pub fn new(key: impl Into<String>, value: Option<&[u8]>) -> Self {
        Header {
            key: key.into(),
            value: value.map(<[u8]>::to_vec),
        }
    }
}

/// A record as fetched from the source (or as the previous transform of the chain left it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    /// The source topic.
    pub topic: String,
    /// Its partition.
    pub partition: i32,
    /// Its offset in the source partition.
    pub offset: i64,
    /// Its timestamp (ms since the epoch); the mirrored record keeps it.
    pub timestamp: i64,
    /// The key.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Option<Vec<u8>>,
    /// The headers, in order (names may repeat).
    pub headers: Vec<Header>,
}

impl Record {
    /// The value of the first header named `name`, if there is one (`Some(None)` for a
    /// header without a value).
    pub fn header(&self, name: &str) -> Option<Option<&[u8]>> {
        self.headers
            .iter()
            .find(|h| h.key == name)
            .map(|h| h.value.as_deref())
    }

    /// This record's key, value and headers as a rewrite (change them first).
    pub fn rewritten(self) -> Outcome {
        Outcome::Rewrite {
            key: self.key,
            value: self.value,
            headers: self.headers,
        }
    }
}

/// What becomes of one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Mirrored as it is.
    Keep,
    /// Not mirrored (kmirror's offset syncs keep consumer-group translation exact).
    Drop,
    /// Mirrored with this key, value and headers, in the same partition with the same
    /// timestamp.
    Rewrite {
        /// The key.
        key: Option<Vec<u8>>,
        /// The value.
        value: Option<Vec<u8>>,
        /// The headers.
        headers: Vec<Header>,
    },
}

/// Transforms records in flight. One record gives at most one record, in its own partition
/// with its own timestamp. It must be deterministic: the same record gives the same outcome,
/// whatever else is in its batch.
pub trait RecordTransform {
    /// What becomes of `record`.
    fn transform(&self, record: Record) -> Outcome;

    /// One outcome per record, in order: kmirror calls this once per fetched batch.
    fn transform_batch(&self, records: Vec<Record>) -> Vec<Outcome> {
        records.into_iter().map(|r| self.transform(r)).collect()
    }
}
