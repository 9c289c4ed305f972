//! Records as JSON for the authoring tools (`plugin test --input records.jsonl`, `plugin eval
//! FILE transform RECORD...`), one object per record:
//!
//! ```json
//! {"topic": "orders", "partition": 0, "offset": 7, "timestamp": 1700000000000,
//!  "key": "k1", "value": "{\"email\": \"ada@example.com\"}",
//!  "headers": [["trace-id", "abc"], ["internal", "true"], ["flag", null]]}
//! ```
//!
//! Every field may be left out (topic `records`, partition 0, offsets counting from 0,
//! timestamp 0, no key, no value, no headers). A key, a value or a header value is a string
//! (its UTF-8 bytes), `null`, or `{"base64": "..."}` for any bytes; outcomes show bytes the
//! same way (text when they are UTF-8).

use crate::policy::{Outcome, RecordIn};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_json::{Value, json};

/// Bytes as JSON: text, `null`, or base64.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(untagged)]
enum Bytes {
    #[default]
    Null,
    Text(String),
    Base64 {
        base64: String,
    },
}

impl Bytes {
    fn decode(self, what: &str) -> Result<Option<Vec<u8>>, String> {
        match self {
            Bytes::Null => Ok(None),
            Bytes::Text(s) => Ok(Some(s.into_bytes())),
            Bytes::Base64 { base64 } => STANDARD
                .decode(base64)
                .map(Some)
                .map_err(|e| format!("{what}: invalid base64: {e}")),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordJson {
    #[serde(default)]
    topic: Option<String>,
    #[serde(default)]
    partition: i32,
    #[serde(default)]
    offset: Option<i64>,
    #[serde(default)]
    timestamp: i64,
    #[serde(default)]
    key: Bytes,
    #[serde(default)]
    value: Bytes,
    #[serde(default)]
    headers: Vec<(String, Bytes)>,
}

/// A record read from JSON, owning its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedRecord {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The offset.
    pub offset: i64,
    /// The timestamp.
    pub timestamp: i64,
    /// The key.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Option<Vec<u8>>,
    /// The headers.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl OwnedRecord {
    /// The record as a transform sees it.
    pub fn view(&self) -> RecordIn<'_> {
        RecordIn {
            topic: &self.topic,
            partition: self.partition,
            offset: self.offset,
            timestamp: self.timestamp,
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            headers: self
                .headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_deref()))
                .collect(),
        }
    }

    /// How it is named in a table: `topic[partition]@offset`.
    pub fn name(&self) -> String {
        format!("{}[{}]@{}", self.topic, self.partition, self.offset)
    }
}

/// Parses one JSON record; `offset` is used when it gives none.
pub fn parse(text: &str, offset: i64) -> Result<OwnedRecord, String> {
    let r: RecordJson = serde_json::from_str(text).map_err(|e| format!("not a record: {e}"))?;
    let headers = r
        .headers
        .into_iter()
        .map(|(k, v)| {
            let value = v.decode(&format!("header {k}"))?;
            Ok((k, value))
        })
        .collect::<Result<_, String>>()?;
    Ok(OwnedRecord {
        topic: r.topic.unwrap_or_else(|| "records".into()),
        partition: r.partition,
        offset: r.offset.unwrap_or(offset),
        timestamp: r.timestamp,
        key: r.key.decode("key")?,
        value: r.value.decode("value")?,
        headers,
    })
}

/// Bytes as JSON: text when they are UTF-8, else base64.
pub fn bytes_json(bytes: Option<&[u8]>) -> Value {
    match bytes {
        None => Value::Null,
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) => Value::String(s.to_string()),
            Err(_) => json!({ "base64": STANDARD.encode(b) }),
        },
    }
}

/// What became of `record`, as JSON: `outcome` and, when kept or rewritten, the record's
/// key, value and headers as mirrored.
pub fn outcome_json(record: &OwnedRecord, outcome: &Outcome) -> Value {
    let headers = |h: Vec<(&str, Option<&[u8]>)>| -> Value {
        h.into_iter()
            .map(|(k, v)| json!([k, bytes_json(v)]))
            .collect()
    };
    let view = record.view();
    match outcome {
        Outcome::Drop => json!({ "name": record.name(), "outcome": "drop" }),
        Outcome::Keep => json!({
            "name": record.name(),
            "outcome": "keep",
            "key": bytes_json(view.key),
            "value": bytes_json(view.value),
            "headers": headers(view.headers),
        }),
        Outcome::Rewrite(r) => {
            let new = r.over(&view);
            json!({
                "name": record.name(),
                "outcome": "rewrite",
                "key": bytes_json(new.key),
                "value": bytes_json(new.value),
                "headers": headers(new.headers),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Rewritten;

    #[test]
    fn records_read_with_defaults_text_and_base64() {
        let r = parse(
            r#"{"value": "hi", "key": {"base64": "AP8="}, "headers": [["a", "1"], ["b", null]]}"#,
            4,
        )
        .unwrap();
        assert_eq!(r.topic, "records");
        assert_eq!((r.partition, r.offset, r.timestamp), (0, 4, 0));
        assert_eq!(r.key.as_deref(), Some(&[0u8, 255][..]));
        assert_eq!(r.value.as_deref(), Some(&b"hi"[..]));
        assert_eq!(
            r.headers,
            vec![
                ("a".to_string(), Some(b"1".to_vec())),
                ("b".to_string(), None)
            ]
        );
        assert!(
            parse(r#"{"valu": "x"}"#, 0)
                .unwrap_err()
                .contains("unknown field")
        );
        assert!(
            parse(r#"{"key": {"base64": "!!"}}"#, 0)
                .unwrap_err()
                .contains("key: invalid base64")
        );
    }

    #[test]
    fn outcomes_show_what_is_mirrored() {
        let r = parse(r#"{"topic": "t", "offset": 3, "value": "v"}"#, 0).unwrap();
        assert_eq!(
            outcome_json(&r, &Outcome::Drop),
            json!({"name": "t[0]@3", "outcome": "drop"})
        );
        let rewritten = Outcome::Rewrite(Rewritten {
            key: Some(vec![0xff]),
            value: Some(b"w".to_vec()),
            headers: vec![("h".into(), None)],
        });
        assert_eq!(
            outcome_json(&r, &rewritten),
            json!({"name": "t[0]@3", "outcome": "rewrite", "key": {"base64": "/w=="}, "value": "w", "headers": [["h", null]]})
        );
    }
}
