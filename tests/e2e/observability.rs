//! The Grafana dashboard and the Prometheus alerting rules (deploy/) against the real
//! thing: two Tansu brokers, a running kmirror, and a real Prometheus (Debian's package,
//! installed by scripts/setup.sh) scraping its `/metrics` every second with the rules
//! loaded (their `for:` shortened to 2 s in a copy). Every metric the dashboard and the
//! rules name is served; every dashboard query runs and returns series; every rule
//! evaluates; and a record the target will not take makes KmirrorPartitionPaused fire.

mod support;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::*;

const T: Duration = Duration::from_secs(60);
const FLOW: &str = "primary->backup";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// A Prometheus server on a free loopback port with its storage in a temporary directory,
/// killed when dropped or when the test process dies.
struct Prometheus {
    addr: String,
    log: PathBuf,
    child: Child,
}

impl Prometheus {
    /// Starts one scraping `target` every second, evaluating `rules` every second.
    fn start(dir: &Path, target: &str, rules: &Path) -> Prometheus {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {}\n\
                 scrape_configs:\n  - job_name: kmirror\n    static_configs:\n      - targets: [\"{target}\"]\n",
                rules.display()
            ),
        )
        .expect("prometheus.yml");
        let addr = free_addr();
        let log = dir.join("prometheus.log");
        let mut cmd = Command::new("prometheus");
        cmd.arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"));
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn().expect("start prometheus");
        let p = Prometheus { addr, log, child };
        p.wait("Prometheus to be ready", || {
            http(&p.addr, "/-/ready")
                .filter(|r| r.split_whitespace().nth(1) == Some("200"))
                .map(|_| ())
        });
        p
    }

    /// `data` of the API's answer to `GET path`, once it succeeded.
    fn api(&self, path: &str) -> Option<serde_json::Value> {
        let (_, body) = http_get(&self.addr, path)?;
        (body["status"] == "success").then(|| body["data"].clone())
    }

    /// The series of the instant query `q`; panics if Prometheus refuses it.
    fn query(&self, q: &str) -> Vec<serde_json::Value> {
        let (code, body) = http_get(&self.addr, &format!("/api/v1/query?query={}", encode(q)))
            .unwrap_or_else(|| panic!("no answer to {q}"));
        assert_eq!(body["status"], "success", "{code} {q}: {body}");
        body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Alerts by state: (name, state, alert).
    fn alerts(&self) -> Vec<(String, String, serde_json::Value)> {
        let alerts = self.api("/api/v1/alerts").unwrap_or_default();
        alerts["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                let name = a["labels"]["alertname"].as_str().unwrap_or_default();
                let state = a["state"].as_str().unwrap_or_default();
                (name.to_string(), state.to_string(), a.clone())
            })
            .collect()
    }

    /// Polls `f` for at most [`T`]; panics with Prometheus's log and scrape targets.
    fn wait<V>(&self, what: &str, f: impl FnMut() -> Option<V>) -> V {
        poll_until(T, f).unwrap_or_else(|| {
            let targets = self.api("/api/v1/targets").unwrap_or_default();
            panic!(
                "timed out after {T:?} waiting for {what}\ntargets: {targets}\nprometheus log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            )
        })
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `q` percent-encoded for a query string.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The rules file with every `for:` shortened to 2 s, written into `dir`.
fn fast_rules(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(repo("deploy/prometheus/kmirror-rules.yml")).expect("rules");
    let fast: String = text
        .lines()
        .map(|l| match l.trim_start().strip_prefix("for: ") {
            Some(_) => format!("{}for: 2s\n", &l[..l.len() - l.trim_start().len()]),
            None => format!("{l}\n"),
        })
        .collect();
    assert!(fast.matches("for: 2s").count() >= 9, "{fast}");
    let path = dir.join("kmirror-rules.yml");
    std::fs::write(&path, fast).expect("rules");
    path
}

/// The dashboard's queries as Grafana sends them for flow [`FLOW`] (rate windows of 10 s,
/// ten scrapes).
fn dashboard_queries() -> Vec<String> {
    let text =
        std::fs::read_to_string(repo("deploy/grafana/kmirror-dashboard.json")).expect("dashboard");
    let d: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut panels = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        panels.push(p.clone());
        panels.extend(p["panels"].as_array().into_iter().flatten().cloned());
    }
    panels
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_string))
        .map(|q| q.replace("$__rate_interval", "10s").replace("$flow", FLOW))
        .collect()
}

/// The `kmirror_*` names in `text`.
fn metric_names(text: &str) -> std::collections::BTreeSet<String> {
    let name = regex::Regex::new(r"\bkmirror_[a-z_]+").expect("regex");
    name.find_iter(text)
        .map(|m| m.as_str().to_string())
        .collect()
}

