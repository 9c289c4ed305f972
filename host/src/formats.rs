//! MM2's wire formats, byte for byte: OffsetSync, Checkpoint and Heartbeat records.
//!
//! Integers are big-endian; a STRING is an INT16 byte length followed by UTF-8 bytes.
//! MM2 tooling (`RemoteClusterUtils`, MM2 itself) reads what kmirror writes and vice versa.

/// Why a record could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The bytes end before the field.
    #[error("truncated {record} {part}: missing {field}")]
    Truncated {
        /// Which record type.
        record: &'static str,
        /// `key` or `value`.
        part: &'static str,
        /// The missing field.
        field: &'static str,
    },
    /// A string field is not UTF-8 or has a negative length.
    #[error("{record} {part}: field {field} is not a valid string")]
    BadString {
        /// Which record type.
        record: &'static str,
        /// `key` or `value`.
        part: &'static str,
        /// The field.
        field: &'static str,
    },
    /// A version this reader does not know.
    #[error("{record}: unsupported version {version}")]
    Version {
        /// Which record type.
        record: &'static str,
        /// The version found.
        version: i16,
    },
    /// A missing key or value.
    #[error("{record}: record has no {part}")]
    Missing {
        /// Which record type.
        record: &'static str,
        /// `key` or `value`.
        part: &'static str,
    },
}

struct Writer(Vec<u8>);

impl Writer {
    fn new() -> Self {
        Writer(Vec::with_capacity(32))
    }
    fn string(mut self, s: &str) -> Self {
        // Kafka topic and group names are far below i16::MAX bytes; longer ones are cut
        // at the limit rather than written with a wrapped length.
        let bytes = &s.as_bytes()[..s.len().min(i16::MAX as usize)];
        self.0
            .extend_from_slice(&(bytes.len() as i16).to_be_bytes());
        self.0.extend_from_slice(bytes);
        self
    }
    fn i16(mut self, v: i16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    record: &'static str,
    part: &'static str,
}

impl<'a> Reader<'a> {
    fn new(
        bytes: Option<&'a [u8]>,
        record: &'static str,
        part: &'static str,
    ) -> Result<Self, FormatError> {
        let bytes = bytes.ok_or(FormatError::Missing { record, part })?;
        Ok(Reader {
            bytes,
            record,
            part,
        })
    }
    fn take<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], FormatError> {
        let (head, rest) = self
            .bytes
            .split_first_chunk::<N>()
            .ok_or(FormatError::Truncated {
                record: self.record,
                part: self.part,
                field,
            })?;
        self.bytes = rest;
        Ok(*head)
    }
    fn i16(&mut self, field: &'static str) -> Result<i16, FormatError> {
        self.take::<2>(field).map(i16::from_be_bytes)
    }
    fn i32(&mut self, field: &'static str) -> Result<i32, FormatError> {
        self.take::<4>(field).map(i32::from_be_bytes)
    }
    fn i64(&mut self, field: &'static str) -> Result<i64, FormatError> {
        self.take::<8>(field).map(i64::from_be_bytes)
    }
    fn string(&mut self, field: &'static str) -> Result<String, FormatError> {
        let bad = FormatError::BadString {
            record: self.record,
            part: self.part,
            field,
        };
        let len = usize::try_from(self.i16(field)?).map_err(|_| bad.clone())?;
        if self.bytes.len() < len {
            return Err(FormatError::Truncated {
                record: self.record,
                part: self.part,
                field,
            });
        }
        let (s, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        String::from_utf8(s.to_vec()).map_err(|_| bad)
    }
}

/// An offset sync: upstream offset `upstream` of `topic`/`partition` (source side) was
/// mirrored to offset `downstream` of the same partition of the remote topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetSync {
    /// The source topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The source offset.
    pub upstream: i64,
    /// The target offset.
    pub downstream: i64,
}

