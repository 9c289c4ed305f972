//! MM2's `DefaultConfigPropertyFilter` as a plugin.
//!
//! `config.properties.exclude`: properties never copied (default: MM2's list of
//! replication-throttling, timestamp, unclean-election and min-ISR properties).
//! `use.defaults.from`: `target` (default: keep the target's defaults) or `source`.

use kmirror_plugin_sdk::filter::{CONFIG_PROPERTIES_EXCLUDE_DEFAULT, USE_DEFAULTS_FROM_CONFIG};
use kmirror_plugin_sdk::{Config, ConfigPropertyFilter, Configure, PatternList};

/// Every property except the excluded ones.
pub struct ConfigFilter {
    exclude: PatternList,
    defaults_from_source: bool,
}

impl Configure for ConfigFilter {
    fn configure(config: &Config) -> Result<Self, String> {
        config.check_keys(
            "default-config-filter",
            &["config.properties.exclude", USE_DEFAULTS_FROM_CONFIG],
        )?;
        let list = config
            .get("config.properties.exclude")
            .unwrap_or(CONFIG_PROPERTIES_EXCLUDE_DEFAULT);
        let exclude =
            PatternList::parse(list).map_err(|e| format!("`config.properties.exclude`: {e}"))?;
        let defaults_from_source = match config.get(USE_DEFAULTS_FROM_CONFIG) {
            None | Some("target") => false,
            Some("source") => true,
            Some(other) => {
                return Err(format!(
                    "`{USE_DEFAULTS_FROM_CONFIG}` must be `source` or `target`, got `{other}`"
                ));
            }
        };
        Ok(ConfigFilter {
            exclude,
            defaults_from_source,
        })
    }
}

impl ConfigPropertyFilter for ConfigFilter {
    fn should_replicate_config_property(&self, name: &str) -> bool {
        !self.exclude.matches(name)
    }

    fn should_replicate_source_default(&self, _name: &str) -> bool {
        self.defaults_from_source
    }
}

kmirror_plugin_sdk::export_plugin!(config_property_filter: ConfigFilter);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excludes_mm2_defaults() {
        let f = ConfigFilter::configure(&Config::new()).unwrap();
        assert!(!f.should_replicate_config_property("min.insync.replicas"));
        assert!(f.should_replicate_config_property("retention.ms"));
        assert!(!f.should_replicate_source_default("retention.ms"));
    }
}
