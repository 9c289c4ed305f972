//! Configuration errors: each names the file, line, column and key.

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

/// One problem, located in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The config file.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// The key, as a dotted path (`flows[0].source`).
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}: {}",
            self.file.display(),
            self.line,
            self.column,
            self.key,
            self.message
        )
    }
}

/// Every problem found in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Collects located errors while a configuration is validated: byte spans of the file
/// become line and column.
pub(super) struct Validator<'a> {
    text: &'a str,
    file: PathBuf,
    pub(super) errors: Vec<ConfigError>,
}

impl<'a> Validator<'a> {
    /// A validator of `text`, read from `file`.
    pub(super) fn new(text: &'a str, file: PathBuf) -> Self {
        Validator {
            text,
            file,
            errors: Vec::new(),
        }
    }

    /// Records `message` about `key`, written at `span`.
    pub(super) fn error(&mut self, span: Range<usize>, key: &str, message: &str) {
        let before = &self.text[..span.start.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        self.errors.push(ConfigError {
            file: self.file.clone(),
            line,
            column,
            key: key.to_string(),
            message: message.to_string(),
        });
    }

    /// Where `key = ...` is written in the table that starts at `table.start` (up to the
    /// next table header); `table` itself if the key is not written there.
    pub(super) fn key_span(&self, table: Range<usize>, key: &str) -> Range<usize> {
        let start = table.start.min(self.text.len());
        let mut offset = start;
        for (i, line) in self.text[start..].split_inclusive('\n').enumerate() {
            let trimmed = line.trim_start();
            if i > 0 && trimmed.starts_with('[') {
                break;
            }
            let bare = trimmed.strip_prefix(key);
            let quoted = trimmed
                .strip_prefix('"')
                .and_then(|t| t.strip_prefix(key))
                .and_then(|t| t.strip_prefix('"'));
            if let Some(rest) = bare.or(quoted)
                && rest.trim_start().starts_with('=')
            {
                let at = offset + (line.len() - trimmed.len());
                return at..at + key.len();
            }
            offset += line.len();
        }
        table
    }

    /// Where the table with `header` starts (the file's start if it has none).
    pub(super) fn table_start(&self, header: &str) -> Range<usize> {
        let at = self
            .text
            .match_indices(header)
            .find(|(i, _)| *i == 0 || self.text[..*i].ends_with('\n'))
            .map_or(0, |(i, _)| i);
        at..at
    }
}
