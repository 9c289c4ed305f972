//! A role's configuration: ordered string key/value pairs.

use std::fmt;

/// A role's configuration, as the WIT contract passes it: ordered key/value pairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    entries: Vec<(String, String)>,
}

impl Config {
    /// An empty configuration: every key takes its default.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of `key`; the last one wins when a key is given twice.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// All entries in the order they were given.
    pub fn entries(&self) -> &[(String, String)] {
        &self.entries
    }

    /// Fails with a message naming the first key that is not in `known` (and listing the
    /// known keys), so a typo in a key is an error rather than a silently ignored setting.
    pub fn check_keys(&self, role: &str, known: &[&str]) -> Result<(), String> {
        match self
            .entries
            .iter()
            .find(|(k, _)| !known.contains(&k.as_str()))
        {
            None => Ok(()),
            Some((key, _)) if known.is_empty() => Err(format!(
                "unknown key `{key}` for {role}: it takes no configuration"
            )),
            Some((key, _)) => Err(format!(
                "unknown key `{key}` for {role}; known keys: {}",
                known.join(", ")
            )),
        }
    }

    /// A boolean value of `key` (`true`/`false`, any case), or `default` when absent.
    pub fn get_bool(&self, key: &str, default: bool) -> Result<bool, String> {
        match self.get(key) {
            None => Ok(default),
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
            Some(v) => Err(format!("`{key}` must be true or false, got `{v}`")),
        }
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Config {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Config {
            entries: iter
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }
}

impl From<Vec<(String, String)>> for Config {
    fn from(entries: Vec<(String, String)>) -> Self {
        Config { entries }
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, v)) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

/// Builds a role implementation from its configuration (MM2's `Configurable`).
pub trait Configure: Sized {
    /// Builds the role from `config`, or explains what is wrong with it.
    fn configure(config: &Config) -> Result<Self, String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_value_wins_and_unknown_keys_are_named() {
        let c: Config = [("a", "1"), ("b", "2"), ("a", "3")].into_iter().collect();
        assert_eq!(c.get("a"), Some("3"));
        assert_eq!(c.get("z"), None);
        let err = c.check_keys("my-role", &["a"]).unwrap_err();
        assert!(err.contains("`b`") && err.contains("my-role") && err.contains("known keys: a"));
        assert!(c.check_keys("r", &["a", "b"]).is_ok());
        let err = c.check_keys("bare", &[]).unwrap_err();
        assert!(err.contains("takes no configuration"), "{err}");
    }

    #[test]
    fn booleans_are_strict() {
        let c: Config = [("x", "TRUE"), ("y", "no")].into_iter().collect();
        assert_eq!(c.get_bool("x", false), Ok(true));
        assert_eq!(c.get_bool("missing", true), Ok(true));
        assert!(c.get_bool("y", true).unwrap_err().contains("`y`"));
    }
}
