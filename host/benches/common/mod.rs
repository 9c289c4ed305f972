//! What the benchmarks that run the real binary share: timing a `kmirror` copying preloaded
//! topics to a fresh target broker (steady state read from its `/status` counter), the
//! process's CPU and peak RSS, medians, and running its CLI.

#![allow(dead_code)]

use super::support::{Broker, free_addr, http_get};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// `kmirror --cache-dir cache args...`, which must succeed.
pub fn kmirror_cli(cache: &Path, args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .output()
        .expect("kmirror");
    assert!(
        o.status.success(),
        "kmirror {args:?}:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Seconds since the epoch.
pub fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// (utime + stime in seconds, peak RSS in MiB) of a running process.
pub fn usage(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let cpu = fields.get(11..13).map_or(0.0, |f| {
        f.iter().filter_map(|v| v.parse::<f64>().ok()).sum::<f64>() / ticks
    });
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |k| k / 1024.0);
    (cpu, rss)
}

/// A finished run: wall seconds from process start, steady-state seconds, CPU, RSS.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    pub total: f64,
    pub steady: f64,
    pub cpu: f64,
    pub rss: f64,
}

/// A `[clusters.<alias>.librdkafka]` table of the `key=value,…` pairs in the environment
/// variable `var` (`SOURCE_RDKAFKA`, `TARGET_RDKAFKA`: to measure a librdkafka setting).
fn librdkafka(alias: &str, var: &str) -> String {
    let Ok(pairs) = std::env::var(var) else {
        return String::new();
    };
    let mut table = format!("[clusters.{alias}.librdkafka]\n");
    for (k, v) in pairs.split(',').filter_map(|kv| kv.split_once('=')) {
        table.push_str(&format!("\"{}\" = \"{}\"\n", k.trim(), v.trim()));
    }
    table
}

/// The lines of `KMIRROR_FLOW` (e.g. `single_instance = true`) for an at-least-once run's
/// flow (an exactly-once run, `flow_extra` naming it, takes none of them).
fn kmirror_flow(flow_extra: &str) -> String {
    match std::env::var("KMIRROR_FLOW") {
        Ok(lines) if !flow_extra.contains("exactly_once") => format!("{lines}\n"),
        _ => String::new(),
    }
}

/// One kmirror run: the flow copies the topics matching `topics` from `src` to a fresh
/// broker, with `flow_extra` lines in its `[[flows]]` table and components from `plugins`
/// (compiled into `cache`); timed until `n` records are acked.
pub fn run_kmirror(
    src: &str,
    topics: &str,
    n: usize,
    rep: usize,
    plugins: &Path,
    cache: &Path,
    flow_extra: &str,
    profile: Option<String>,
) -> Run {
    let dst = Broker::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let alias = format!("src{rep}");
    let config = dir.path().join("kmirror.toml");
    std::fs::write(
        &config,
        format!(
            "[status]\nlisten = \"{status}\"\n[clusters.{alias}]\nbootstrap_servers = \"{src}\"\n{}[clusters.backup]\nbootstrap_servers = \"{}\"\n{}[plugins]\ndir = \"{}\"\ncache_dir = \"{}\"\n[[flows]]\nsource = \"{alias}\"\ntarget = \"backup\"\nreplication_factor = 1\nrefresh_topics_interval = \"1s\"\nemit_heartbeats_enabled = false\ntopic_filter = {{ plugin = \"regex_filter.wasm\", config = {{ \"topics\" = \"{topics}\" }} }}\nreplication_policy = {{ plugin = \"default_policy.wasm\" }}\n{}{flow_extra}\n",
            librdkafka(&alias, "SOURCE_RDKAFKA"),
            dst.addr,
            librdkafka("backup", "TARGET_RDKAFKA"),
            plugins.display(),
            cache.display(),
            std::env::var("TASKS").map(|t| format!("replication_tasks = {t}\n")).unwrap_or_default()
                + &kmirror_flow(flow_extra),
        ),
    )
    .expect("config");
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .args(["run", "--config"])
        .arg(&config)
        .env(
            "KMIRROR_LOG",
            std::env::var("KMIRROR_LOG").unwrap_or("warn".into()),
        )
        .stdout(Stdio::null())
        // `BENCH_LOG=file`: kmirror's log (with `KMIRROR_LOG`), appended.
        .stderr(match std::env::var("BENCH_LOG") {
            Ok(path) => std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map(Stdio::from)
                .expect("BENCH_LOG"),
            Err(_) => Stdio::null(),
        })
        .spawn()
        .expect("kmirror");
    // A CPU profile of kmirror in steady state (perf, from Debian's linux-perf), attached
    // once the first tenth is copied: `perf record -p` samples only the threads that exist
    // when it attaches, and the replication threads start after the group assignment.
    let mut perf: Option<std::process::Child> = None;
    let attach = |pid: u32, out: &str| {
        Command::new("perf")
            .args(["record", "-F", "999", "-g", "-o", out, "-p"])
            .arg(pid.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("perf")
    };
    let records = || {
        http_get(&status, "/status")
            .and_then(|(_, s)| {
                let f = &s["flows"][0];
                Some(f["records"].as_u64()? + f["records_dropped"].as_u64().unwrap_or(0))
            })
            .unwrap_or(0) as usize
    };
    // Steady state: from the first tenth of the records to the last.
    let mut first = None;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut sample;
    loop {
        let done = records();
        if done >= n / 10 {
            first.get_or_insert_with(Instant::now);
            if perf.is_none() {
                perf = profile.as_deref().map(|out| attach(child.id(), out));
            }
        }
        sample = usage(child.id());
        if done >= n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "kmirror copied only {done} of {n}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let total = started.elapsed().as_secs_f64();
    let steady = first.map_or(total, |f| f.elapsed().as_secs_f64() / 0.9);
    if let Some(mut perf) = perf {
        // SAFETY: signalling our own child; perf writes its file on SIGINT.
        unsafe { libc::kill(perf.id() as i32, libc::SIGINT) };
        let _ = perf.wait();
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    Run {
        total,
        steady: steady.max(1e-3),
        cpu: sample.0,
        rss: sample.1,
    }
}

/// The median of `v`.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