impl OffsetSync {
    /// key = topic STRING, partition INT32.
    pub fn key(&self) -> Vec<u8> {
        Writer::new().string(&self.topic).i32(self.partition).0
    }
    /// value = upstream INT64, downstream INT64 (no version).
    pub fn value(&self) -> Vec<u8> {
        Writer::new().i64(self.upstream).i64(self.downstream).0
    }
    /// Decodes a record of the offset-syncs topic.
    pub fn decode(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Self, FormatError> {
        let mut k = Reader::new(key, "OffsetSync", "key")?;
        let mut v = Reader::new(value, "OffsetSync", "value")?;
        Ok(OffsetSync {
            topic: k.string("topic")?,
            partition: k.i32("partition")?,
            upstream: v.i64("upstream offset")?,
            downstream: v.i64("downstream offset")?,
        })
    }
}

/// A checkpoint: consumer group `group` had committed `upstream` on the source, which is
/// `downstream` on `topic` (the target-side name) / `partition` of the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The consumer group.
    pub group: String,
    /// The topic's name on the target.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The group's committed offset on the source.
    pub upstream: i64,
    /// The translated offset on the target.
    pub downstream: i64,
    /// The committed offset's metadata ("" for none).
    pub metadata: String,
}

impl Checkpoint {
    /// key = group STRING, topic STRING, partition INT32.
    pub fn key(&self) -> Vec<u8> {
        Writer::new()
            .string(&self.group)
            .string(&self.topic)
            .i32(self.partition)
            .0
    }
    /// value = version INT16 (0), upstream INT64, downstream INT64, metadata STRING.
    pub fn value(&self) -> Vec<u8> {
        Writer::new()
            .i16(0)
            .i64(self.upstream)
            .i64(self.downstream)
            .string(&self.metadata)
            .0
    }
    /// Decodes a record of a checkpoints topic.
    pub fn decode(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Self, FormatError> {
        let mut k = Reader::new(key, "Checkpoint", "key")?;
        let mut v = Reader::new(value, "Checkpoint", "value")?;
        let group = k.string("group")?;
        let topic = k.string("topic")?;
        let partition = k.i32("partition")?;
        let version = v.i16("version")?;
        if version != 0 {
            return Err(FormatError::Version {
                record: "Checkpoint",
                version,
            });
        }
        Ok(Checkpoint {
            group,
            topic,
            partition,
            upstream: v.i64("upstream offset")?,
            downstream: v.i64("downstream offset")?,
            metadata: v.string("metadata")?,
        })
    }
}

/// A heartbeat from `source_alias` to `target_alias` at `timestamp_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// The source cluster alias.
    pub source_alias: String,
    /// The target cluster alias.
    pub target_alias: String,
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
}

