//! A cluster's librdkafka settings from MM2's client settings.

use super::{Props, Translation, Untranslated, connect_internal, refuse};
use std::collections::BTreeMap;

/// Client settings librdkafka takes under the same name and meaning.
const SAME_NAME: [&str; 19] = [
    "security.protocol",
    "sasl.mechanism",
    "sasl.kerberos.service.name",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "client.id",
    "client.rack",
    "socket.connection.setup.timeout.ms",
    "connections.max.idle.ms",
    "metadata.max.age.ms",
    "reconnect.backoff.ms",
    "reconnect.backoff.max.ms",
    "retry.backoff.ms",
    "retry.backoff.max.ms",
    "linger.ms",
    "batch.size",
    "compression.type",
    "fetch.min.bytes",
    "fetch.max.bytes",
];

/// Client settings librdkafka takes under another name (same meaning and unit).
const RENAMED: [(&str, &str); 4] = [
    ("fetch.max.wait.ms", "fetch.wait.max.ms"),
    ("max.partition.fetch.bytes", "max.partition.fetch.bytes"),
    ("max.request.size", "message.max.bytes"),
    ("receive.buffer.bytes", "socket.receive.buffer.bytes"),
];

/// Client settings kmirror sets itself, for its guarantees, or that have no meaning for it:
/// the value that is kmirror's own (then nothing is lost), and why.
const CLIENT_REFUSED: [(&str, Option<&str>, &str); 9] = [
    (
        "acks",
        Some("all"),
        "kmirror always produces with acks=all (its delivery guarantee)",
    ),
    (
        "enable.idempotence",
        Some("true"),
        "kmirror's producers are always idempotent",
    ),
    (
        "isolation.level",
        Some("read_committed"),
        "kmirror always reads read_committed",
    ),
    (
        "enable.auto.commit",
        Some("false"),
        "kmirror stores progress itself",
    ),
    (
        "group.id",
        None,
        "kmirror names its groups kmirror.<source>.<target>",
    ),
    ("key.deserializer", None, "kmirror copies bytes"),
    ("value.deserializer", None, "kmirror copies bytes"),
    ("key.serializer", None, "kmirror copies bytes"),
    ("value.serializer", None, "kmirror copies bytes"),
];

/// Whether MM2 passes `key`, set as `<alias>.<key>` or without a prefix, to every client of
/// a cluster: its security settings (other client settings need `producer.`, `consumer.` or
/// `admin.`).
fn for_every_client(key: &str) -> bool {
    key == "security.protocol" || key.starts_with("ssl.") || key.starts_with("sasl.")
}

/// The librdkafka settings of cluster `alias`, each with the MM2 key it came from. MM2's
/// precedence: `<alias>.producer.x` (or `consumer.`, `admin.`) over `<alias>.x` over a
/// top-level `x` (security settings only); kmirror's settings are per cluster, so two
/// client kinds asking for different values of one setting are named, not guessed between.
pub(super) fn client_settings(
    p: &mut Props,
    alias: &str,
    is_source: bool,
    out: &mut Translation,
) -> BTreeMap<String, (String, String)> {
    let prefix = format!("{alias}.");
    // (the MM2 key, the setting without prefixes, its rank, the value)
    let mut found: Vec<(String, String, u8, String)> = Vec::new();
    for (k, v) in &p.all {
        if let Some(rest) = k.strip_prefix(&prefix) {
            if rest == "bootstrap.servers" {
                continue;
            }
            match ["producer.", "consumer.", "admin."]
                .iter()
                .find_map(|c| rest.strip_prefix(c))
            {
                Some(bare) => found.push((k.clone(), bare.to_string(), 2, v.clone())),
                None => found.push((k.clone(), rest.to_string(), 1, v.clone())),
            }
        } else if for_every_client(k) {
            found.push((k.clone(), k.clone(), 0, v.clone()));
        }
    }
    // The settings given together, for those that depend on another (a keystore's type).
    let scope: BTreeMap<String, String> = found
        .iter()
        .map(|(_, bare, _, v)| (bare.clone(), v.trim().to_string()))
        .collect();
    let mut settings: BTreeMap<String, (String, String, u8)> = BTreeMap::new();
    for (key, bare, rank, value) in found {
        p.used.insert(key.clone());
        if rank == 0 && p.all.contains_key(&format!("{prefix}{bare}")) {
            continue; // the cluster's own value wins
        }
        if bare == "auto.offset.reset" {
            if !(is_source && key == format!("{prefix}consumer.auto.offset.reset")) {
                refuse(
                    out,
                    key,
                    "MM2 reads auto.offset.reset only as `<source>.consumer.auto.offset.reset` (the flows' start_offset)".into(),
                );
            }
            continue;
        }
        if bare == "offset.storage.topic" {
            refuse(
                out,
                key,
                "kmirror takes over only from MM2's own offsets topic, mm2-offsets.<source>.internal: a flow would start from start_offset instead".into(),
            );
            continue;
        }
        if bare == "exactly.once.source.support" {
            exactly_once(out, key, &value);
            continue;
        }
        if rank == 1 {
            // Settings of the Connect worker MM2 runs for this cluster.
            if let Some(why) = connect_internal(&bare) {
                out.not_needed.push(Untranslated {
                    key,
                    reason: why.to_string(),
                });
                continue;
            }
            if !for_every_client(&bare) {
                refuse(
                    out,
                    key,
                    format!(
                        "MM2 passes only security settings (security.protocol, ssl.*, sasl.*) from `{alias}.<setting>` to its clients: this one had no effect there (`{alias}.producer.{bare}` or `{alias}.consumer.{bare}` would)"
                    ),
                );
                continue;
            }
        }
        match client_setting(&bare, value.trim(), &scope) {
            Ok(Setting::Librdkafka(pairs)) => {
                for (k, v) in pairs {
                    let v = match kmirror_value(&v) {
                        Ok(v) => v,
                        Err(why) => {
                            refuse(out, key.clone(), why);
                            continue;
                        }
                    };
                    match settings.get(&k) {
                        Some((old, from, r)) if *r == rank && *old != v => {
                            refuse(
                                out,
                                key.clone(),
                                format!(
                                    "conflicts with {from}: kmirror's librdkafka settings are one per cluster, for all its clients"
                                ),
                            );
                            continue;
                        }
                        Some((_, _, r)) if *r > rank => continue,
                        _ => {}
                    }
                    if k.contains("password") {
                        out.notes.push(format!(
                            "{key}: a secret copied into clusters.{alias}.librdkafka.\"{k}\"; consider \"${{ENV_VAR}}\" instead"
                        ));
                    }
                    settings.insert(k, (v, key.clone(), rank));
                }
            }
            Ok(Setting::Same(why)) => out.not_needed.push(Untranslated { key, reason: why }),
            Err(reason) => refuse(out, key, reason),
        }
    }
    settings
        .into_iter()
        .map(|(k, (v, from, _))| (k, (v, from)))
        .collect()
}

