//! Plugin benchmarks: the cost of one filter decision through a WASM component (one call
//! per name, and batched over 10,000 names) against the native built-in; the cost of a
//! record transform's batch call (500 records of 1 KiB with a key and a header, as the
//! replication loop makes them: straight through the component, and through the chain);
//! and component load time cold and from the compile cache.
//!
//! Needs the built plugins: `cargo xtask plugins && cargo bench -p kmirror --bench plugins`.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kmirror::flow::replication::chain;
use kmirror::plugin::cache::{CacheOutcome, ComponentCache};
use kmirror::plugin::{Limits, Plugin, PluginComponent, PluginHost, PluginSource, builtin};
use kmirror::policy::{ChainLink, Config, RecordIn, TopicFilter};
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;

fn plugin_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/plugins")
        .join(format!("{name}.wasm"))
}

/// 10,000 topic names of realistic shapes, some of them internal.
fn topic_names() -> Vec<String> {
    (0..10_000)
        .map(|i| match i % 10 {
            0 => format!("__internal_{i}"),
            1 => format!("app-{i}.changelog-internal"),
            2 => format!("us-west.orders.v{i}"),
            _ => format!("team{}.events.{i}", i % 37),
        })
        .collect()
}

fn decisions(c: &mut Criterion) {
    let host = PluginHost::new(Limits::default(), None).expect("host");
    let names = topic_names();
    let native: Arc<dyn TopicFilter> =
        Plugin::Builtin(builtin::find("default-topic-filter").expect("builtin"))
            .topic_filter(&Config::new())
            .expect("native");
    let wasm = |path: PathBuf| -> Arc<dyn TopicFilter> {
        Plugin::open(&host, &PluginSource::File(path))
            .expect("plugin")
            .topic_filter(&Config::new())
            .expect("instance")
    };
    let filters = [
        ("native", native),
        ("wasm", wasm(plugin_path("regex_filter"))),
        ("wasm-wasip2", wasm(plugin_path("wasip2/regex_filter"))),
    ];

    let mut group = c.benchmark_group("topic-filter-10k-names");
    group.throughput(Throughput::Elements(names.len() as u64));
    group.sample_size(20);
    for (label, filter) in &filters {
        group.bench_function(BenchmarkId::new("single", label), |b| {
            b.iter(|| {
                for n in &names {
                    black_box(filter.should_replicate_topic(n).expect("call"));
                }
            })
        });
        group.bench_function(BenchmarkId::new("batch", label), |b| {
            b.iter(|| black_box(filter.should_replicate_topics(&names).expect("call")))
        });
    }
    group.finish();
}

/// One transform call per batch of 500 records of 1 KiB (a key and one header each), as
/// the replication loop fetches them: the pass-through transform (the component boundary
/// alone) and `json-mask` (two fields of a JSON value), each called directly and through
/// the chain (which adds the host's bookkeeping).
fn transforms(c: &mut Criterion) {
    let host = PluginHost::new(Limits::default(), None).expect("host");
    let keys: Vec<String> = (0..500).map(|i| i.to_string()).collect();
    let values: Vec<Vec<u8>> = (0..500)
        .map(|i| {
            let mut v = format!(
                r#"{{"id": {i}, "card": {{"number": "4111 1111 1111 {i:04}"}}, "email": "u{i}@example.com", "pad": ""#
            )
            .into_bytes();
            v.resize(1022, b'x');
            v.extend_from_slice(b"\"}");
            v
        })
        .collect();
    let records: Vec<RecordIn<'_>> = (0..500)
        .map(|i| RecordIn {
            topic: "json-0",
            partition: (i % 4) as i32,
            offset: i as i64,
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(keys[i].as_bytes()),
            value: Some(&values[i]),
            headers: vec![("id", Some(keys[i].as_bytes()))],
        })
        .collect();
    let mut group = c.benchmark_group("record-transform-500x1KiB");
    group.throughput(Throughput::Elements(records.len() as u64));
    group.sample_size(20);
    for (label, name, config) in [
        ("pass-through", "test_pass_through", Config::new()),
        (
            "json-mask",
            "json_mask",
            Config::from_iter([("fields", "card.number,email")]),
        ),
    ] {
        let transform = Plugin::open(&host, &PluginSource::File(plugin_path(name)))
            .expect("plugin")
            .record_transform(&config)
            .expect("instance");
        group.bench_function(BenchmarkId::new("call", label), |b| {
            b.iter(|| black_box(transform.transform(&records).expect("call")))
        });
        let links = [ChainLink {
            name: label.to_string(),
            transform,
        }];
        group.bench_function(BenchmarkId::new("chain", label), |b| {
            b.iter(|| {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
                black_box(chain::apply(&links, &records, true, deadline))
            })
        });
    }
    group.finish();
}

fn loading(c: &mut Criterion) {
    let mut group = c.benchmark_group("component-load");
    group.sample_size(10);
    for name in ["default_policy", "regex_filter"] {
        let path = plugin_path(name);
        let bytes = std::fs::read(&path).expect("built plugin");
        let cold = PluginHost::new(Limits::default(), None).expect("host");
        group.bench_function(BenchmarkId::new("cold", name), |b| {
            b.iter(|| black_box(PluginComponent::from_bytes(&cold, &path, &bytes).expect("load")))
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let cached = PluginHost::new(Limits::default(), Some(ComponentCache::new(dir.path())))
            .expect("host");
        PluginComponent::from_bytes(&cached, &path, &bytes).expect("warm the cache");
        group.bench_function(BenchmarkId::new("cached", name), |b| {
            b.iter(|| {
                let c = PluginComponent::from_bytes(&cached, &path, &bytes).expect("load");
                assert_eq!(c.cache_outcome(), CacheOutcome::Hit);
                black_box(c)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, decisions, transforms, loading);
criterion_main!(benches);