impl Heartbeat {
    /// key = source alias STRING, target alias STRING.
    pub fn key(&self) -> Vec<u8> {
        Writer::new()
            .string(&self.source_alias)
            .string(&self.target_alias)
            .0
    }
    /// value = version INT16 (0), timestamp INT64.
    pub fn value(&self) -> Vec<u8> {
        Writer::new().i16(0).i64(self.timestamp_ms).0
    }
    /// Decodes a record of a heartbeats topic.
    pub fn decode(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Self, FormatError> {
        let mut k = Reader::new(key, "Heartbeat", "key")?;
        let mut v = Reader::new(value, "Heartbeat", "value")?;
        let source_alias = k.string("source alias")?;
        let target_alias = k.string("target alias")?;
        let version = v.i16("version")?;
        if version != 0 {
            return Err(FormatError::Version {
                record: "Heartbeat",
                version,
            });
        }
        Ok(Heartbeat {
            source_alias,
            target_alias,
            timestamp_ms: v.i64("timestamp")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn offset_sync_matches_the_documented_bytes() {
        let sync = OffsetSync {
            topic: "orders".into(),
            partition: 3,
            upstream: 1000,
            downstream: 995,
        };
        assert_eq!(sync.key(), hex("0006 6f7264657273 00000003"));
        assert_eq!(sync.value(), hex("00000000000003e8 00000000000003e3"));
        assert_eq!(
            OffsetSync::decode(Some(&sync.key()), Some(&sync.value())).unwrap(),
            sync
        );
    }

    #[test]
    fn checkpoint_matches_the_documented_bytes() {
        let cp = Checkpoint {
            group: "g1".into(),
            topic: "A.orders".into(),
            partition: 3,
            upstream: 1000,
            downstream: 995,
            metadata: String::new(),
        };
        assert_eq!(cp.key(), hex("0002 6731 0008 412e6f7264657273 00000003"));
        assert_eq!(
            cp.value(),
            hex("0000 00000000000003e8 00000000000003e3 0000")
        );
        assert_eq!(
            Checkpoint::decode(Some(&cp.key()), Some(&cp.value())).unwrap(),
            cp
        );
    }

    #[test]
    fn heartbeat_layout() {
        let hb = Heartbeat {
            source_alias: "a".into(),
            target_alias: "bc".into(),
            timestamp_ms: 1,
        };
        assert_eq!(hb.key(), hex("0001 61 0002 6263"));
        assert_eq!(hb.value(), hex("0000 0000000000000001"));
        assert_eq!(
            Heartbeat::decode(Some(&hb.key()), Some(&hb.value())).unwrap(),
            hb
        );
    }

    #[test]
    fn malformed_records_are_errors_not_panics() {
        assert!(matches!(
            OffsetSync::decode(None, Some(&[])),
            Err(FormatError::Missing { part: "key", .. })
        ));
        let e = OffsetSync::decode(Some(&hex("0006 6f72")), Some(&[0; 16])).unwrap_err();
        assert_eq!(e.to_string(), "truncated OffsetSync key: missing topic");
        let e = OffsetSync::decode(Some(&hex("0001 61 00000001")), Some(&[0; 15])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "truncated OffsetSync value: missing downstream offset"
        );
        assert!(matches!(
            OffsetSync::decode(Some(&hex("ffff")), Some(&[0; 16])),
            Err(FormatError::BadString { .. })
        ));
        assert!(matches!(
            OffsetSync::decode(Some(&hex("0001 ff 00000001")), Some(&[0; 16])),
            Err(FormatError::BadString { .. })
        ));
        let v = hex("0001 0000000000000001");
        assert!(matches!(
            Heartbeat::decode(Some(&hex("0000 0000")), Some(&v)),
            Err(FormatError::Version { version: 1, .. })
        ));
    }

    proptest! {
        #[test]
        fn codecs_round_trip(topic in "\\PC{0,40}", group in "\\PC{0,20}", p in any::<i32>(), up in any::<i64>(), down in any::<i64>(), meta in "\\PC{0,10}") {
            let sync = OffsetSync { topic: topic.clone(), partition: p, upstream: up, downstream: down };
            prop_assert_eq!(OffsetSync::decode(Some(&sync.key()), Some(&sync.value())).unwrap(), sync);
            let cp = Checkpoint { group: group.clone(), topic, partition: p, upstream: up, downstream: down, metadata: meta };
            prop_assert_eq!(Checkpoint::decode(Some(&cp.key()), Some(&cp.value())).unwrap(), cp);
            let hb = Heartbeat { source_alias: group.clone(), target_alias: group, timestamp_ms: up };
            prop_assert_eq!(Heartbeat::decode(Some(&hb.key()), Some(&hb.value())).unwrap(), hb);
        }

        #[test]
        fn decoding_garbage_never_panics(k in proptest::collection::vec(any::<u8>(), 0..40), v in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = OffsetSync::decode(Some(&k), Some(&v));
            let _ = Checkpoint::decode(Some(&k), Some(&v));
            let _ = Heartbeat::decode(Some(&k), Some(&v));
        }
    }
}
