//! What a record-transform chain costs: the same preloaded 1 KiB JSON records (3 topics x 4
//! partitions, a key and a header each) mirrored by the real binary, in one run, with
//!
//! - no transform;
//! - a pass-through transform (every record kept) in Rust (`test_pass_through.wasm`),
//!   Python and JavaScript (the `plugin new --role record-transform` scaffolds with no
//!   configuration, which keep every record);
//! - `json-mask` masking two fields of every record, in Rust (`json_mask.wasm`), Python
//!   and JavaScript (`plugins/python/json-mask`, `plugins/javascript/json-mask`).
//!
//! Python and JavaScript components are built with `kmirror plugin build` first (and
//! compiled into the shared cache, so no run pays a compile). Reported per contender, the
//! median of `REPS` (default 3) runs, interleaved: records/s in steady state, CPU seconds,
//! peak RSS, and the ratio to no transform.
//!
//! `scripts/bench.sh transforms` (`RECORDS=n`, default 100000; `REPS=n`; `PERF_OUT=path`: a
//! CPU profile of kmirror per run, `path.<contender>.<run>`; `ONLY=text`: no transform and
//! the contenders whose name contains `text`, e.g. `ONLY=Rust`).

mod common;
#[path = "../../tests/e2e/support/mod.rs"]
mod support;

use common::{Run, kmirror_cli, median};
use std::path::{Path, PathBuf};
use support::{Broker, Client};

const TOPICS: usize = 3;
const PARTITIONS: i32 = 4;
const SIZE: usize = 1024;

/// A 1 KiB JSON document with the two masked fields.
fn document(i: usize) -> Vec<u8> {
    let head = format!(
        r#"{{"id": {i}, "card": {{"number": "4111 1111 1111 {:04}", "expiry": "12/29"}}, "email": "user{i}@example.com", "pad": ""#,
        i % 10_000
    );
    let mut v = head.into_bytes();
    v.resize(SIZE - 2, b'x');
    v.extend_from_slice(b"\"}");
    v
}

fn preload(addr: &str, n: usize) {
    let c = Client::new(addr);
    for t in 0..TOPICS {
        c.create_topic(&format!("json-{t}"), PARTITIONS);
    }
    for i in 0..n {
        let (t, p) = (i % TOPICS, ((i / TOPICS) % PARTITIONS as usize) as i32);
        let id = i.to_string();
        c.produce(
            &format!("json-{t}"),
            p,
            id.as_bytes(),
            &document(i),
            &[("id", id.as_bytes())],
            1_700_000_000_000 + i as i64,
        );
    }
    c.flush();
}

