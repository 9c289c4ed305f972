//! The configuration reference (`docs/configuration-reference.md`), generated from the
//! configuration model itself: every key of every table with its type, default, allowed
//! values, meaning and the MirrorMaker 2 property it corresponds to. Keys, types and
//! meanings are read from `model.rs` (its fields and their doc comments), the defaults
//! from the model parsed with nothing set, and the key lists are checked against what the
//! parser accepts. The tests fail when the committed page differs from what the model
//! says (a key added, renamed or documented anew): `KMIRROR_BLESS=1 cargo test -p kmirror
//! --lib config::reference` writes it again.

use super::model::ConfigFile;
use std::collections::BTreeMap;

/// The model's source, read as text.
const MODEL: &str = include_str!("model.rs");

/// The tables of the file, in the order the page shows them: (struct, heading, what it is).
const TABLES: [(&str, &str, &str); 6] = [
    ("ConfigFile", "The file", "The top level of `kmirror.toml`."),
    (
        "ClusterConfig",
        "`[clusters.<alias>]`",
        "One table per cluster; the alias is what replication policies see (`primary.orders`).",
    ),
    (
        "FlowConfig",
        "`[[flows]]`",
        "One table per source → target flow.",
    ),
    (
        "SlotConfig",
        "Plugin slots",
        "`topic_filter`, `group_filter`, `replication_policy`, `config_property_filter` and each entry of `record_transforms`: `{ builtin = NAME }` or `{ plugin = FILE }`, with an optional `config`.",
    ),
    (
        "PluginsConfig",
        "`[plugins]`",
        "Where plugins live and how they are limited.",
    ),
    ("StatusConfig", "`[status]`", "The HTTP status endpoint."),
];

/// One field of a struct of the model.
#[derive(Debug, Clone, PartialEq)]
struct Field {
    name: String,
    rust_type: String,
    doc: String,
    /// Whether a file may leave it out (`#[serde(default ...)]`).
    optional: bool,
}

/// The fields of `pub struct <name>` in the model's source, with their doc comments.
fn fields(name: &str) -> Vec<Field> {
    let start = format!("pub struct {name} {{");
    let mut lines = MODEL.lines().skip_while(|l| !l.starts_with(&start)).skip(1);
    let (mut out, mut doc, mut optional) = (Vec::new(), Vec::new(), false);
    // An attribute rustfmt split over lines, until its `)]`.
    let mut attribute: Option<String> = None;
    for line in lines.by_ref() {
        let line = line.trim();
        if line == "}" {
            break;
        }
        if let Some(mut open) = attribute.take() {
            open.push_str(line);
            if line.ends_with(")]") {
                optional |= open.starts_with("#[serde(") && open.contains("default");
            } else {
                attribute = Some(open);
            }
        } else if let Some(text) = line.strip_prefix("///") {
            doc.push(text.trim().to_string());
        } else if line.starts_with("#[") {
            if line.ends_with(")]") || line.ends_with(']') && !line.ends_with("(]") {
                optional |= line.starts_with("#[serde(") && line.contains("default");
            } else {
                attribute = Some(line.to_string());
            }
        } else if let Some(rest) = line.strip_prefix("pub ") {
            let (field, rust_type) = rest.split_once(':').expect("a field");
            out.push(Field {
                name: field.trim().to_string(),
                rust_type: rust_type.trim().trim_end_matches(',').to_string(),
                doc: std::mem::take(&mut doc).join(" "),
                // serde's derive reads a missing `Option` as `None`.
                optional: std::mem::take(&mut optional) || rust_type.trim().starts_with("Option<"),
            });
        }
    }
    out
}

/// The variants of `pub enum <name>`, as the file spells them (lowercase).
fn variants(name: &str) -> Vec<String> {
    let start = format!("pub enum {name} {{");
    MODEL
        .lines()
        .skip_while(|l| !l.starts_with(&start))
        .skip(1)
        .take_while(|l| l.trim() != "}")
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with("///") && l.ends_with(','))
        .map(|l| l.trim_end_matches(',').to_lowercase())
        .collect()
}

/// The enum a type alias of the model stands for (`OnTransformError = OnUnproducible`).
fn aliased(name: &str) -> String {
    let start = format!("pub type {name} = ");
    MODEL
        .lines()
        .find_map(|l| l.strip_prefix(&start))
        .map_or(name.to_string(), |t| t.trim_end_matches(';').to_string())
}

