//! Plugin tier: the reference plugins and the hostile test components, built from
//! `plugins/` into real components (both kinds: zero-import and WASI-importing), loaded by
//! the real host.

mod common;

use common::{both_kinds, plugins_dir};
use kmirror::plugin::cache::{CacheOutcome, ComponentCache};
use kmirror::plugin::{Limits, Plugin, PluginComponent, PluginHost, PluginSource};
use kmirror::policy::{Config, PluginError, ReplicationPolicy, Role, TopicFilter, TrapKind};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn host() -> PluginHost {
    let limits = Limits {
        call_deadline: Duration::from_millis(200),
        memory_bytes: 32 << 20,
        ..Limits::default()
    };
    PluginHost::new(limits, None).unwrap()
}

fn open(host: &PluginHost, path: &std::path::Path) -> Plugin {
    Plugin::open(host, &PluginSource::File(path.to_path_buf())).unwrap_or_else(|e| panic!("{e}"))
}

fn topic_filter(host: &PluginHost, path: &std::path::Path) -> Arc<dyn TopicFilter> {
    open(host, path).topic_filter(&Config::new()).unwrap()
}

fn policy(
    host: &PluginHost,
    path: &std::path::Path,
    config: &Config,
) -> Arc<dyn ReplicationPolicy> {
    open(host, path).replication_policy(config).unwrap()
}

#[test]
fn reference_plugins_export_their_roles() {
    let host = host();
    let expected = [
        ("default_policy", vec![Role::ReplicationPolicy]),
        ("identity_policy", vec![Role::ReplicationPolicy]),
        ("prod_prefix", vec![Role::ReplicationPolicy]),
        ("regex_filter", vec![Role::TopicFilter, Role::GroupFilter]),
        ("default_config_filter", vec![Role::ConfigPropertyFilter]),
    ];
    for (name, roles) in expected {
        for path in both_kinds(name) {
            assert_eq!(open(&host, &path).roles(), roles, "{}", path.display());
        }
    }
}

#[test]
fn a_component_without_a_role_is_rejected_naming_its_exports() {
    let host = host();
    for path in both_kinds("test_no_role") {
        let err = PluginComponent::load(&host, &path)
            .err()
            .expect("must be rejected");
        let text = err.to_string();
        assert!(matches!(err, PluginError::NoRole { .. }), "{text}");
        assert!(
            text.contains(&path.display().to_string())
                && text.contains("example:greeter/greet@1.0.0"),
            "{text}"
        );
    }
}

#[test]
fn a_missing_role_is_named() {
    let host = host();
    let plugin = open(&host, &both_kinds("default_policy")[0]);
    let err = plugin
        .topic_filter(&Config::new())
        .err()
        .expect("no topic filter");
    assert!(
        err.to_string()
            .contains("does not export the topic-filter role; it exports: replication-policy"),
        "{err}"
    );
}

#[test]
fn bad_files_are_explained() {
    let host = host();
    let dir = tempfile::tempdir().unwrap();
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let err = PluginComponent::load(&host, &core)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("core WebAssembly module") && err.contains("core.wasm"),
        "{err}"
    );
    let text = dir.path().join("notes.wasm");
    std::fs::write(&text, b"hello").unwrap();
    let err = PluginComponent::load(&host, &text)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("not a WebAssembly file"), "{err}");
    let missing = dir.path().join("missing.wasm");
    let err = PluginComponent::load(&host, &missing)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("cannot read plugin") && err.contains("missing.wasm"),
        "{err}"
    );
}

