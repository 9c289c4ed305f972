//! End to end: policies and record transforms written in Python and JavaScript. The
//! reference plugins of `plugins/python` and `plugins/javascript` are built by `kmirror
//! plugin build` (which runs componentize-py / componentize-js, then the `plugin check` suite
//! on the result), and a running daemon mirrors real topics through them: one flow named by
//! the Python prefix policy, filtered by the JavaScript regex filter, its records passed
//! through the JavaScript drop-by-header and the Python json-mask transforms; the reverse flow
//! the other way round. Records are checked on the target by an independent client.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;

const T: Duration = Duration::from_secs(120);

/// Builds the reference plugin `plugins/<project>` into `out`, compiled into the compile
/// cache `cache` (the daemon's), and returns its path.
fn build(project: &str, out: &Path, cache: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../plugins")
        .join(project);
    let mut args = vec![
        "--cache-dir",
        cache.to_str().unwrap(),
        "plugin",
        "build",
        source.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    if project.ends_with("json-mask") {
        // Checked with the configuration it runs with (`fields` is required).
        args.extend(["--config", "fields=email"]);
    }
    let (code, stdout, stderr) = kmirror_cli(&args);
    assert_eq!(code, Some(0), "{project}:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("passed, 0 failed"),
        "{project} is checked:\n{stdout}"
    );
    out.to_path_buf()
}

fn produce(c: &Client, topic: &str, partitions: i32, n: usize) {
    for i in 0..n {
        let v = format!("{topic}-{i}");
        c.produce(
            topic,
            i as i32 % partitions,
            v.as_bytes(),
            v.as_bytes(),
            &[],
            1_700_000_000_000 + i as i64,
        );
    }
    c.flush();
}

#[test]
fn python_and_javascript_policies_mirror_real_topics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("plugins.d");
    std::fs::create_dir(&plugins).unwrap();
    for (project, file) in [
        ("python/prefix-policy", "py_prefix.wasm"),
        ("python/regex-filter", "py_filter.wasm"),
        ("javascript/prefix-policy", "js_prefix.wasm"),
        ("javascript/regex-filter", "js_filter.wasm"),
        ("python/json-mask", "py_mask.wasm"),
        ("javascript/drop-by-header", "js_drop.wasm"),
    ] {
        build(project, &plugins.join(file), &dir.path().join("cache"));
    }

    let (primary, backup) = Broker::pair();
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    src.create_topic("keep-orders", 2);
    src.create_topic("other", 1);
    dst.create_topic("local-events", 1);
    dst.create_topic("skip-me", 1);
    produce(&src, "keep-orders", 2, 20);
    // JSON records for the transforms: every third tagged internal.
    for i in 0..9 {
        let v = format!(r#"{{"n": {i}, "email": "u{i}@example.com"}}"#);
        let tag: &[(&str, &[u8])] = if i % 3 == 0 {
            &[("internal", b"yes")]
        } else {
            &[]
        };
        src.produce(
            "keep-orders",
            0,
            b"json",
            v.as_bytes(),
            tag,
            1_700_000_100_000 + i,
        );
    }
    src.flush();
    produce(&src, "other", 1, 5);
    produce(&dst, "local-events", 1, 10);
    produce(&dst, "skip-me", 1, 5);

    let status = free_addr();
    let flows = |source: &str,
                 target: &str,
                 policy: &str,
                 prefix: &str,
                 filter: &str,
                 topics: &str| {
        flow_table(
            source,
            target,
            &format!(
                r#"replication_policy = {{ plugin = "{policy}", config = {{ prefix = "{prefix}" }} }}
topic_filter = {{ plugin = "{filter}", config = {{ topics = "{topics}" }} }}"#
            ),
        )
    };
    let forward = format!(
        "{}record_transforms = [{{ plugin = \"js_drop.wasm\", config = {{ header = \"internal\" }} }}, {{ plugin = \"py_mask.wasm\", config = {{ fields = \"email\" }} }}]\n",
        flows(
            "primary",
            "backup",
            "py_prefix.wasm",
            "py-",
            "js_filter.wasm",
            "keep.*",
        )
    );
    let reverse = flows(
        "backup",
        "primary",
        "js_prefix.wasm",
        "js-",
        "py_filter.wasm",
        "local.*",
    );
    let cfg = config_file(
        dir.path(),
        &primary.addr,
        &backup.addr,
        &plugins,
        Some(&status),
        &format!("{forward}\n{reverse}"),
    );
    let (code, out, err) = kmirror_cli(&["validate", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");

    let k = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));
    // Named by the Python policy, chosen by the JavaScript filter.
    let forward = dst.read_all("py-primary.keep-orders", 2, 26, T);
    assert_eq!(forward.len(), 26, "log:\n{}", k.logs());
    // Through the JavaScript drop-by-header and the Python json-mask: the six untagged
    // JSON records, masked; the plain ones (not JSON) unchanged.
    let masked: Vec<serde_json::Value> = forward
        .iter()
        .filter(|r| r.key.as_deref() == Some(b"json"))
        .map(|r| serde_json::from_slice(r.value.as_deref().unwrap_or_default()).expect("JSON"))
        .collect();
    let mut ns: Vec<u64> = masked.iter().filter_map(|v| v["n"].as_u64()).collect();
    ns.sort();
    assert_eq!(ns, [1, 2, 4, 5, 7, 8], "{masked:?}");
    assert!(masked.iter().all(|v| v["email"] == "***"), "{masked:?}");
    assert_eq!(
        count_values(&forward)
            .keys()
            .filter(|v| v.starts_with("keep-orders-"))
            .count(),
        20
    );
    // Named by the JavaScript policy, chosen by the Python filter.
    let reverse = src.read_all("js-backup.local-events", 1, 10, T);
    assert_eq!(count_values(&reverse).len(), 10, "log:\n{}", k.logs());

    // The filters' answers hold on both sides; nothing mirrored back.
    let (on_backup, on_primary) = (dst.topics(), src.topics());
    assert!(!on_backup.contains_key("py-primary.other"), "{on_backup:?}");
    assert!(
        !on_primary.contains_key("js-backup.skip-me"),
        "{on_primary:?}"
    );
    assert!(
        !on_backup.keys().any(|t| t.contains("js-backup")),
        "{on_backup:?}"
    );
    assert!(
        !on_primary.keys().any(|t| t.contains("py-primary")),
        "{on_primary:?}"
    );
    assert_eq!(on_backup.get("py-primary.keep-orders"), Some(&2));

    // Every one of the four components served calls in the daemon.
    let (_, s) = http_get(&status, "/status").expect("status");
    for file in [
        "py_prefix.wasm",
        "py_filter.wasm",
        "js_prefix.wasm",
        "js_filter.wasm",
        "py_mask.wasm",
        "js_drop.wasm",
    ] {
        let name = plugins.join(file).display().to_string();
        let entry = s["plugins"]
            .as_array()
            .and_then(|p| p.iter().find(|p| p["name"] == name.as_str()))
            .unwrap_or_else(|| panic!("{name} in /status: {s}"));
        assert!(entry["calls"].as_u64().unwrap_or(0) > 0, "{entry}");
        let errors: u64 = entry["errors"]
            .as_object()
            .map_or(0, |e| e.values().filter_map(|n| n.as_u64()).sum());
        assert_eq!(errors, 0, "{entry}");
    }
    drop(k);
}
