//! Parsing a configuration file so that an unknown (misspelled) key does not hide the
//! file's other errors: each unknown key is reported (with the nearest known one, if one is
//! close) and left out, and the rest of the file is read and validated as if it were not
//! there. The file is parsed once into toml's spanned document, so every span reported
//! afterwards still points into the file as written.

use super::model::ConfigFile;
use serde::Deserialize;
use std::ops::Range;
use toml::de::{DeTable, DeValue, Deserializer};

/// An error where the file says it: byte span and message.
pub type Located = (Range<usize>, String);

/// Unknown keys found in one file are reported up to this many (each one found costs a
/// parse of the file).
const MAX_UNKNOWN: usize = 64;

/// The file's model, with every unknown key reported and left out; or the first error
/// that is not an unknown key (a syntax error, a value of the wrong type), after the
/// unknown keys found before it.
pub fn parse(text: &str) -> Result<(ConfigFile, Vec<Located>), Vec<Located>> {
    let mut document = DeTable::parse(text).map_err(|e| vec![located(&e)])?;
    let mut unknown = Vec::new();
    loop {
        match ConfigFile::deserialize(Deserializer::from(document.clone())) {
            Ok(parsed) => return Ok((parsed, unknown)),
            Err(e) => {
                let error = located(&e);
                let is_unknown = e.message().trim().starts_with("unknown field `");
                if is_unknown
                    && unknown.len() < MAX_UNKNOWN
                    && remove_key_at(document.get_mut(), &error.0)
                {
                    unknown.push(error);
                    continue;
                }
                unknown.push(error);
                return Err(unknown);
            }
        }
    }
}

fn located(e: &toml::de::Error) -> Located {
    (e.span().unwrap_or(0..0), did_you_mean(e.message().trim()))
}

/// Removes the entry whose key is at `at` from `table` or any table within it; whether
/// one was.
fn remove_key_at(table: &mut DeTable<'_>, at: &Range<usize>) -> bool {
    let hit = table
        .keys()
        .find(|k| k.span() == *at || k.span().contains(&at.start))
        .cloned();
    if let Some(key) = hit {
        table.remove(&key);
        return true;
    }
    table
        .iter_mut()
        .any(|(_, value)| remove_within(value.get_mut(), at))
}

fn remove_within(value: &mut DeValue<'_>, at: &Range<usize>) -> bool {
    match value {
        DeValue::Table(table) => remove_key_at(table, at),
        DeValue::Array(items) => items
            .iter_mut()
            .any(|item| remove_within(item.get_mut(), at)),
        _ => false,
    }
}

/// serde's "unknown field `x`, expected one of `a`, `b`, ..." as "unknown field `x`; did you
/// mean `a`?" when one known key is close to it (a typo), instead of every key of the
/// table; other messages are returned as they are.
pub fn did_you_mean(message: &str) -> String {
    let Some((head, expected)) = message.split_once(", expected ") else {
        return message.to_string();
    };
    let Some(unknown) = head
        .strip_prefix("unknown field `")
        .and_then(|r| r.strip_suffix('`'))
    else {
        return message.to_string();
    };
    let nearest = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|known| (strsim::damerau_levenshtein(unknown, known), known))
        .min();
    match nearest {
        Some((distance, known)) if distance <= (unknown.len() / 4).max(2) => {
            format!("unknown field `{unknown}`; did you mean `{known}`?")
        }
        _ => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[clusters.primary]
bootstrap_servers = "a:9092"
bootstrap_server = "typo"

[clusters.backup]
bootstrap_servers = "b:9092"

[[flows]]
source = "primary"
target = "backup"
offset_lag_maxx = 5
topic_filter = { builtin = "x", configg = { a = "b" } }

[[flows]]
source = "backup"
target = "primary"
refresh_topic_interval = "5s"
"#;

    #[test]
    fn every_unknown_key_is_reported_where_it_is_and_the_rest_is_read() {
        let (parsed, unknown) = parse(FILE).expect("only unknown keys");
        let mut found: Vec<(&str, &str)> = unknown
            .iter()
            .map(|(at, why)| (&FILE[at.clone()], why.as_str()))
            .collect();
        found.sort();
        let keys: Vec<&str> = found.iter().map(|f| f.0).collect();
        assert_eq!(
            keys,
            [
                "bootstrap_server",
                "configg",
                "offset_lag_maxx",
                "refresh_topic_interval"
            ],
            "{unknown:?}"
        );
        assert!(found[1].1.contains("did you mean `config`?"), "{found:?}");
        assert!(
            found[2].1.contains("did you mean `offset_lag_max`?"),
            "{found:?}"
        );
        assert_eq!(parsed.flows.len(), 2, "the flows are read on");
        assert_eq!(parsed.clusters.len(), 2);
    }

    #[test]
    fn an_error_that_is_not_an_unknown_key_ends_the_parse_after_those_found_before_it() {
        let text = "[clusters.a]\nbootstrap_server = \"x\"\nbootstrap_servers = 5\n";
        let errors = parse(text).expect_err("a wrong type");
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert_eq!(&text[errors[0].0.clone()], "bootstrap_server");
        assert!(errors[1].1.contains("string"), "{errors:?}");
        let syntax = parse("[clusters.a\n").expect_err("syntax");
        assert_eq!(syntax.len(), 1);
    }
}