#[test]
fn configuration_errors_come_back_from_the_guest() {
    let host = host();
    for path in both_kinds("prod_prefix") {
        let plugin = open(&host, &path);
        let bad: Config = [("prefix", "x"), ("colour", "blue")].into_iter().collect();
        let err = plugin.replication_policy(&bad).err().expect("rejected");
        assert!(
            matches!(
                err,
                PluginError::Config {
                    role: Role::ReplicationPolicy,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("unknown key `colour`"), "{err}");
        let ok: Config = [("prefix", "dr-")].into_iter().collect();
        let p = policy(&host, &path, &ok);
        assert_eq!(
            p.format_remote_topic("east", "orders").unwrap(),
            "dr-east.orders"
        );
    }
}

#[test]
fn a_trap_is_contained_and_the_plugin_keeps_serving() {
    let host = host();
    for path in both_kinds("test_trap") {
        let f = topic_filter(&host, &path);
        assert!(f.should_replicate_topic("orders").unwrap());
        let err = f.should_replicate_topic("panic").unwrap_err();
        assert!(
            matches!(
                err,
                PluginError::Trap {
                    kind: TrapKind::Unreachable,
                    function: "should-replicate-topic",
                    ..
                }
            ),
            "{}: {err}",
            path.display()
        );
        assert!(
            f.should_replicate_topic("orders").unwrap(),
            "re-instantiated after the trap"
        );
        assert_eq!(
            f.should_replicate_topics(&["a".into(), "b".into()])
                .unwrap(),
            vec![true, true]
        );
    }
}

#[test]
fn an_endless_loop_is_interrupted_at_the_deadline() {
    let host = host();
    for path in both_kinds("test_loop_forever") {
        let f = topic_filter(&host, &path);
        let started = Instant::now();
        let err = f.should_replicate_topic("loop").unwrap_err();
        assert!(
            matches!(err, PluginError::Timeout { deadline, .. } if deadline == Duration::from_millis(200)),
            "{err}"
        );
        // Bounded by the deadline (generously, for a loaded CI machine), not hanging.
        assert!(started.elapsed() < Duration::from_secs(20));
        assert!(f.should_replicate_topic("orders").unwrap());
    }
}

#[test]
fn a_memory_bomb_hits_the_cap() {
    let host = host();
    for path in both_kinds("test_memory_bomb") {
        let f = topic_filter(&host, &path);
        let err = f.should_replicate_topic("bomb").unwrap_err();
        assert!(
            matches!(err, PluginError::MemoryLimit { limit, .. } if limit == 32 << 20),
            "{}: {err}",
            path.display()
        );
        assert!(f.should_replicate_topic("orders").unwrap());
    }
}

#[test]
fn plugins_get_no_capabilities() {
    let host = host();
    // A listener the plugin would reach if sockets were allowed.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let secret_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret_file.path(), "secret").unwrap();
    let file = secret_file.path().to_str().unwrap();
    // SAFETY: set before any plugin runs; the variable is only read.
    unsafe { std::env::set_var("KMIRROR_TEST_SECRET", "hunter2") };
    for path in both_kinds("test_sneaky") {
        let p = policy(&host, &path, &Config::new());
        // A guest for a target without the capability at all panics in std: a trap.
        let probe = |what: &str, arg: &str| match p.format_remote_topic(what, arg) {
            Ok(out) => out,
            Err(PluginError::Trap {
                kind: TrapKind::Unreachable,
                ..
            }) => "trap".to_string(),
            Err(e) => panic!("{what}: unexpected error {e}"),
        };
        let denied = |what: &str, arg: &str| {
            let out = probe(what, arg);
            assert!(
                out.starts_with("err:") || out == "trap",
                "{}: {what} {arg} gave {out}",
                path.display()
            );
        };
        denied("file", file);
        denied("file", "/etc/passwd");
        denied("dir", "/");
        denied("dir", ".");
        denied("env", "KMIRROR_TEST_SECRET");
        denied("env", "PATH");
        denied("socket", &addr);
        // No environment at all: an empty one (WASI) or none (a trap on a target without one).
        let env = probe("env-count", "");
        assert!(env == "ok:0" || env == "trap", "{env}");
        // Clocks are stopped at the epoch (or absent), randomness is fixed.
        let clock = probe("clock", "");
        assert!(
            clock == "ok:0" || clock.starts_with("err:") || clock == "trap",
            "{clock}"
        );
        let random = probe("random", "");
        let again = policy(&host, &path, &Config::new())
            .format_remote_topic("random", "")
            .unwrap_or("trap".into());
        assert_eq!(
            random, again,
            "randomness must be fixed, not seeded from the host"
        );
    }
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err(), "nothing connected");
}

#[test]
fn the_compile_cache_is_reused_and_keyed_by_content() {
    let dir = tempfile::tempdir().unwrap();
    let cache = ComponentCache::new(dir.path().join("cache"));
    let host = PluginHost::new(Limits::default(), Some(cache)).unwrap();
    let path = &both_kinds("default_policy")[0];
    let first = PluginComponent::load(&host, path).unwrap();
    assert_eq!(first.cache_outcome(), CacheOutcome::Compiled);
    let second = PluginComponent::load(&host, path).unwrap();
    assert_eq!(second.cache_outcome(), CacheOutcome::Hit);
    assert_eq!(cwasm_entries(&dir.path().join("cache")).len(), 1);

    // A different component is a different entry; a corrupted entry is recompiled.
    let other = &both_kinds("prod_prefix")[0];
    assert_eq!(
        PluginComponent::load(&host, other).unwrap().cache_outcome(),
        CacheOutcome::Compiled
    );
    for p in cwasm_entries(&dir.path().join("cache")) {
        let mut bytes = std::fs::read(&p).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&p, bytes).unwrap();
    }
    let reloaded = PluginComponent::load(&host, path).unwrap();
    assert_eq!(reloaded.cache_outcome(), CacheOutcome::Compiled);
    let p = reloaded.replication_policy(&Config::new()).unwrap();
    assert_eq!(p.format_remote_topic("a", "b").unwrap(), "a.b");
}

