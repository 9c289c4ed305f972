//! header-strip: a record transform removing the headers whose names match a regex.
//!
//! Keys: `pattern` (a regex matched against the whole header name; without it nothing is
//! removed). The other headers stay, in their order; a record that had no matching header
//! is kept as it is.
//!
//! ```toml
//! record_transforms = [{ plugin = "header_strip.wasm", config = { pattern = "(traceparent|tracestate|x-b3-.*)" } }]
//! ```

use kmirror_plugin_sdk::{Config, Configure, Outcome, Record, RecordTransform};
use regex::Regex;

/// Removes the headers whose names match `pattern`.
pub struct HeaderStrip {
    pattern: Option<Regex>,
}

impl Configure for HeaderStrip {
    fn configure(config: &Config) -> Result<Self, String> {
        config.check_keys("header-strip", &["pattern"])?;
        let pattern = config
            .get("pattern")
            .map(|p| {
                Regex::new(&format!("^(?:{p})$"))
                    .map_err(|e| format!("header-strip: `pattern`: invalid regex `{p}`: {e}"))
            })
            .transpose()?;
        Ok(HeaderStrip { pattern })
    }
}

impl RecordTransform for HeaderStrip {
    fn transform(&self, mut record: Record) -> Outcome {
        let Some(pattern) = &self.pattern else {
            return Outcome::Keep;
        };
        let before = record.headers.len();
        record.headers.retain(|h| !pattern.is_match(&h.key));
        if record.headers.len() == before {
            Outcome::Keep
        } else {
            record.rewritten()
        }
    }
}

kmirror_plugin_sdk::export_plugin!(record_transform: HeaderStrip);

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_plugin_sdk::Header;

    #[test]
    fn matching_headers_go_and_the_rest_keep_their_order() {
        let config: Config = [("pattern".to_string(), "trace.*|x-b3-.*".to_string())]
            .into_iter()
            .collect();
        let strip = HeaderStrip::configure(&config).unwrap();
        let record = Record {
            value: Some(b"v".to_vec()),
            headers: ["a", "traceparent", "b", "x-b3-spanid", "a", "my-trace"]
                .iter()
                .map(|k| Header::new(*k, Some(k.as_bytes())))
                .collect(),
            ..Record::default()
        };
        match strip.transform(record) {
            Outcome::Rewrite { value, headers, .. } => {
                assert_eq!(value.as_deref(), Some(&b"v"[..]));
                let names: Vec<&str> = headers.iter().map(|h| h.key.as_str()).collect();
                assert_eq!(names, ["a", "b", "a", "my-trace"], "whole names only");
            }
            other => panic!("{other:?}"),
        }
        let untouched = Record {
            headers: vec![Header::new("a", None)],
            ..Record::default()
        };
        assert_eq!(strip.transform(untouched), Outcome::Keep);
    }

    #[test]
    fn an_invalid_regex_is_refused_naming_it() {
        let config: Config = [("pattern".to_string(), "(".to_string())]
            .into_iter()
            .collect();
        let e = HeaderStrip::configure(&config).err().unwrap();
        assert!(e.contains("invalid regex `(`"), "{e}");
    }
}
