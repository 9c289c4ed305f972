//! json-mask: a record transform masking fields of JSON values.
//!
//! Keys: `fields` (comma-separated dotted paths into the value, e.g. `card.number,email`;
//! an array on the way applies the rest of the path to each of its elements, so
//! `items.email` masks the email of every item) and `mask` (the string that replaces each
//! field's value, default `***`). The value keeps its text — key order, spacing, every
//! other field — except the masked values. A record whose value is not JSON, or has none
//! of the fields, passes unchanged (counted as kept).
//!
//! ```toml
//! record_transforms = [{ plugin = "json_mask.wasm", config = { fields = "card.number,email" } }]
//! ```

use kmirror_plugin_sdk::{Config, Configure, Outcome, Record, RecordTransform};
use serde::de::IgnoredAny;

/// How deep into arrays and objects fields are looked for (the value is otherwise copied).
const MAX_DEPTH: usize = 64;

/// Masks the values at `paths` with `mask`.
pub struct JsonMask {
    paths: Vec<Vec<String>>,
    /// The mask as a JSON string literal.
    mask: Vec<u8>,
}

impl Configure for JsonMask {
    fn configure(config: &Config) -> Result<Self, String> {
        config.check_keys("json-mask", &["fields", "mask"])?;
        if config.get("fields").is_none_or(|f| f.trim().is_empty()) {
            return Err("json-mask: `fields` is required (comma-separated dotted paths)".into());
        }
        let mut paths = Vec::new();
        for field in config.get("fields").unwrap_or_default().split(',') {
            let field = field.trim();
            if field.is_empty() {
                continue;
            }
            let path: Vec<String> = field.split('.').map(str::to_string).collect();
            if path.iter().any(String::is_empty) {
                return Err(format!("json-mask: `fields`: `{field}` has an empty part"));
            }
            paths.push(path);
        }
        let mask = config.get("mask").unwrap_or("***");
        let mask = serde_json::to_vec(mask).map_err(|e| format!("json-mask: `mask`: {e}"))?;
        Ok(JsonMask { paths, mask })
    }
}

impl RecordTransform for JsonMask {
    fn transform(&self, mut record: Record) -> Outcome {
        let Some(value) = &record.value else {
            return Outcome::Keep;
        };
        match self.mask(value) {
            Some(masked) => {
                record.value = Some(masked);
                record.rewritten()
            }
            None => Outcome::Keep,
        }
    }
}

impl JsonMask {
    /// The value with the fields masked; `None` when it is not JSON or has none of them.
    pub fn mask(&self, value: &[u8]) -> Option<Vec<u8>> {
        if self.paths.is_empty() || serde_json::from_slice::<IgnoredAny>(value).is_err() {
            return None;
        }
        let mut scan = Scan {
            bytes: value,
            at: 0,
            paths: &self.paths,
            found: Vec::new(),
        };
        scan.value(&mut Vec::new(), 0);
        if scan.found.is_empty() {
            return None;
        }
        let mut out = Vec::with_capacity(value.len());
        let mut from = 0;
        for (start, end) in scan.found {
            out.extend_from_slice(&value[from..start]);
            out.extend_from_slice(&self.mask);
            from = end;
        }
        out.extend_from_slice(&value[from..]);
        Some(out)
    }
}

/// Walks a valid JSON text, noting the byte ranges of the values at the paths.
struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
    paths: &'a [Vec<String>],
    found: Vec<(usize, usize)>,
}

impl Scan<'_> {
    fn peek(&self) -> u8 {
        self.bytes.get(self.at).copied().unwrap_or(0)
    }

    fn space(&mut self) {
        while matches!(self.peek(), b' ' | b'\t' | b'\n' | b'\r') {
            self.at += 1;
        }
    }

    /// The value at the cursor, whose place is `path`, `depth` arrays and objects deep.
    fn value(&mut self, path: &mut Vec<String>, depth: usize) {
        self.space();
        let start = self.at;
        if !path.is_empty() && self.paths.iter().any(|p| p == path) {
            self.skip();
            self.found.push((start, self.at));
            return;
        }
        let wanted = |path: &Vec<String>| {
            depth < MAX_DEPTH && self.paths.iter().any(|p| p.starts_with(path))
        };
        match self.peek() {
            b'{' if wanted(path) => {
                self.at += 1;
                loop {
                    self.space();
                    if self.peek() == b'}' {
                        self.at += 1;
                        return;
                    }
                    let key_start = self.at;
                    self.string();
                    let key: String =
                        serde_json::from_slice(&self.bytes[key_start..self.at]).unwrap_or_default();
                    self.space();
                    self.at += 1; // ':'
                    path.push(key);
                    if wanted(path) {
                        self.value(path, depth + 1);
                    } else {
                        self.space();
                        self.skip();
                    }
                    path.pop();
                    self.space();
                    if self.peek() == b',' {
                        self.at += 1;
                    }
                }
            }
            b'[' if wanted(path) => {
                self.at += 1;
                loop {
                    self.space();
                    if self.peek() == b']' {
                        self.at += 1;
                        return;
                    }
                    self.value(path, depth + 1);
                    self.space();
                    if self.peek() == b',' {
                        self.at += 1;
                    }
                }
            }
            _ => self.skip(),
        }
    }

    /// Moves past the value at the cursor (iteratively: any depth).
    fn skip(&mut self) {
        let mut open = 0usize;
        loop {
            self.space();
            match self.peek() {
                b'"' => self.string(),
                b'{' | b'[' => {
                    open += 1;
                    self.at += 1;
                    continue;
                }
                b'}' | b']' => {
                    open = open.saturating_sub(1);
                    self.at += 1;
                }
                b',' | b':' if open > 0 => {
                    self.at += 1;
                    continue;
                }
                0 => return,
                _ => {
                    while !matches!(
                        self.peek(),
                        b',' | b'}' | b']' | b':' | b' ' | b'\t' | b'\n' | b'\r' | 0
                    ) {
                        self.at += 1;
                    }
                }
            }
            if open == 0 {
                return;
            }
        }
    }

    /// Moves past the string at the cursor.
    fn string(&mut self) {
        self.at += 1;
        while self.at < self.bytes.len() {
            match self.bytes[self.at] {
                b'\\' => self.at += 2,
                b'"' => {
                    self.at += 1;
                    return;
                }
                _ => self.at += 1,
            }
        }
    }
}

