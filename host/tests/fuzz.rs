//! Bounded fuzzing, proptest-driven, run by the test command: the configuration loader and
//! the MM2 record decoders are fed random and mutated input. They may refuse it — with
//! located errors — but never panic, and encoding then decoding gives back what was
//! encoded. `KMIRROR_FUZZ_CASES=N` runs more cases (default 256 per target).

use kmirror::config::load_str;
use kmirror::formats::{Checkpoint, Heartbeat, OffsetSync};
use kmirror::plugin::cache::CacheChoice;
use proptest::prelude::*;
use std::path::Path;

fn cases() -> u32 {
    std::env::var("KMIRROR_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

const VALID: &str = r#"[clusters.primary]
bootstrap_servers = "127.0.0.1:19092"
[clusters.primary.librdkafka]
"security.protocol" = "PLAINTEXT"

[clusters.backup]
bootstrap_servers = "127.0.0.1:29092"

[plugins]
memory_limit_mib = 64
call_timeout = "1s"

[[flows]]
source = "primary"
target = "backup"
topic_filter = { builtin = "default-topic-filter", config = { "topics" = "orders.*" } }
refresh_topics_interval = "5s"
offset_lag_max = 100
replication_factor = 1
on_unproducible = "skip"
"#;

/// A valid configuration with random edits: bytes replaced, cut or inserted.
fn mutated() -> impl Strategy<Value = String> {
    proptest::collection::vec((0usize..VALID.len(), any::<u8>(), 0u8..3), 1..8).prop_map(|edits| {
        let mut bytes = VALID.as_bytes().to_vec();
        for (at, b, op) in edits {
            let at = at.min(bytes.len().saturating_sub(1));
            match op {
                0 => bytes[at] = b,
                1 => {
                    bytes.remove(at);
                }
                _ => bytes.insert(at, b),
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

fn check_config(text: &str) -> Result<(), TestCaseError> {
    let path = Path::new("/nonexistent/kmirror.toml");
    if let Err(errors) = load_str(text, path, &CacheChoice::Disabled) {
        prop_assert!(!errors.0.is_empty());
        for e in &errors.0 {
            prop_assert!(!e.message.is_empty() && !e.key.is_empty(), "{e}");
            prop_assert!(
                e.line <= text.lines().count() + 1,
                "line {} of {}",
                e.line,
                text.lines().count()
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn the_config_loader_never_panics_on_mutations(text in mutated()) {
        check_config(&text)?;
    }

    #[test]
    fn the_config_loader_never_panics_on_noise(text in "\\PC{0,400}") {
        check_config(&text)?;
    }

    #[test]
    fn record_decoders_never_panic(key in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64)),
                                   value in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64))) {
        let (k, v) = (key.as_deref(), value.as_deref());
        let _ = OffsetSync::decode(k, v);
        let _ = Checkpoint::decode(k, v);
        let _ = Heartbeat::decode(k, v);
    }

    #[test]
    fn records_round_trip(topic in "[a-zA-Z0-9._-]{0,249}", group in "\\PC{0,60}", partition in any::<i32>(),
                          up in any::<i64>(), down in any::<i64>(), metadata in "\\PC{0,40}") {
        let sync = OffsetSync { topic: topic.clone(), partition, upstream: up, downstream: down };
        prop_assert_eq!(OffsetSync::decode(Some(&sync.key()), Some(&sync.value())).unwrap(), sync);
        let cp = Checkpoint { group: group.clone(), topic: topic.clone(), partition, upstream: up, downstream: down, metadata };
        prop_assert_eq!(Checkpoint::decode(Some(&cp.key()), Some(&cp.value())).unwrap(), cp);
        let hb = Heartbeat { source_alias: group, target_alias: topic, timestamp_ms: up };
        prop_assert_eq!(Heartbeat::decode(Some(&hb.key()), Some(&hb.value())).unwrap(), hb);
    }
}
