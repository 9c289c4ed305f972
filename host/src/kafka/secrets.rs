//! Keeping a cluster's secrets out of every message: librdkafka properties are shown only
//! when they are known not to be sensitive (an allow-list: an unknown or misspelled key is
//! hidden too), and every message built from librdkafka's error text is scrubbed of the
//! values of the properties that are not shown. A configuration is checked offline, one
//! property at a time, so `validate` reports an unknown or invalid property by its key,
//! without its value and without connecting anywhere.

use rdkafka::ClientConfig;
use std::collections::BTreeMap;

/// librdkafka properties whose values are not secrets (connection, tuning, identities and
/// file locations): shown as they are. Everything else is shown as `***`.
pub const SHOWN_PROPERTIES: &[&str] = &[
    "acks",
    "allow.auto.create.topics",
    "api.version.fallback.ms",
    "api.version.request",
    "api.version.request.timeout.ms",
    "auto.offset.reset",
    "batch.num.messages",
    "batch.size",
    "broker.address.family",
    "broker.address.ttl",
    "broker.version.fallback",
    "check.crcs",
    "client.dns.lookup",
    "client.id",
    "client.rack",
    "compression.codec",
    "compression.level",
    "compression.type",
    "connections.max.idle.ms",
    "debug",
    "enable.metrics.push",
    "enable.sasl.oauthbearer.unsecure.jwt",
    "enable.ssl.certificate.verification",
    "fetch.error.backoff.ms",
    "fetch.max.bytes",
    "fetch.message.max.bytes",
    "fetch.min.bytes",
    "fetch.queue.backoff.ms",
    "fetch.wait.max.ms",
    "heartbeat.interval.ms",
    "linger.ms",
    "log.connection.close",
    "log.queue",
    "log.thread.name",
    "log_level",
    "max.in.flight",
    "max.in.flight.requests.per.connection",
    "max.partition.fetch.bytes",
    "max.poll.interval.ms",
    "message.copy.max.bytes",
    "message.max.bytes",
    "message.send.max.retries",
    "metadata.max.age.ms",
    "metadata.recovery.strategy",
    "partition.assignment.strategy",
    "queue.buffering.backpressure.threshold",
    "queue.buffering.max.kbytes",
    "queue.buffering.max.messages",
    "queue.buffering.max.ms",
    "queued.max.messages.kbytes",
    "queued.min.messages",
    "receive.message.max.bytes",
    "reconnect.backoff.max.ms",
    "reconnect.backoff.ms",
    "request.timeout.ms",
    "retries",
    "retry.backoff.max.ms",
    "retry.backoff.ms",
    "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.principal",
    "sasl.kerberos.service.name",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.extensions",
    "sasl.oauthbearer.method",
    "sasl.oauthbearer.scope",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.username",
    "security.protocol",
    "session.timeout.ms",
    "socket.connection.setup.timeout.ms",
    "socket.keepalive.enable",
    "socket.max.fails",
    "socket.nagle.disable",
    "socket.receive.buffer.bytes",
    "socket.send.buffer.bytes",
    "socket.timeout.ms",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.cipher.suites",
    "ssl.crl.location",
    "ssl.curves.list",
    "ssl.endpoint.identification.algorithm",
    "ssl.key.location",
    "ssl.keystore.location",
    "ssl.providers",
    "ssl.sigalgs.list",
    "statistics.interval.ms",
    "sticky.partitioning.linger.ms",
    "topic.metadata.propagation.max.ms",
    "topic.metadata.refresh.fast.interval.ms",
    "topic.metadata.refresh.interval.ms",
    "topic.metadata.refresh.sparse",
];

/// What is shown instead of a hidden value.
pub const HIDDEN: &str = "***";

/// Whether `key`'s value may be shown.
pub fn is_shown(key: &str) -> bool {
    SHOWN_PROPERTIES.contains(&key)
}

/// `props` as they may be shown: hidden values replaced by `***`.
pub fn shown(props: &BTreeMap<String, String>) -> BTreeMap<&str, &str> {
    props
        .iter()
        .map(|(k, v)| {
            let v = if is_shown(k) { v.as_str() } else { HIDDEN };
            (k.as_str(), v)
        })
        .collect()
}

/// The values of `props` that must never appear in a message (the hidden ones, at least
/// three characters long so that ordinary words and numbers are left alone).
pub fn hidden_values(props: &BTreeMap<String, String>) -> Vec<String> {
    let mut values: Vec<String> = props
        .iter()
        .filter(|(k, v)| !is_shown(k) && v.chars().count() >= 3)
        .map(|(_, v)| v.clone())
        .collect();
    // Longest first, so a value containing another is replaced whole.
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    values
}

/// `text` with every one of `hidden` replaced by `***`.
pub fn scrub(text: &str, hidden: &[String]) -> String {
    let mut out = text.to_string();
    for v in hidden {
        if out.contains(v.as_str()) {
            out = out.replace(v.as_str(), HIDDEN);
        }
    }
    out
}

/// Checks each property with librdkafka without creating a client (nothing connects):
/// (key, what librdkafka says, scrubbed) for every property it refuses.
pub fn check_offline(props: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let hidden = hidden_values(props);
    props
        .iter()
        .filter_map(|(k, v)| {
            let mut one = ClientConfig::new();
            one.set(k, v);
            let refused = one.create_native_config().err()?;
            // librdkafka's description alone (its error also echoes the key and the value).
            let text = match refused {
                rdkafka::error::KafkaError::ClientConfig(_, description, _, _) => description,
                other => other.to_string(),
            };
            Some((k.clone(), scrub(&text.replace(v.as_str(), HIDDEN), &hidden)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_known_harmless_properties_are_shown() {
        let p = props(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.password", "pw-1"),
            ("sasl.passwrod", "typo-2"),
            ("sasl.oauthbearer.config", "cfg-3"),
            ("sasl.oauthbearer.client.secret", "sec-4"),
            ("ssl.keystore.password", "ks-5"),
            ("ssl.key.pem", "pem-6"),
            ("ssl_key", "key-7"),
        ]);
        let shown = format!("{:?}", shown(&p));
        assert!(shown.contains("SASL_SSL"), "{shown}");
        for secret in ["pw-1", "typo-2", "cfg-3", "sec-4", "ks-5", "pem-6", "key-7"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
    }

    #[test]
    fn librdkafka_errors_are_checked_offline_and_scrubbed() {
        let p = props(&[
            ("sasl.passwrod", "typo-secret-value"),
            ("linger.ms", "not-a-number"),
            ("sasl.password", "fine-secret-value"),
        ]);
        let refused = check_offline(&p);
        let keys: Vec<&str> = refused.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, vec!["linger.ms", "sasl.passwrod"], "{refused:?}");
        let all = format!("{refused:?}");
        assert!(
            !all.contains("typo-secret-value") && !all.contains("fine-secret-value"),
            "{all}"
        );
        assert!(all.contains("No such configuration property"), "{all}");
        assert_eq!(
            scrub("x fine-secret-value y", &hidden_values(&p)),
            "x *** y"
        );
    }
}