/// The plugin directory of the runs: the built Rust plugins, and the Python and JavaScript
/// ones built now, all compiled into `cache`.
fn plugins(dir: &Path, cache: &Path, languages: &[(&str, &str)]) -> PathBuf {
    let plugins = dir.join("plugins.d");
    std::fs::create_dir_all(&plugins).expect("plugins dir");
    let built = support::plugins_dir();
    for f in [
        "regex_filter.wasm",
        "default_policy.wasm",
        "test_pass_through.wasm",
        "json_mask.wasm",
    ] {
        std::fs::copy(built.join(f), plugins.join(f)).expect("copy");
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for &(lang, out) in languages {
        let project = repo.join(format!("plugins/{lang}/json-mask"));
        let mask = plugins.join(format!("{out}_json_mask.wasm"));
        kmirror_cli(
            cache,
            &[
                "plugin",
                "build",
                project.to_str().unwrap(),
                "--out",
                mask.to_str().unwrap(),
                "--no-check",
            ],
        );
        kmirror_cli(
            cache,
            &[
                "plugin",
                "new",
                &format!("{out}-pass"),
                "--role",
                "record-transform",
                "--lang",
                lang,
                "--dir",
                dir.to_str().unwrap(),
            ],
        );
        let pass = plugins.join(format!("{out}_pass.wasm"));
        let project = dir.join(format!("{out}-pass"));
        kmirror_cli(
            cache,
            &[
                "plugin",
                "build",
                project.to_str().unwrap(),
                "--out",
                pass.to_str().unwrap(),
                "--no-check",
            ],
        );
    }
    for f in [
        "regex_filter.wasm",
        "default_policy.wasm",
        "test_pass_through.wasm",
        "json_mask.wasm",
    ] {
        kmirror_cli(
            cache,
            &["plugin", "compile", plugins.join(f).to_str().unwrap()],
        );
    }
    plugins
}

fn chain(plugin: Option<&str>, mask: bool) -> String {
    match plugin {
        None => String::new(),
        Some(p) if mask => format!(
            "record_transforms = [{{ plugin = \"{p}\", config = {{ fields = \"card.number,email\" }} }}]"
        ),
        Some(p) => format!("record_transforms = [{{ plugin = \"{p}\" }}]"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        println!("transforms: benchmark ({})", support::broker_label());
        return;
    }
    let n: usize = std::env::var("RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let only = std::env::var("ONLY").unwrap_or_default();
    let contenders: Vec<(&str, Option<&str>, bool)> = [
        ("no transform", None, false),
        ("pass-through, Rust", Some("test_pass_through.wasm"), false),
        ("pass-through, Python", Some("py_pass.wasm"), false),
        ("pass-through, JavaScript", Some("js_pass.wasm"), false),
        ("json-mask, Rust", Some("json_mask.wasm"), true),
        ("json-mask, Python", Some("py_json_mask.wasm"), true),
        ("json-mask, JavaScript", Some("js_json_mask.wasm"), true),
    ]
    .into_iter()
    .filter(|(name, plugin, _)| plugin.is_none() || name.contains(only.as_str()))
    .collect();
    // Python and JavaScript components are built only for the runs that use them.
    let languages: Vec<(&str, &str)> = [
        ("Python", "python", "py"),
        ("JavaScript", "javascript", "js"),
    ]
    .into_iter()
    .filter(|(name, _, _)| contenders.iter().any(|(c, _, _)| c.ends_with(name)))
    .map(|(_, lang, out)| (lang, out))
    .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let plugins = plugins(dir.path(), &cache, &languages);
    let primary = Broker::start();
    preload(&primary.addr, n);
    println!(
        "transforms benchmark: {n} JSON records of {SIZE} B, {TOPICS} topics x {PARTITIONS} partitions, {reps} runs each (median), interleaved"
    );
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); contenders.len()];
    for rep in 0..reps {
        for k in 0..contenders.len() {
            let i = (k + rep) % contenders.len();
            let (_, plugin, mask) = contenders[i];
            let run = common::run_kmirror(
                &primary.addr,
                "json-.*",
                n,
                rep * contenders.len() + i,
                &plugins,
                &cache,
                &chain(plugin, mask),
                // A CPU profile of each run (linux-perf): PERF_OUT=/tmp/tf.perf.
                std::env::var("PERF_OUT")
                    .ok()
                    .map(|out| format!("{out}.{i}.{rep}")),
            );
            runs[i].push(run);
        }
        let line: Vec<String> = contenders
            .iter()
            .zip(&runs)
            .map(|((name, _, _), r)| format!("{name} {:.0}/s", n as f64 / r[rep].steady))
            .collect();
        println!("  run {rep}: {}", line.join(", "));
    }
    let rate = |r: &[Run]| median(r.iter().map(|r| n as f64 / r.steady).collect());
    let base = rate(&runs[0]);
    println!(
        "\n  {:<26} {:>14} {:>9} {:>9} {:>9}",
        "contender", "rec/s (steady)", "vs none", "CPU s", "RSS MiB"
    );
    for ((name, _, _), r) in contenders.iter().zip(&runs) {
        println!(
            "  {name:<26} {:>14.0} {:>9.2} {:>9.2} {:>9.0}",
            rate(r),
            rate(r) / base,
            median(r.iter().map(|r| r.cpu).collect()),
            median(r.iter().map(|r| r.rss).collect())
        );
    }
}