/// The type as a user writes it.
fn toml_type(rust: &str) -> String {
    for (table, written) in [
        (
            "BTreeMap<String, Spanned<ClusterConfig>>",
            "tables `[clusters.<alias>]`",
        ),
        ("Vec<Spanned<FlowConfig>>", "array of tables `[[flows]]`"),
        ("PluginsConfig", "table `[plugins]`"),
        ("StatusConfig", "table `[status]`"),
    ] {
        if rust == table {
            return written.into();
        }
    }
    let inner = |t: &str, wrapper: &str| {
        t.strip_prefix(wrapper)
            .and_then(|r| r.strip_suffix('>'))
            .map(str::to_string)
    };
    if let Some(t) = inner(rust, "Option<") {
        return toml_type(&t);
    }
    if let Some(t) = inner(rust, "Spanned<") {
        return toml_type(&t);
    }
    if let Some(t) = inner(rust, "Vec<") {
        return format!("array of {}", toml_type(&t));
    }
    if let Some(t) = inner(rust, "BTreeMap<String, ") {
        return format!("table of {}", toml_type(&t));
    }
    match rust {
        "String" => "string".into(),
        "PathBuf" => "path".into(),
        "bool" => "boolean".into(),
        "u64" | "u32" | "i32" | "usize" => "integer".into(),
        "Duration" => "duration (`\"500ms\"`, `\"5s\"`, `\"10m\"`)".into(),
        "SlotConfig" => "plugin slot".into(),
        other => {
            let values = variants(&aliased(other));
            assert!(
                !values.is_empty(),
                "a type the reference does not know: {other}"
            );
            values
                .iter()
                .map(|v| format!("`\"{v}\"`"))
                .collect::<Vec<_>>()
                .join(" \\| ")
        }
    }
}

/// The MM2 property a doc comment names (`MM2: `x``, or `MM2's `x``), if any.
fn mm2(doc: &str) -> Option<String> {
    ["MM2: `", "MM2's `"].iter().find_map(|m| {
        let (_, rest) = doc.split_once(m)?;
        let (key, after) = rest.split_once('`')?;
        // `(with `topics`, `topics.exclude`)` belongs to it.
        let with = after
            .trim_start()
            .strip_prefix("(with ")
            .and_then(|w| w.split_once(')'))
            .map(|(w, _)| format!(" (with {w})"))
            .unwrap_or_default();
        Some(format!("`{key}`{with}"))
    })
}

/// The meaning: the doc comment without its MM2 sentence.
fn meaning(doc: &str) -> String {
    let cut = doc.find(" MM2: `").unwrap_or(doc.len());
    doc[..cut].trim().replace('|', "\\|")
}

/// Every key's default: the model parsed with only what is required set.
fn defaults() -> BTreeMap<(String, String), String> {
    let text =
        "[clusters.a]\nbootstrap_servers = \"x\"\n[[flows]]\nsource = \"a\"\ntarget = \"a\"\n";
    let parsed: ConfigFile = toml::from_str(text).expect("the minimal file");
    let value = toml::Value::try_from(&parsed).expect("serialize the model");
    let mut out = BTreeMap::new();
    let mut put = |table: &str, v: Option<&toml::Value>| {
        for (k, v) in v.and_then(toml::Value::as_table).into_iter().flatten() {
            out.insert((table.to_string(), k.clone()), render(v));
        }
    };
    put("PluginsConfig", value.get("plugins"));
    put("StatusConfig", value.get("status"));
    put(
        "ClusterConfig",
        value.get("clusters").and_then(|c| c.get("a")),
    );
    put(
        "FlowConfig",
        value
            .get("flows")
            .and_then(|f| f.as_array())
            .and_then(|f| f.first()),
    );
    out
}

fn render(v: &toml::Value) -> String {
    match v {
        toml::Value::Array(a) if a.is_empty() => "`[]` (none)".into(),
        toml::Value::Table(t) if t.is_empty() => "`{}` (none)".into(),
        other => format!("`{other}`"),
    }
}