/// The names of the series in a `/metrics` page.
fn served(metrics: &str) -> std::collections::BTreeSet<String> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_dashboard_and_the_alerts_work_against_a_real_prometheus() {
    let installed = Command::new("prometheus").arg("--version").output();
    assert!(
        installed.is_ok_and(|o| o.status.success()),
        "the Prometheus server is not installed: run scripts/setup.sh (as root: it installs Debian's prometheus package)"
    );
    let (primary, backup) = Broker::pair();
    let src = Client::new(&primary.addr);
    src.create_topic("orders", 3);
    for i in 0..30 {
        let id = format!("id-{i}");
        src.produce(
            "orders",
            i % 3,
            id.as_bytes(),
            id.as_bytes(),
            &[],
            1_700_000_000_000,
        );
    }
    src.flush();

    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let flows = flow_table(
        "primary",
        "backup",
        // The audit on too: the rules and the dashboard name its series.
        "replication_policy = { plugin = \"default_policy.wasm\" }\naudit_interval = \"1s\"",
    );
    let cfg = config_file(
        dir.path(),
        &primary.addr,
        &backup.addr,
        &plugins_dir(),
        Some(&status),
        &flows,
    );
    // The target takes no record over 10 kB: a larger one pauses its partition.
    let text = std::fs::read_to_string(&cfg).expect("config");
    std::fs::write(
        &cfg,
        format!("{text}\n[clusters.backup.librdkafka]\n\"message.max.bytes\" = \"10000\"\n"),
    )
    .expect("config");
    let k = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));
    let prometheus = Prometheus::start(dir.path(), &status, &fast_rules(dir.path()));

    // Every rule is loaded; with the dashboard's queries they name only served series.
    let rules = prometheus.wait("the rules to be loaded", || {
        let data = prometheus.api("/api/v1/rules")?;
        let rules: Vec<serde_json::Value> = data["groups"]
            .as_array()?
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        (rules.len() == 10).then_some(rules)
    });
    let queries = dashboard_queries();
    let named = metric_names(
        &(queries.join("\n")
            + &rules
                .iter()
                .map(|r| r["query"].to_string())
                .collect::<String>()),
    );
    let mut missing = Vec::new();
    let all_served = poll_until(T, || {
        let page = http_text(&status, "/metrics")?;
        missing = named.difference(&served(&page)).cloned().collect();
        missing.is_empty().then_some(())
    });
    assert!(
        all_served.is_some(),
        "/metrics lacks {missing:?}:\n{}\nlog:\n{}",
        http_text(&status, "/metrics").unwrap_or_default(),
        k.logs()
    );

    let lag = poll_until(T, || {
        (prometheus.query("kmirror_partition_lag_records").len() == 3).then_some(())
    });
    assert!(
        lag.is_some(),
        "Prometheus never had the lag of the 3 partitions: {:?}\n/status: {:?}\nlog:\n{}",
        prometheus.query("kmirror_partition_lag_records"),
        http_get(&status, "/status").map(|(_, s)| s),
        k.logs()
    );
    // Every dashboard query runs; each returns series (but those that show only non-zero
    // values, of which there are none yet).
    prometheus.wait("every dashboard query to return series", || {
        queries
            .iter()
            .all(|q| q.contains("> 0") || !prometheus.query(q).is_empty())
            .then_some(())
    });
    prometheus.wait("every rule to evaluate", || {
        let data = prometheus.api("/api/v1/rules")?;
        let health: Vec<String> = data["groups"][0]["rules"]
            .as_array()?
            .iter()
            .map(|r| r["health"].to_string())
            .collect();
        health.iter().all(|h| h == "\"ok\"").then_some(())
    });
    assert!(
        !prometheus
            .alerts()
            .iter()
            .any(|(n, _, _)| n == "KmirrorPartitionPaused"),
        "{:?}",
        prometheus.alerts()
    );

    // A record the target will not take: its partition pauses, and the alert fires.
    src.produce(
        "orders",
        0,
        b"poison",
        &vec![b'x'; 20_000],
        &[],
        1_700_000_000_000,
    );
    src.flush();
    let poisoned = std::time::Instant::now();
    let alert = prometheus.wait("KmirrorPartitionPaused to fire", || {
        let alerts = prometheus.alerts();
        let firing = |name: &str| alerts.iter().find(|(n, s, _)| n == name && s == "firing");
        // The lone instance leads and is ready: those alerts have resolved.
        if ["KmirrorNoLeader", "KmirrorNotReady"]
            .iter()
            .any(|n| firing(n).is_some())
        {
            return None;
        }
        firing("KmirrorPartitionPaused").map(|(_, _, a)| a.clone())
    });
    eprintln!(
        "FIGURES {} dashboard queries and {} rules checked; KmirrorPartitionPaused fired {:.1?} after the record (for: 2s)",
        queries.len(),
        rules.len(),
        poisoned.elapsed()
    );
    assert_eq!(alert["labels"]["flow"], FLOW, "{alert}");
    assert_eq!(alert["labels"]["severity"], "critical", "{alert}");
    assert_eq!(alert["value"], "1e+00", "{alert}");
    let summary = alert["annotations"]["summary"].as_str().unwrap_or_default();
    assert!(
        summary.contains(FLOW) && summary.contains("paused"),
        "{summary}"
    );
    let degraded = prometheus.wait("KmirrorFlowDegraded to fire", || {
        let alerts = prometheus.alerts();
        alerts
            .into_iter()
            .find(|(n, s, _)| n == "KmirrorFlowDegraded" && s == "firing")
    });
    assert_eq!(degraded.2["labels"]["flow"], FLOW);
    let (_, s) = http_get(&status, "/status").expect("status");
    assert!(
        !s["flows"][0]["partitions"]["orders"]["0"]["paused"].is_null(),
        "{s}"
    );
}
