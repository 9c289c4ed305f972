//! Discovery at 10,000 topics through the WASM topic filter and replication policy: the
//! first pass (every name decided: one batched filter call, policy calls per name) and a
//! steady pass (decisions cached: only the plan over both snapshots), in host CPU time.
//! Listing the clusters is not included (it is the brokers' and librdkafka's work).
//!
//! `cargo xtask plugins && cargo bench -p kmirror --bench discovery`

use kmirror::flow::Routes;
use kmirror::flow::discovery::rules::{decide_all, plan};
use kmirror::kafka::TopicPartitions;
use kmirror::plugin::{Limits, Plugin, PluginHost, PluginSource};
use kmirror::policy::Config;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn plugin(name: &str) -> Plugin {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../target/plugins/{name}.wasm"));
    let host = PluginHost::new(Limits::default(), None).expect("host");
    Plugin::open(&host, &PluginSource::File(path)).expect("run `cargo xtask plugins` first")
}

fn cpu_time() -> Duration {
    // SAFETY: getrusage with a valid out-parameter.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    let t =
        |v: libc::timeval| Duration::from_micros(v.tv_sec as u64 * 1_000_000 + v.tv_usec as u64);
    t(u.ru_utime) + t(u.ru_stime)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("discovery: benchmark");
        return;
    }
    let n: usize = std::env::var("TOPICS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let filter = plugin("regex_filter")
        .topic_filter(&Config::new())
        .expect("filter");
    let policy = plugin("default_policy")
        .replication_policy(&Config::new())
        .expect("policy");
    let names: Vec<String> = (0..n)
        .map(|i| format!("team{}.orders-{i}", i % 37))
        .collect();
    let source: TopicPartitions = names.iter().map(|t| (t.clone(), 6)).collect();
    let reserved = BTreeSet::new();

    let (wall, cpu) = (Instant::now(), cpu_time());
    let decided = decide_all(&names, &*filter, &*policy, "primary", "backup", &reserved);
    let (first_wall, first_cpu) = (wall.elapsed(), cpu_time() - cpu);
    assert!(decided.failed.is_empty());
    let decisions = decided.decisions;

    let target: TopicPartitions = decisions
        .values()
        .filter_map(|d| match d {
            kmirror::flow::discovery::Decision::Mirror(t) => Some((t.clone(), 6)),
            _ => None,
        })
        .collect();
    let previous: Routes = plan(&source, &target, &decisions, &Routes::new()).mirror;
    let mut steady = Vec::new();
    for _ in 0..20 {
        let cpu = cpu_time();
        let p = plan(&source, &target, &decisions, &previous);
        assert!(p.actions.is_empty() && p.mirror.len() == n);
        steady.push(cpu_time() - cpu);
    }
    steady.sort();
    println!(
        "{n} topics through regex_filter.wasm + default_policy.wasm: first pass (all decided) {first_wall:.1?} wall, {first_cpu:.1?} CPU; steady pass (cached decisions, plan) median {:.1?} CPU, max {:.1?}",
        steady[steady.len() / 2],
        steady[steady.len() - 1]
    );
}
