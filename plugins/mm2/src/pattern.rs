//! MM2's regex lists: comma-separated patterns, each matching the whole name.

use regex::Regex;

/// A comma-separated list of regular expressions, as MM2's `topics`, `groups` and
/// `*.exclude` settings take them. A name matches when one pattern matches the *whole*
/// name. An empty (or blank) list matches nothing, as in MM2.
#[derive(Debug, Clone)]
pub struct PatternList {
    source: String,
    regex: Option<Regex>,
}

impl PatternList {
    /// Compiles `list`; the error names the offending list and the regex problem.
    pub fn parse(list: &str) -> Result<Self, String> {
        let parts: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect();
        let regex = if parts.is_empty() {
            None
        } else {
            let joined = parts
                .iter()
                .map(|p| format!("(?:{p})"))
                .collect::<Vec<_>>()
                .join("|");
            let anchored = format!("^(?:{joined})$");
            Some(Regex::new(&anchored).map_err(|e| format!("invalid regex list `{list}`: {e}"))?)
        };
        Ok(PatternList {
            source: list.to_string(),
            regex,
        })
    }

    /// Whether one of the patterns matches the whole of `name`.
    pub fn matches(&self, name: &str) -> bool {
        self.regex.as_ref().is_some_and(|r| r.is_match(name))
    }

    /// The list as it was given.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_name_match() {
        let p = PatternList::parse("orders.*, payments").unwrap();
        assert!(p.matches("orders"));
        assert!(p.matches("orders-eu"));
        assert!(p.matches("payments"));
        assert!(!p.matches("payments2"));
        assert!(!p.matches("my-orders"));
    }

    #[test]
    fn alternation_inside_a_pattern_stays_anchored() {
        let p = PatternList::parse("a|b").unwrap();
        assert!(p.matches("a") && p.matches("b"));
        assert!(!p.matches("ab") && !p.matches("xa"));
    }

    #[test]
    fn empty_list_matches_nothing() {
        for list in ["", " ", " , "] {
            let p = PatternList::parse(list).unwrap();
            assert!(!p.matches(""));
            assert!(!p.matches("anything"));
        }
    }

    #[test]
    fn invalid_regex_is_named() {
        let err = PatternList::parse("ok, (broken").unwrap_err();
        assert!(err.contains("(broken"), "{err}");
    }
}
