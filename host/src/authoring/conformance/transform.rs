//! The record-transform checks: over a corpus of records (JSON and plain values, binary
//! bytes, tombstones, null keys, repeated and valueless headers, a large value, several
//! topics and partitions) the transform gives one outcome per record (the host refuses any
//! other answer, and a rewritten record over the size bound), the same outcomes twice,
//! each record alone the outcome it got in the batch, and nothing for an empty batch.

use super::Run;
use crate::policy::{Outcome, RecordIn, RecordTransform};

/// A record of the corpus, owning its bytes.
struct Sample {
    topic: &'static str,
    partition: i32,
    offset: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(&'static str, Option<Vec<u8>>)>,
}

fn samples() -> Vec<Sample> {
    let json = br#"{"card":{"number":"4111 1111 1111 1111","expiry":"12/29"},"email":"ada@example.com","amount":42.5,"items":[1,2,3]}"#;
    let sample =
        |topic, partition, offset, key: Option<&[u8]>, value: Option<&[u8]>, headers| Sample {
            topic,
            partition,
            offset,
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            headers,
        };
    vec![
        sample("orders", 0, 0, Some(b"k1"), Some(json), vec![]),
        sample(
            "orders",
            0,
            1,
            Some(b"k2"),
            Some(b"plain text, not JSON"),
            vec![
                ("trace-id", Some(b"abc-123".to_vec())),
                ("internal", Some(b"true".to_vec())),
            ],
        ),
        sample(
            "orders",
            1,
            7,
            None,
            Some(&[0, 159, 146, 150, 255]),
            vec![("empty", None)],
        ),
        sample("orders", 1, 8, Some(b"tombstone"), None, vec![]),
        sample(
            "payments.eu",
            2,
            1_000_000,
            Some(b""),
            Some(b"{}"),
            vec![
                ("dup", Some(b"1".to_vec())),
                ("dup", Some(b"2".to_vec())),
                ("internal", Some(b"false".to_vec())),
            ],
        ),
        sample("a.b.c", 0, 3, None, None, vec![]),
        sample(
            "large",
            0,
            0,
            Some(b"big"),
            Some(&vec![b'x'; 16 << 10]),
            vec![],
        ),
        sample(
            "orders",
            0,
            2,
            Some(b"k3"),
            Some(br#"[{"email":"x@y"},"not an object",null,true]"#),
            vec![("content-type", Some(b"application/json".to_vec()))],
        ),
    ]
}

fn view(s: &Sample) -> RecordIn<'_> {
    RecordIn {
        topic: s.topic,
        partition: s.partition,
        offset: s.offset,
        timestamp: 1_700_000_000_000 + s.offset,
        key: s.key.as_deref(),
        value: s.value.as_deref(),
        headers: s.headers.iter().map(|(k, v)| (*k, v.as_deref())).collect(),
    }
}

fn describe(r: &RecordIn<'_>) -> String {
    format!("{}[{}]@{}", r.topic, r.partition, r.offset)
}

impl Run {
    pub(super) fn transform(&mut self, t: &dyn RecordTransform) {
        let samples = samples();
        let records: Vec<RecordIn<'_>> = samples.iter().map(view).collect();
        let input = format!("a batch of {} records", records.len());
        let batch = t.transform(&records);
        let outcome = batch.as_ref().map(drop).map_err(|e| e.to_string());
        self.case(
            "one outcome per record, each within bounds",
            input.clone(),
            outcome,
        );
        self.twice(input, || t.transform(&records));
        let empty = t.transform(&[]);
        self.expect(
            "an empty batch gives no outcome",
            "[]".into(),
            empty,
            Vec::new(),
        );
        let Ok(batch) = batch else {
            return;
        };
        for (record, in_batch) in records.iter().zip(&batch) {
            let alone = t.transform(std::slice::from_ref(record));
            let expected: Vec<Outcome> = vec![in_batch.clone()];
            self.expect(
                "a record alone gets its batch outcome",
                describe(record),
                alone,
                expected,
            );
        }
    }
}