#[test]
fn every_test_component_is_built() {
    let dir = plugins_dir();
    for name in [
        "test_trap",
        "test_loop_forever",
        "test_memory_bomb",
        "test_sneaky",
        "test_no_role",
        "test_broken_policy",
    ] {
        for path in both_kinds(name) {
            assert!(path.is_file(), "{} missing", path.display());
        }
    }
    assert!(dir.is_dir());
}

/// Opens `path` and asks for every role with `config`, calling each role function once:
/// every outcome must come back (not hang), and is returned as text.
fn every_role_function(host: &PluginHost, path: &std::path::Path, config: &Config) -> Vec<String> {
    let plugin = open(host, path);
    let show = |r: Result<String, PluginError>| match r {
        Ok(v) => v,
        Err(e) => format!("error: {e}"),
    };
    let mut out = Vec::new();
    match plugin.topic_filter(config) {
        Ok(f) => {
            out.push(show(f.should_replicate_topic("t").map(|b| b.to_string())));
            out.push(show(
                f.should_replicate_topics(&["t".into()])
                    .map(|b| format!("{b:?}")),
            ));
        }
        Err(e) => out.push(format!("error: {e}")),
    }
    match plugin.group_filter(config) {
        Ok(f) => out.push(show(f.should_replicate_group("g").map(|b| b.to_string()))),
        Err(e) => out.push(format!("error: {e}")),
    }
    match plugin.config_property_filter(config) {
        Ok(f) => out.push(show(
            f.should_replicate_config_property("x")
                .map(|b| b.to_string()),
        )),
        Err(e) => out.push(format!("error: {e}")),
    }
    match plugin.replication_policy(config) {
        Ok(p) => {
            out.push(show(p.format_remote_topic("a", "t")));
            out.push(show(p.topic_source("a.t").map(|s| format!("{s:?}"))));
            out.push(show(p.upstream_topic("a.t").map(|s| format!("{s:?}"))));
        }
        Err(e) => out.push(format!("error: {e}")),
    }
    out
}

