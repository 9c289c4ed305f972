//! `kmirror validate` and `kmirror run` on invalid configurations: exit codes and the
//! stated messages, with file:line, all problems at once; plugins are loaded and
//! role-checked without any cluster.

mod common;

use common::{kmirror, plugins_dir};
use std::path::{Path, PathBuf};

fn write(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("kmirror.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn header(dir: &Path) -> String {
    format!(
        "[clusters.primary]\nbootstrap_servers = \"127.0.0.1:1\"\n\n[clusters.backup]\nbootstrap_servers = \"127.0.0.1:2\"\n\n[plugins]\ndir = \"{}\"\ncache_dir = \"{}\"\n",
        plugins_dir().display(),
        dir.join("cache").display()
    )
}

fn validate(path: &Path) -> (Option<i32>, String, String) {
    let o = kmirror()
        .args(["validate", "--config"])
        .arg(path)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_valid_config_with_wasm_plugins_validates_without_clusters() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\ntopic_filter = {{ plugin = \"regex_filter.wasm\", config = {{ \"topics\" = \"orders.*\" }} }}\ngroup_filter = {{ plugin = \"regex_filter.wasm\" }}\nreplication_policy = {{ plugin = \"prod_prefix.wasm\", config = {{ \"prefix\" = \"prod-\" }} }}\n",
        header(dir.path())
    );
    let (code, out, err) = validate(&write(dir.path(), &text));
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("flow primary->backup"), "{out}");
    assert!(
        out.contains("replication_policy") && out.contains("prod_prefix.wasm"),
        "{out}"
    );
    assert!(
        out.contains("config_property_filter   builtin:default-config-property-filter"),
        "{out}"
    );
}

#[test]
fn every_problem_is_reported_with_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}\n[[flows]]\nsource = \"primary\"\ntarget = \"primary\"\nreplication_policy = {{ plugin = \"regex_filter.wasm\" }}\ntopic_filter = {{ plugin = \"prod_prefix.wasm\" }}\ngroup_filter = {{ plugin = \"regex_filter.wasm\", config = {{ \"groups\" = \"(\" }} }}\n\n[[flows]]\nsource = \"nowhere\"\ntarget = \"backup\"\n",
        header(dir.path())
    );
    let path = write(dir.path(), &text);
    let (code, _, err) = validate(&path);
    assert_eq!(code, Some(2), "{err}");
    let file = path.display().to_string();
    for expected in [
        format!("{file}:13:10: flows[0].target: source and target must be different clusters"),
        format!(
            "{file}:14:22: flows[0].replication_policy: plugin {}/regex_filter.wasm does not export the replication-policy role; it exports: topic-filter, group-filter",
            plugins_dir().display()
        ),
        format!(
            "{file}:15:16: flows[0].topic_filter: plugin {}/prod_prefix.wasm does not export the topic-filter role; it exports: replication-policy",
            plugins_dir().display()
        ),
        format!(
            "{file}:16:16: flows[0].group_filter: plugin {}/regex_filter.wasm rejected its group-filter configuration: `groups`: invalid regex list `(`",
            plugins_dir().display()
        ),
        format!(
            "{file}:19:10: flows[1].source: unknown cluster `nowhere`; clusters are: backup, primary"
        ),
    ] {
        assert!(err.contains(&expected), "missing:\n{expected}\nin:\n{err}");
    }
    assert!(err.contains("5 error(s)"), "{err}");
}

#[test]
fn syntax_and_type_errors_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = validate(&write(
        dir.path(),
        &format!(
            "{}\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\noffset_lag_max = \"lots\"\n",
            header(dir.path())
        ),
    ));
    assert_eq!(code, Some(2));
    assert!(
        err.contains(":14:18: offset_lag_max: invalid type: string \"lots\", expected u64"),
        "{err}"
    );
    let (code, _, err) = validate(&write(
        dir.path(),
        &format!(
            "{}\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\nbogus = 1\n",
            header(dir.path())
        ),
    ));
    assert_eq!(code, Some(2));
    assert!(err.contains(":14:1: bogus: unknown field `bogus`"), "{err}");
    let (code, _, err) = validate(Path::new("/no/such/kmirror.toml"));
    assert_eq!(code, Some(2));
    assert!(
        err.contains("/no/such/kmirror.toml") && err.contains("cannot read"),
        "{err}"
    );
}

