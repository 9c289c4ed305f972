//! A record transform keeping every record: the cost of the component boundary alone (the
//! transform benchmark's baseline).

use kmirror_plugin_sdk::{Config, Configure, Outcome, Record, RecordTransform};

/// Keeps every record.
pub struct PassThrough;

impl Configure for PassThrough {
    fn configure(config: &Config) -> Result<Self, String> {
        config.check_keys("pass-through", &[])?;
        Ok(PassThrough)
    }
}

impl RecordTransform for PassThrough {
    fn transform(&self, _: Record) -> Outcome {
        Outcome::Keep
    }
}

kmirror_plugin_sdk::export_plugin!(record_transform: PassThrough);