kmirror_plugin_sdk::export_plugin!(record_transform: JsonMask);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_values_are_walked_without_recursion_and_fields_are_required() {
        let deep = format!(
            "{{\"a\": {}1{}, \"email\": \"x\"}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert_eq!(
            mask("email", &deep).map(|v| v.ends_with(r#""email": "***"}"#)),
            Some(true),
            "100,000 levels skipped without recursion"
        );
        let nested = format!(
            "{{\"a\": {}{{\"email\": \"x\"}}{}}}",
            "[".repeat(100),
            "]".repeat(100)
        );
        assert_eq!(
            mask("a.email", &nested),
            None,
            "deeper than looked for: kept"
        );
        let two = format!(
            "{{\"skip\": {}1{}, \"email\": \"x\"}}",
            "[".repeat(100),
            "]".repeat(100)
        );
        assert!(mask("email", &two).unwrap().ends_with(r#""email": "***"}"#));
        let empty: Config = Config::new();
        assert!(
            JsonMask::configure(&empty)
                .err()
                .unwrap()
                .contains("`fields` is required")
        );
    }

    fn mask(fields: &str, value: &str) -> Option<String> {
        let config: Config = [("fields".to_string(), fields.to_string())]
            .into_iter()
            .collect();
        JsonMask::configure(&config)
            .unwrap()
            .mask(value.as_bytes())
            .map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn fields_are_masked_and_everything_else_keeps_its_text() {
        let value = r#"{"id": 7, "card": {"number": "4111 1111", "expiry": "12/29"},"email":"a@b.c", "z": [1, {"email": "x"}]}"#;
        assert_eq!(
            mask("card.number, email", value).unwrap(),
            r#"{"id": 7, "card": {"number": "***", "expiry": "12/29"},"email":"***", "z": [1, {"email": "x"}]}"#
        );
        assert_eq!(
            mask("card", value).unwrap(),
            r#"{"id": 7, "card": "***","email":"a@b.c", "z": [1, {"email": "x"}]}"#,
            "a whole object"
        );
        assert_eq!(
            mask("z.email", value).unwrap(),
            r#"{"id": 7, "card": {"number": "4111 1111", "expiry": "12/29"},"email":"a@b.c", "z": [1, {"email": "***"}]}"#,
            "through an array"
        );
    }

    #[test]
    fn odd_json_is_handled() {
        assert_eq!(
            mask("a.b", r#"{"a":{"b":{"deep":[1,2,{"c":"}"}]},"q":"\"b\""}}"#).unwrap(),
            r#"{"a":{"b":"***","q":"\"b\""}}"#
        );
        assert_eq!(
            mask("k\"x", r#"{"k\"x": 1}"#).unwrap(),
            r#"{"k\"x": "***"}"#,
            "escaped keys"
        );
        assert_eq!(
            mask("a", r#"{"a": null, "a": false}"#).unwrap(),
            r#"{"a": "***", "a": "***"}"#
        );
        assert_eq!(mask("a", "[{\"a\":1.5e3}]").unwrap(), "[{\"a\":\"***\"}]");
        assert_eq!(
            mask("a", "  {\"a\" :  -0.5 }  ").unwrap(),
            "  {\"a\" :  \"***\" }  "
        );
    }

    #[test]
    fn values_that_are_not_json_or_lack_the_fields_pass() {
        assert_eq!(mask("email", "not json {"), None);
        assert_eq!(mask("email", r#"{"other": 1}"#), None);
        assert_eq!(mask("email", "42"), None);
        assert_eq!(mask("email", r#""email""#), None);
    }

    #[test]
    fn the_mask_is_configurable_and_bad_paths_are_refused() {
        let config: Config = [("fields", "a"), ("mask", "<\"hidden\">")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let m = JsonMask::configure(&config).unwrap();
        assert_eq!(m.mask(br#"{"a":1}"#).unwrap(), br#"{"a":"<\"hidden\">"}"#);
        let bad: Config = [("fields".to_string(), "a..b".to_string())]
            .into_iter()
            .collect();
        assert!(
            JsonMask::configure(&bad)
                .err()
                .unwrap()
                .contains("empty part")
        );
    }
}
