//! A cluster's librdkafka settings from MM2's client settings.

use super::{Props, Translation, Untranslated, connect_internal};
use std::collections::BTreeMap;

/// Client settings librdkafka takes under the same name and meaning.
const SAME_NAME: [&str; 22] = [
    "security.protocol",
    "sasl.mechanism",
    "sasl.kerberos.service.name",
    "ssl.key.password",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.endpoint.identification.algorithm",
    "ssl.cipher.suites",
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

/// Client settings kmirror sets itself for its guarantees, or that have no meaning for it.
const CLIENT_REFUSED: [(&str, &str); 9] = [
    (
        "acks",
        "kmirror always produces with acks=all (its delivery guarantee)",
    ),
    (
        "enable.idempotence",
        "kmirror's producers are always idempotent",
    ),
    ("isolation.level", "kmirror always reads read_committed"),
    ("enable.auto.commit", "kmirror stores progress itself"),
    (
        "group.id",
        "kmirror names its groups kmirror.<source>.<target>",
    ),
    ("key.deserializer", "kmirror copies bytes"),
    ("value.deserializer", "kmirror copies bytes"),
    ("key.serializer", "kmirror copies bytes"),
    ("value.serializer", "kmirror copies bytes"),
];

/// The librdkafka settings of cluster `alias`: `<alias>.<setting>` (or, without a prefix,
/// for every cluster), each with the MM2 key it came from.
pub(super) fn client_settings(
    p: &mut Props,
    alias: &str,
    out: &mut Translation,
) -> BTreeMap<String, (String, String)> {
    let mut settings = BTreeMap::new();
    let prefix = format!("{alias}.");
    let keys: Vec<(String, String, String)> = p
        .all
        .iter()
        .filter_map(|(k, v)| {
            let rest = k.strip_prefix(&prefix)?;
            (rest != "bootstrap.servers").then(|| (k.clone(), rest.to_string(), v.clone()))
        })
        .collect();
    for (key, rest, value) in keys {
        p.used.insert(key.clone());
        let bare = ["producer.", "consumer.", "admin."]
            .iter()
            .find_map(|c| rest.strip_prefix(c))
            .unwrap_or(&rest);
        if bare == "auto.offset.reset" {
            continue; // the flows' start_offset
        }
        // Settings of the Connect worker MM2 runs for this cluster.
        if let Some(why) = connect_internal(&rest) {
            out.not_needed.push(Untranslated {
                key,
                reason: why.to_string(),
            });
            continue;
        }
        match client_setting(bare, value.trim()) {
            Ok(pairs) => {
                for (k, v) in pairs {
                    if k == "sasl.password" || k.contains("password") {
                        out.notes.push(format!(
                            "{key}: a secret copied into clusters.{alias}.librdkafka.{k}; consider \"${{ENV_VAR}}\" instead"
                        ));
                    }
                    settings.insert(k, (v, key.clone()));
                }
            }
            Err(reason) => out.untranslated.push(Untranslated { key, reason }),
        }
    }
    settings
}

/// One Java client setting as librdkafka settings, or why not.
fn client_setting(key: &str, value: &str) -> Result<Vec<(String, String)>, String> {
    if let Some((_, why)) = CLIENT_REFUSED.iter().find(|(k, _)| *k == key) {
        return Err((*why).to_string());
    }
    if SAME_NAME.contains(&key) {
        let value = match key {
            // Java's empty value turns host name checks off; librdkafka says `none`.
            "ssl.endpoint.identification.algorithm" if value.is_empty() => "none",
            _ => value,
        };
        return Ok(vec![(key.to_string(), value.to_string())]);
    }
    if let Some((_, to)) = RENAMED.iter().find(|(k, _)| *k == key) {
        return Ok(vec![(to.to_string(), value.to_string())]);
    }
    match key {
        "sasl.jaas.config" => jaas(value),
        "buffer.memory" => value
            .parse::<u64>()
            .map(|b| vec![("queue.buffering.max.kbytes".to_string(), (b / 1024).max(1).to_string())])
            .map_err(|_| format!("`{value}`: a number of bytes")),
        "ssl.truststore.location" | "ssl.truststore.type" | "ssl.truststore.password" => Err(
            "librdkafka reads CA certificates as PEM, not a Java truststore: export them (keytool -exportcert -rfc) and set ssl.ca.location".into(),
        ),
        "ssl.keystore.type" if value.eq_ignore_ascii_case("PKCS12") => Ok(Vec::new()),
        "ssl.keystore.type" => Err(
            "librdkafka reads a PKCS#12 keystore (ssl.keystore.location) or PEM files (ssl.certificate.location, ssl.key.location), not JKS: convert it (keytool -importkeystore -deststoretype PKCS12)".into(),
        ),
        "sasl.login.callback.handler.class" | "sasl.client.callback.handler.class" => Err(
            "a Java callback class: librdkafka has its own OAUTHBEARER support (sasl.oauthbearer.method = oidc)".into(),
        ),
        _ => Err("no librdkafka equivalent kmirror knows of: set it under the cluster's librdkafka table by hand if librdkafka has one".into()),
    }
}

/// A JAAS line for SASL/PLAIN or SCRAM as librdkafka's username and password.
fn jaas(value: &str) -> Result<Vec<(String, String)>, String> {
    let known = [
        "org.apache.kafka.common.security.plain.PlainLoginModule",
        "org.apache.kafka.common.security.scram.ScramLoginModule",
    ];
    let module = value.split_whitespace().next().unwrap_or_default();
    if !known.contains(&module) {
        return Err(format!(
            "login module `{module}`: only PlainLoginModule and ScramLoginModule translate (librdkafka's sasl.username and sasl.password); for GSSAPI or OAUTHBEARER set librdkafka's sasl.kerberos.* or sasl.oauthbearer.* by hand"
        ));
    }
    let option = |name: &str| -> Option<String> {
        let at = value.find(&format!("{name}=\""))? + name.len() + 2;
        let end = value[at..].find('"')?;
        Some(value[at..at + end].to_string())
    };
    match (option("username"), option("password")) {
        (Some(u), Some(p)) => Ok(vec![
            ("sasl.username".to_string(), u),
            ("sasl.password".to_string(), p),
        ]),
        _ => Err("a JAAS line without username=\"...\" and password=\"...\"".into()),
    }
}