#[test]
fn a_plugin_that_sleeps_is_stopped_in_configure_and_in_every_role_function() {
    let host = host();
    for path in both_kinds("test_sleeper") {
        for mode in ["configure", "calls"] {
            let config: Config = [("sleep", mode)].into_iter().collect();
            let started = Instant::now();
            let outcomes = every_role_function(&host, &path, &config);
            // The guest asks to sleep 30 s per call; every call must end long before.
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{mode}: {:?}",
                started.elapsed()
            );
            assert!(
                outcomes.iter().all(|o| o.starts_with("error:")),
                "{}: sleep in {mode}: {outcomes:?}",
                path.display()
            );
            if path.to_string_lossy().contains("wasip2") {
                assert!(
                    outcomes.iter().all(|o| o.contains("may not sleep")),
                    "{mode}: {outcomes:?}"
                );
            }
        }
        // Without a sleep it works.
        let fine = every_role_function(&host, &path, &Config::new());
        assert!(fine.iter().all(|o| !o.starts_with("error:")), "{fine:?}");
    }
}

#[test]
fn oversized_and_miscounted_answers_are_refused() {
    let host = host();
    for path in both_kinds("test_liar") {
        let huge: Config = [("lie", "huge")].into_iter().collect();
        let p = policy(&host, &path, &huge);
        let err = p.format_remote_topic("a", "bad").unwrap_err();
        assert!(
            matches!(
                &err,
                PluginError::Output {
                    function: "format-remote-topic",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("8388608 bytes"), "{err}");
        assert_eq!(
            p.format_remote_topic("a", "good").unwrap(),
            "a.good",
            "the instance keeps serving"
        );
        let err = p
            .format_remote_topics("a", &["good".into(), "bad".into()])
            .unwrap_err();
        assert!(matches!(err, PluginError::Output { .. }), "{err}");

        let count: Config = [("lie", "count")].into_iter().collect();
        let f = open(&host, &path).topic_filter(&count).unwrap();
        let err = f
            .should_replicate_topics(&["a".into(), "b".into()])
            .unwrap_err();
        assert!(err.to_string().contains("3 answers for 2 names"), "{err}");
    }
}

#[test]
fn a_component_over_the_size_limit_is_not_compiled() {
    let limits = Limits {
        max_component_bytes: 1000,
        ..Limits::default()
    };
    let host = PluginHost::new(limits, None).unwrap();
    let err = Plugin::open(
        &host,
        &PluginSource::File(both_kinds("default_policy")[0].clone()),
    )
    .err()
    .expect("refused");
    assert!(err.to_string().contains("over the limit of 1000"), "{err}");
}

#[test]
fn compiling_is_bounded_in_time() {
    let limits = Limits {
        compile_timeout: Duration::from_millis(1),
        ..Limits::default()
    };
    let host = PluginHost::new(limits, None).unwrap();
    let started = Instant::now();
    let err = Plugin::open(
        &host,
        &PluginSource::File(both_kinds("regex_filter")[0].clone()),
    )
    .err()
    .expect("too slow");
    assert!(
        err.to_string().contains("compiling took longer than 1ms"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the caller does not wait for the compiler"
    );
}

fn cwasm_entries(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect()
}

#[test]
fn another_plugins_entry_moved_under_a_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cache_dir = dir.path().join("cache");
    let host = PluginHost::new(Limits::default(), Some(ComponentCache::new(&cache_dir))).unwrap();
    let (policy_path, prefix_path) = (
        &both_kinds("default_policy")[0],
        &both_kinds("prod_prefix")[0],
    );
    PluginComponent::load(&host, policy_path).unwrap();
    let policy_entry = cwasm_entries(&cache_dir).pop().unwrap();
    PluginComponent::load(&host, prefix_path).unwrap();
    let prefix_entry = cwasm_entries(&cache_dir)
        .into_iter()
        .find(|p| *p != policy_entry)
        .unwrap();
    // The attack: prod_prefix's compiled code under default_policy's key.
    std::fs::copy(&prefix_entry, &policy_entry).unwrap();
    let loaded = PluginComponent::load(&host, policy_path).unwrap();
    assert_eq!(
        loaded.cache_outcome(),
        CacheOutcome::Compiled,
        "the forged entry is refused"
    );
    let p = loaded.replication_policy(&Config::new()).unwrap();
    assert_eq!(
        p.format_remote_topic("us-west", "topic1").unwrap(),
        "us-west.topic1",
        "default_policy's own code runs"
    );
}
