//! A record transform that misbehaves on purpose, as `mode` says: `trap-on` panics on a
//! record whose value contains `needle` (and keeps the others), `short` answers one outcome
//! fewer than asked, `huge` rewrites a record whose value contains `needle` into 9 MiB,
//! `spin-on` loops forever on such a record. Tests of the host's limits use it.

use kmirror_plugin_sdk::{Config, Configure, Outcome, Record, RecordTransform};

/// What goes wrong.
pub struct BadTransform {
    mode: String,
    needle: Vec<u8>,
}

impl Configure for BadTransform {
    fn configure(config: &Config) -> Result<Self, String> {
        config.check_keys("bad-transform", &["mode", "needle"])?;
        Ok(BadTransform {
            mode: config.get("mode").unwrap_or("keep").to_string(),
            needle: config.get("needle").unwrap_or("poison").as_bytes().to_vec(),
        })
    }
}

impl BadTransform {
    fn hit(&self, record: &Record) -> bool {
        record.value.as_deref().is_some_and(|v| {
            v.windows(self.needle.len())
                .any(|w| w == self.needle.as_slice())
        })
    }
}

impl RecordTransform for BadTransform {
    fn transform(&self, record: Record) -> Outcome {
        match self.mode.as_str() {
            "trap-on" if self.hit(&record) => panic!("bad-transform: a poison record"),
            "spin-on" if self.hit(&record) => {
                let mut n = 0u64;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "huge" if self.hit(&record) => Outcome::Rewrite {
                key: None,
                value: Some(vec![b'x'; 9 << 20]),
                headers: Vec::new(),
            },
            _ => Outcome::Keep,
        }
    }

    fn transform_batch(&self, records: Vec<Record>) -> Vec<Outcome> {
        let mut outcomes: Vec<Outcome> = records.into_iter().map(|r| self.transform(r)).collect();
        if self.mode == "short" {
            outcomes.pop();
        }
        outcomes
    }
}

kmirror_plugin_sdk::export_plugin!(record_transform: BadTransform);
