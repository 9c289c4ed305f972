//! Plugins by language: the same prefix policy and regex filter written in Rust
//! (`plugins/prod-prefix`, `plugins/regex-filter`, built for wasm32-wasip2 and
//! wasm32-unknown-unknown), Python (`plugins/python/*`, componentize-py) and JavaScript
//! (`plugins/javascript/*`, componentize-js). Per component: its size, the cold compile
//! (no cache) and the load from the compile cache (medians), and the cost of one call —
//! one name per call and batched over 10,000 names — measured in this (release) process.
//!
//! Needs the built Rust plugins and the Python/JavaScript tools (`scripts/setup.sh`,
//! `cargo xtask plugins`); builds the Python and JavaScript plugins with the `kmirror`
//! binary (`plugin build`). Run: `cargo bench -p kmirror --bench languages` (or
//! `scripts/bench.sh languages`). REPS (default 3) sets the compile repetitions.

use kmirror::plugin::cache::{CacheOutcome, ComponentCache};
use kmirror::plugin::{Limits, Plugin, PluginComponent, PluginHost, PluginSource};
use kmirror::policy::{Config, ReplicationPolicy, TopicFilter};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const NAMES: usize = 10_000;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Builds a Python or JavaScript reference plugin with `kmirror plugin build`.
fn build(project: &str, out: &Path) -> PathBuf {
    let status = Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .args(["plugin", "build", "--no-check", "--out"])
        .arg(out)
        .arg(root().join("plugins").join(project))
        .env("KMIRROR_LOG", "warn")
        .status()
        .expect("kmirror plugin build");
    assert!(status.success(), "building {project}");
    out.to_path_buf()
}

fn names() -> Vec<String> {
    (0..NAMES)
        .map(|i| match i % 10 {
            0 => format!("__internal_{i}"),
            1 => format!("app-{i}.changelog-internal"),
            2 => format!("us-west.orders.v{i}"),
            _ => format!("team{}.events.{i}", i % 37),
        })
        .collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn per_name(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e6 / NAMES as f64)
}

/// (cold compile, cached load), medians.
fn loads(path: &Path, reps: usize) -> (Duration, Duration) {
    let bytes = std::fs::read(path).expect("component");
    let cold = PluginHost::new(Limits::default(), None).expect("host");
    let cold_times = (0..reps)
        .map(|_| {
            let t = Instant::now();
            black_box(PluginComponent::from_bytes(&cold, path, &bytes).expect("compile"));
            t.elapsed()
        })
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let cached =
        PluginHost::new(Limits::default(), Some(ComponentCache::new(dir.path()))).expect("host");
    PluginComponent::from_bytes(&cached, path, &bytes).expect("warm the cache");
    let cached_times = (0..5)
        .map(|_| {
            let t = Instant::now();
            let c = PluginComponent::from_bytes(&cached, path, &bytes).expect("load");
            let took = t.elapsed();
            assert_eq!(c.cache_outcome(), CacheOutcome::Hit);
            took
        })
        .collect();
    (median(cold_times), median(cached_times))
}

/// Median of 3 runs of `f`.
fn timed(mut f: impl FnMut()) -> Duration {
    f(); // warm-up: the first call instantiates
    median(
        (0..3)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

fn policy_calls(path: &Path, names: &[String]) -> (Duration, Duration) {
    let host = PluginHost::new(Limits::default(), None).expect("host");
    let config = Config::from(vec![("prefix".to_string(), "prod-".to_string())]);
    let policy: std::sync::Arc<dyn ReplicationPolicy> =
        Plugin::open(&host, &PluginSource::File(path.into()))
            .expect("plugin")
            .replication_policy(&config)
            .expect("policy");
    let single = timed(|| {
        for n in names {
            black_box(policy.format_remote_topic("us-east", n).expect("call"));
        }
    });
    let batch = timed(|| {
        black_box(policy.format_remote_topics("us-east", names).expect("call"));
    });
    (single, batch)
}

fn filter_calls(path: &Path, names: &[String]) -> (Duration, Duration) {
    let host = PluginHost::new(Limits::default(), None).expect("host");
    let config = Config::from(vec![(
        "topics.exclude".to_string(),
        "us-west.*".to_string(),
    )]);
    let filter: std::sync::Arc<dyn TopicFilter> =
        Plugin::open(&host, &PluginSource::File(path.into()))
            .expect("plugin")
            .topic_filter(&config)
            .expect("filter");
    let single = timed(|| {
        for n in names {
            black_box(filter.should_replicate_topic(n).expect("call"));
        }
    });
    let batch = timed(|| {
        black_box(filter.should_replicate_topics(names).expect("call"));
    });
    (single, batch)
}

fn main() {
    // `cargo bench` passes --bench; a filter argument is not supported.
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let out = tempfile::tempdir().expect("tempdir");
    let built = root().join("target/plugins");
    let components: Vec<(&str, &str, PathBuf)> = vec![
        (
            "Rust (wasm32-unknown-unknown)",
            "policy",
            built.join("prod_prefix.wasm"),
        ),
        (
            "Rust (wasm32-wasip2)",
            "policy",
            built.join("wasip2/prod_prefix.wasm"),
        ),
        (
            "Python",
            "policy",
            build("python/prefix-policy", &out.path().join("py_policy.wasm")),
        ),
        (
            "JavaScript",
            "policy",
            build(
                "javascript/prefix-policy",
                &out.path().join("js_policy.wasm"),
            ),
        ),
        (
            "Rust (wasm32-unknown-unknown)",
            "filter",
            built.join("regex_filter.wasm"),
        ),
        (
            "Rust (wasm32-wasip2)",
            "filter",
            built.join("wasip2/regex_filter.wasm"),
        ),
        (
            "Python",
            "filter",
            build("python/regex-filter", &out.path().join("py_filter.wasm")),
        ),
        (
            "JavaScript",
            "filter",
            build(
                "javascript/regex-filter",
                &out.path().join("js_filter.wasm"),
            ),
        ),
    ];
    let names = names();
    println!(
        "| language | plugin | size | cold compile | cached load | call, one name per call | call, batched |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for (language, role, path) in &components {
        let size = std::fs::metadata(path).expect("component").len();
        let (cold, cached) = loads(path, reps);
        let (single, batch) = match *role {
            "policy" => policy_calls(path, &names),
            _ => filter_calls(path, &names),
        };
        println!(
            "| {language} | {} | {:.2} MB | {} ms | {} ms | {} µs/name | {} µs/name |",
            if *role == "policy" {
                "prefix policy"
            } else {
                "regex filter"
            },
            size as f64 / 1e6,
            ms(cold),
            ms(cached),
            per_name(single),
            per_name(batch),
        );
    }
    println!(
        "\n(format-remote-topic / should-replicate-topic over {NAMES} names; medians; cold compile of {reps}, cached load of 5)"
    );
}