#[test]
fn run_refuses_an_invalid_config_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        &format!(
            "{}\n[[flows]]\nsource = \"primary\"\ntarget = \"elsewhere\"\n",
            header(dir.path())
        ),
    );
    let o = kmirror()
        .args(["run", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown cluster `elsewhere`"));
}

#[test]
fn zero_durations_and_out_of_range_numbers_are_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}memory_limit_mib = 0\n\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\nemit_checkpoints_interval = \"0s\"\noffset_flush_interval = \"0ms\"\nemit_heartbeats_interval = \"0s\"\nrefresh_topics_interval = \"0s\"\nreplication_factor = 0\n",
        header(dir.path())
    );
    let path = write(dir.path(), &text);
    let (code, out, err) = validate(&path);
    assert_eq!(code, Some(2), "{out}{err}");
    let file = path.display().to_string();
    for (line, key) in [
        (10, "plugins.memory_limit_mib: must be between 1 and 4096"),
        (
            15,
            "flows[0].emit_checkpoints_interval: must be longer than 0",
        ),
        (16, "flows[0].offset_flush_interval: must be longer than 0"),
        (
            17,
            "flows[0].emit_heartbeats_interval: must be longer than 0",
        ),
        (
            18,
            "flows[0].refresh_topics_interval: must be longer than 0",
        ),
        (
            19,
            "flows[0].replication_factor: must be between 1 and 32767",
        ),
    ] {
        let expected = format!("{file}:{line}:1: {key}");
        assert!(err.contains(&expected), "missing `{expected}` in:\n{err}");
    }
    assert!(err.contains("6 error(s)"), "{err}");

    // A disabled feature's interval is not used, so it is not checked.
    let text = format!(
        "{}\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\nemit_heartbeats_enabled = false\nemit_heartbeats_interval = \"0s\"\n",
        header(dir.path())
    );
    let (code, out, err) = validate(&write(dir.path(), &text));
    assert_eq!(code, Some(0), "{out}{err}");
}

/// Runs `kmirror ARGS validate --config PATH`.
fn validate_with(args: &[&str], path: &Path) -> (Option<i32>, String) {
    let o = kmirror()
        .args(args)
        .args(["validate", "--config"])
        .arg(path)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn cached_entries(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| {
        d.filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        })
        .count()
    })
}

#[test]
fn cache_flags_override_the_configured_cache() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\nreplication_policy = {{ plugin = \"default_policy.wasm\" }}\n",
        header(dir.path())
    );
    let path = write(dir.path(), &text);
    let configured = dir.path().join("cache");

    let (code, err) = validate_with(&["--no-cache"], &path);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(cached_entries(&configured), 0, "--no-cache writes no cache");

    let elsewhere = dir.path().join("elsewhere");
    let (code, err) = validate_with(&["--cache-dir", elsewhere.to_str().unwrap()], &path);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(cached_entries(&elsewhere), 1, "--cache-dir is used");
    assert_eq!(
        cached_entries(&configured),
        0,
        "instead of the configured one"
    );

    let (code, err) = validate_with(&[], &path);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        cached_entries(&configured),
        1,
        "without flags: the configured cache"
    );
}

#[test]
fn secrets_never_reach_the_output_even_misspelled() {
    let dir = tempfile::tempdir().unwrap();
    let secrets = ["pw-Very-Secret-1", "typo-Very-Secret-2", "ks-Very-Secret-3"];
    let clusters = |password_key: &str| {
        format!(
            "[clusters.primary]\nbootstrap_servers = \"127.0.0.1:1\"\n[clusters.primary.librdkafka]\n\"security.protocol\" = \"SASL_PLAINTEXT\"\n\"sasl.mechanism\" = \"PLAIN\"\n\"sasl.username\" = \"mirror\"\n\"{password_key}\" = \"${{KMIRROR_TEST_PW}}\"\n\"ssl.key.password\" = \"{}\"\n\n[clusters.backup]\nbootstrap_servers = \"127.0.0.1:2\"\n[clusters.backup.librdkafka]\n\"sasl.passwrod\" = \"{}\"\n\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\n",
            secrets[2], secrets[1]
        )
    };
    let path = write(dir.path(), &clusters("sasl.password"));
    let o = kmirror()
        .env("KMIRROR_TEST_PW", secrets[0])
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(2), "{all}");
    assert!(
        all.contains("clusters.backup.librdkafka.\"sasl.passwrod\": librdkafka refuses it: No such configuration property"),
        "{all}"
    );
    for s in secrets {
        assert!(!all.contains(s), "{s} leaked:\n{all}");
    }

    // A valid configuration with secrets: run, with debug logs, never prints them.
    let text = clusters("sasl.password").replace(
        "[clusters.backup.librdkafka]\n\"sasl.passwrod\"",
        "[clusters.backup.librdkafka]\n\"sasl.password\"",
    );
    let path = write(dir.path(), &text);
    let log = dir.path().join("run.log");
    let mut child = kmirror()
        .env("KMIRROR_TEST_PW", secrets[0])
        .env("KMIRROR_LOG", "debug")
        .args(["run", "--config"])
        .arg(&path)
        .stdout(std::fs::File::create(dir.path().join("run.out")).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("flow error")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "kmirror did not start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    let all = std::fs::read_to_string(&log).unwrap()
        + &std::fs::read_to_string(dir.path().join("run.out")).unwrap();
    assert!(
        all.contains("configured flow") && all.contains("***"),
        "{all}"
    );
    for s in secrets {
        assert!(!all.contains(s), "{s} leaked:\n{all}");
    }
}