/// `exactly.once.source.support` of a target's worker: an exactly-once MM2 is written as an
/// at-least-once flow that takes MM2's progress over (an exactly-once flow could not), and
/// named, so the switch is made by hand after the first start.
fn exactly_once(out: &mut Translation, key: String, value: &str) {
    if value.trim().eq_ignore_ascii_case("enabled") {
        refuse(
            out,
            key,
            "the flows into this cluster are written at-least-once, taking over MM2's progress (an exactly-once flow cannot): once each has started, set exactly_once = true on it (it takes the at-least-once progress over)".into(),
        );
    } else {
        out.not_needed.push(Untranslated {
            key,
            reason: format!("`{value}`: MM2 did not run exactly-once"),
        });
    }
}

/// A client setting's translation.
enum Setting {
    /// These librdkafka settings.
    Librdkafka(Vec<(String, String)>),
    /// Nothing: kmirror does this already (why).
    Same(String),
}

/// A value kmirror reads as MM2 did: `$` is kmirror's substitution mark (`${ENV_VAR}`,
/// `$$`), so a literal one is doubled; MM2's `${env:NAME}` becomes `${NAME}`; other config
/// providers (`${file:...}`) cannot be read.
pub(super) fn kmirror_value(value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some((reference, after)) = tail.strip_prefix("${").and_then(|t| t.split_once('}')) {
            match reference.split_once(':') {
                Some(("env", name)) if !name.is_empty() && !name.contains(':') => {
                    out.push_str(&format!("${{{name}}}"));
                    rest = after;
                    continue;
                }
                Some((provider, _)) => {
                    return Err(format!(
                        "a `{provider}` config provider reference: kmirror substitutes only environment variables (`${{NAME}}`): put the value in one"
                    ));
                }
                None => {}
            }
        }
        out.push_str("$$");
        rest = &tail[1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// One Java client setting as librdkafka settings, or why not; `scope` holds the settings
/// given with it.
fn client_setting(
    key: &str,
    value: &str,
    scope: &BTreeMap<String, String>,
) -> Result<Setting, String> {
    if let Some((_, same, why)) = CLIENT_REFUSED.iter().find(|(k, _, _)| *k == key) {
        return match same {
            Some(same) if value.eq_ignore_ascii_case(same) => Ok(Setting::Same((*why).into())),
            _ => Err((*why).to_string()),
        };
    }
    let one = |k: &str, v: &str| Ok(Setting::Librdkafka(vec![(k.to_string(), v.to_string())]));
    if SAME_NAME.contains(&key) {
        // Java's empty value turns host name checks off; librdkafka says `none`.
        if key == "ssl.endpoint.identification.algorithm" && value.is_empty() {
            return one(key, "none");
        }
        return one(key, value);
    }
    if let Some((_, to)) = RENAMED.iter().find(|(k, _)| *k == key) {
        return one(to, value);
    }
    let pem_truststore = scope
        .get("ssl.truststore.type")
        .is_some_and(|t| t.eq_ignore_ascii_case("PEM"));
    let pkcs12_keystore = scope
        .get("ssl.keystore.type")
        .is_some_and(|t| t.eq_ignore_ascii_case("PKCS12"));
    match key {
        "sasl.jaas.config" => jaas(value).map(Setting::Librdkafka),
        "buffer.memory" => value
            .parse::<u64>()
            .map(|b| {
                Setting::Librdkafka(vec![(
                    "queue.buffering.max.kbytes".to_string(),
                    (b / 1024).max(1).to_string(),
                )])
            })
            .map_err(|_| format!("`{value}`: a number of bytes")),
        "ssl.truststore.location" if pem_truststore => one("ssl.ca.location", value),
        "ssl.truststore.type" if pem_truststore => Ok(Setting::Librdkafka(Vec::new())),
        "ssl.truststore.location" | "ssl.truststore.type" | "ssl.truststore.password" => Err(
            "librdkafka reads CA certificates as PEM, not a Java truststore: export them (keytool -exportcert -rfc) and set ssl.ca.location".into(),
        ),
        "ssl.keystore.type" if pkcs12_keystore => Ok(Setting::Librdkafka(Vec::new())),
        "ssl.keystore.location" | "ssl.keystore.password" if pkcs12_keystore => one(key, value),
        "ssl.keystore.location" | "ssl.keystore.password" | "ssl.keystore.type" => Err(
            "librdkafka reads a PKCS#12 keystore or PEM files (ssl.certificate.location, ssl.key.location), and Java's keystore is JKS unless ssl.keystore.type = PKCS12: convert it (keytool -importkeystore -deststoretype PKCS12) and say so".into(),
        ),
        "ssl.cipher.suites" => Err(
            "Java names cipher suites as JSSE does, librdkafka takes an OpenSSL cipher list: write it by hand".into(),
        ),
        "sasl.login.callback.handler.class" | "sasl.client.callback.handler.class" => Err(
            "a Java callback class: librdkafka has its own OAUTHBEARER support (sasl.oauthbearer.method = oidc)".into(),
        ),
        _ => Err(
            "no librdkafka equivalent kmirror knows of: set it under the cluster's librdkafka table by hand if librdkafka has one".into(),
        ),
    }
}

/// A JAAS line for SASL/PLAIN or SCRAM (`Module required username="u" password="p";`) as
/// librdkafka's username and password. Values are read as Java's JAAS parser reads them:
/// double- or single-quoted with `\` escapes, or bare words; any other option is named.
pub(super) fn jaas(value: &str) -> Result<Vec<(String, String)>, String> {
    let known = [
        "org.apache.kafka.common.security.plain.PlainLoginModule",
        "org.apache.kafka.common.security.scram.ScramLoginModule",
    ];
    let tokens = jaas_tokens(value)?;
    let module = tokens.first().cloned().unwrap_or_default();
    if !known.contains(&module.as_str()) {
        return Err(format!(
            "login module `{module}`: only PlainLoginModule and ScramLoginModule translate (librdkafka's sasl.username and sasl.password); for GSSAPI or OAUTHBEARER set librdkafka's sasl.kerberos.* or sasl.oauthbearer.* by hand"
        ));
    }
    let flag = tokens.get(1).cloned().unwrap_or_default();
    if !["required", "requisite", "sufficient", "optional"].contains(&flag.as_str()) {
        return Err(format!(
            "`{flag}` where a JAAS control flag (required) belongs"
        ));
    }
    let (mut user, mut password) = (None, None);
    let mut i = 2;
    while i < tokens.len() && tokens[i] != ";" {
        let name = &tokens[i];
        if tokens.get(i + 1).map(String::as_str) != Some("=") || i + 2 >= tokens.len() {
            return Err(format!("JAAS option `{name}` without `=value`"));
        }
        let v = tokens[i + 2].clone();
        match name.as_str() {
            "username" => user = Some(v),
            "password" => password = Some(v),
            other => {
                return Err(format!(
                    "JAAS option `{other}`: only username and password translate (librdkafka's sasl.username and sasl.password)"
                ));
            }
        }
        i += 3;
    }
    match (user, password) {
        (Some(u), Some(p)) => Ok(vec![
            ("sasl.username".to_string(), u),
            ("sasl.password".to_string(), p),
        ]),
        _ => Err("a JAAS line without username and password".into()),
    }
}

/// The words, `=`, `;` and quoted strings of a JAAS line.
fn jaas_tokens(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '=' || c == ';' {
            out.push(c.to_string());
            chars.next();
        } else if c == '"' || c == '\'' {
            chars.next();
            let mut s = String::new();
            loop {
                match chars.next() {
                    Some('\\') => match chars.next() {
                        Some(e) => s.push(e),
                        None => return Err("a JAAS value ending in `\\`".into()),
                    },
                    Some(q) if q == c => break,
                    Some(other) => s.push(other),
                    None => return Err("an unterminated quoted JAAS value".into()),
                }
            }
            out.push(s);
        } else {
            let mut s = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() || "=;\"'".contains(c) {
                    break;
                }
                s.push(c);
                chars.next();
            }
            out.push(s);
        }
    }
    Ok(out)
}
