//! drop-by-header: a record transform dropping every record that carries a header.
//!
//! Keys: `header` (a header name; without it every record is kept) and `value` (optional:
//! only a header with exactly this value, as UTF-8, drops the record).
//!
//! ```toml
//! record_transforms = [{ plugin = "drop_by_header.wasm", config = { header = "internal", value = "true" } }]
//! ```

use kmirror_plugin_sdk::{Config, Configure, Outcome, Record, RecordTransform};

/// Drops the records carrying `header` (with `value`, if given).
pub struct DropByHeader {
    header: Option<String>,
    value: Option<Vec<u8>>,
}

impl Configure for DropByHeader {
    fn configure(config: &Config) -> Result<Self, String> {
        config.check_keys("drop-by-header", &["header", "value"])?;
        let header = config.get("header").map(str::to_string);
        if header.as_deref() == Some("") {
            return Err("drop-by-header: `header` is empty".into());
        }
        let value = config.get("value").map(|v| v.as_bytes().to_vec());
        if value.is_some() && header.is_none() {
            return Err("drop-by-header: `value` needs `header`".into());
        }
        Ok(DropByHeader { header, value })
    }
}

impl RecordTransform for DropByHeader {
    fn transform(&self, record: Record) -> Outcome {
        let Some(name) = &self.header else {
            return Outcome::Keep;
        };
        let carries = record.headers.iter().any(|h| {
            h.key == *name
                && self
                    .value
                    .as_ref()
                    .is_none_or(|v| h.value.as_deref() == Some(v.as_slice()))
        });
        if carries {
            Outcome::Drop
        } else {
            Outcome::Keep
        }
    }
}

kmirror_plugin_sdk::export_plugin!(record_transform: DropByHeader);

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_plugin_sdk::Header;

    fn with(headers: &[(&str, Option<&str>)]) -> Record {
        Record {
            headers: headers
                .iter()
                .map(|(k, v)| Header::new(*k, v.map(str::as_bytes)))
                .collect(),
            ..Record::default()
        }
    }

    fn configured(pairs: &[(&str, &str)]) -> Result<DropByHeader, String> {
        let config: Config = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        DropByHeader::configure(&config)
    }

    #[test]
    fn drops_by_name_or_by_name_and_value() {
        let any = configured(&[("header", "internal")]).unwrap();
        assert_eq!(any.transform(with(&[("internal", None)])), Outcome::Drop);
        assert_eq!(
            any.transform(with(&[("a", Some("1")), ("internal", Some("no"))])),
            Outcome::Drop
        );
        assert_eq!(
            any.transform(with(&[("internals", Some("1"))])),
            Outcome::Keep
        );
        let exact = configured(&[("header", "internal"), ("value", "true")]).unwrap();
        assert_eq!(
            exact.transform(with(&[("internal", Some("true"))])),
            Outcome::Drop
        );
        assert_eq!(
            exact.transform(with(&[("internal", Some("false"))])),
            Outcome::Keep
        );
        assert_eq!(exact.transform(with(&[("internal", None)])), Outcome::Keep);
        let none = configured(&[]).unwrap();
        assert_eq!(
            none.transform(with(&[("internal", Some("true"))])),
            Outcome::Keep
        );
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert!(
            configured(&[("value", "x")])
                .err()
                .unwrap()
                .contains("`value` needs `header`")
        );
        assert!(configured(&[("header", "")]).is_err());
        assert!(
            configured(&[("headr", "x")])
                .err()
                .unwrap()
                .contains("headr")
        );
    }
}