/// The page.
fn page() -> String {
    let defaults = defaults();
    let mut out = String::from(
        "<!-- Generated from host/src/config/model.rs by the tests of host/src/config/reference.rs: do not edit by hand. KMIRROR_BLESS=1 cargo test -p kmirror --lib config::reference writes it again. -->\n\n# Configuration reference\n\nEvery key of `kmirror.toml`, generated from kmirror's configuration model, so it lists exactly what `kmirror validate` accepts. *Required* keys have no default; a key left out takes its default. Durations are written as `\"500ms\"`, `\"5s\"`, `\"10m\"`. Values of `librdkafka` tables and of a slot's `config` may use `${ENV_VAR}`. An unknown key is refused with the nearest known one. For what the settings do together, see [Configuration](configuration.md); for MM2's properties, [Migrating from MM2](migrating-from-mm2.md).\n",
    );
    for (name, heading, what) in TABLES {
        out.push_str(&format!("\n## {heading}\n\n{what}\n\n| Key | Type | Default | MM2 | Meaning |\n|---|---|---|---|---|\n"));
        for f in fields(name) {
            let default = if f.optional {
                defaults
                    .get(&(name.to_string(), f.name.clone()))
                    .cloned()
                    .unwrap_or_else(|| "—".into())
            } else {
                "*required*".into()
            };
            let cell = |text: String| text.replace('|', "\\|").replace("\\\\|", "\\|");
            out.push_str(&format!(
                "| `{}` | {} | {} | {} | {} |\n",
                f.name,
                toml_type(&f.rust_type),
                cell(default),
                cell(mm2(&f.doc).unwrap_or_else(|| "—".into())),
                meaning(&f.doc)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/configuration-reference.md"
    );

    /// The keys the parser accepts in a table: the "expected one of" of an unknown key's
    /// error, for a file whose `probe` table holds one.
    fn accepted(probe: &str) -> Vec<String> {
        let e = toml::from_str::<ConfigFile>(probe).expect_err("an unknown key");
        let message = e.message().to_string();
        let (_, expected) = message
            .split_once("expected one of ")
            .or_else(|| message.split_once("expected "))
            .unwrap_or_else(|| panic!("{message}"));
        let mut keys: Vec<String> = expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect();
        keys.sort();
        keys
    }

    #[test]
    fn the_reference_lists_exactly_the_keys_the_parser_accepts_each_documented() {
        let base = "[clusters.a]\nbootstrap_servers = \"x\"\n";
        let flow = "[[flows]]\nsource = \"a\"\ntarget = \"a\"\n";
        let probes = [
            ("ConfigFile", "zz_unknown = 1\n".to_string()),
            (
                "ClusterConfig",
                "[clusters.a]\nbootstrap_servers = \"x\"\nzz_unknown = 1\n".to_string(),
            ),
            ("FlowConfig", format!("{base}{flow}zz_unknown = 1\n")),
            (
                "SlotConfig",
                format!("{base}{flow}topic_filter = {{ zz_unknown = 1 }}\n"),
            ),
            (
                "PluginsConfig",
                format!("{base}[plugins]\nzz_unknown = 1\n"),
            ),
            ("StatusConfig", format!("{base}[status]\nzz_unknown = 1\n")),
        ];
        for (name, probe) in probes {
            let mut documented: Vec<String> = fields(name).into_iter().map(|f| f.name).collect();
            documented.sort();
            assert_eq!(
                documented,
                accepted(&probe),
                "{name}: the model's source and its parser disagree"
            );
            for f in fields(name) {
                assert!(
                    f.doc.len() > 10,
                    "{name}.{}: a key without a doc comment has no meaning in the reference",
                    f.name
                );
            }
        }
        assert_eq!(TABLES.len(), 6);
    }

    /// What the page calls required, the parser requires; every value it lists for a key
    /// with a closed set of values, the parser accepts.
    #[test]
    fn required_keys_and_allowed_values_are_the_parsers() {
        let cluster = "[clusters.a]\nbootstrap_servers = \"x\"\n";
        let flow = "[[flows]]\nsource = \"a\"\ntarget = \"a\"\n";
        let minimal = format!("{cluster}{flow}");
        assert!(toml::from_str::<ConfigFile>(&minimal).is_ok());
        for (name, _, _) in TABLES {
            for f in fields(name).into_iter().filter(|f| !f.optional) {
                let line = format!("{} = ", f.name);
                let without: String = minimal
                    .lines()
                    .filter(|l| {
                        !l.starts_with(&line)
                            && (f.name != "clusters" || !l.starts_with("[clusters"))
                    })
                    .map(|l| format!("{l}\n"))
                    .collect();
                let without = if f.name == "clusters" {
                    without.replace("bootstrap_servers = \"x\"\n", "")
                } else {
                    without
                };
                let e = toml::from_str::<ConfigFile>(&without)
                    .expect_err(&format!("{name}.{} is required: {without}", f.name));
                assert!(
                    e.message().contains(&format!("missing field `{}`", f.name)),
                    "{name}.{}: {}",
                    f.name,
                    e.message()
                );
            }
        }
        for f in fields("FlowConfig") {
            let written = toml_type(&f.rust_type);
            if !written.starts_with("`\"") {
                continue;
            }
            for value in written.split(" \\| ") {
                let value = value.trim_matches('`');
                let text = format!("{minimal}{} = {value}\n", f.name);
                assert!(
                    toml::from_str::<ConfigFile>(&text).is_ok(),
                    "{} = {value} is listed but refused",
                    f.name
                );
            }
        }
    }

    #[test]
    fn the_committed_reference_is_what_the_model_says() {
        let page = page();
        if std::env::var_os("KMIRROR_BLESS").is_some() {
            std::fs::write(PAGE, &page).expect("write the reference");
        }
        let committed = std::fs::read_to_string(PAGE).unwrap_or_default();
        assert!(
            committed == page,
            "docs/configuration-reference.md is not what the configuration model says: run `KMIRROR_BLESS=1 cargo test -p kmirror --lib config::reference` and commit it"
        );
    }

    #[test]
    fn types_defaults_and_mm2_keys_come_from_the_model() {
        let page = page();
        assert!(
            page.contains("| `offset_lag_max` | integer | `100` | `offset.lag.max` |"),
            "{page}"
        );
        assert!(
            page.contains("| `start_offset` | `\"earliest\"` \\| `\"latest\"` | `\"earliest\"` |"),
            "{page}"
        );
        assert!(page.contains("| `session_timeout` | duration"), "{page}");
        assert!(page.contains("`\"10s\"`"), "{page}");
        assert!(
            page.contains("| `source` | string | *required* |"),
            "{page}"
        );
        assert!(
            page.contains("`topic.filter.class` (with `topics`, `topics.exclude`)"),
            "{page}"
        );
    }
}
