//! `kmirror plugin check | eval | new` as a user runs them: the real binary, real
//! components, exit codes and output.

mod common;

use common::{both_kinds, kmirror, plugins_dir};
use std::path::Path;
use std::process::Output;

fn run(args: &[&str]) -> Output {
    let cache = tempfile::tempdir().unwrap();
    kmirror()
        .args(args)
        .arg("--cache-dir")
        .arg(cache.path())
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn eval_examples_print_exactly_for_builtins_and_wasm() {
    let policy = both_kinds("default_policy");
    let filter = both_kinds("regex_filter");
    let policies = [
        "builtin:default-policy",
        policy[0].to_str().unwrap(),
        policy[1].to_str().unwrap(),
    ];
    let filters = [
        "builtin:default-topic-filter",
        filter[0].to_str().unwrap(),
        filter[1].to_str().unwrap(),
    ];
    for p in policies {
        let cases: [(&[&str], &str); 3] = [
            (
                &["format-remote-topic", "us-west", "topic1"],
                "\"us-west.topic1\"\n",
            ),
            (&["topic-source", "us-west.topic1"], "\"us-west\"\n"),
            (&["upstream-topic", "topic1"], "null\n"),
        ];
        for (args, expected) in cases {
            let mut argv = vec!["plugin", "eval", p];
            argv.extend_from_slice(args);
            let o = run(&argv);
            assert!(o.status.success(), "{p} {args:?}: {}", stderr(&o));
            assert_eq!(stdout(&o), expected, "{p} {args:?}");
        }
    }
    for f in filters {
        let o = run(&[
            "plugin",
            "eval",
            f,
            "should-replicate-topic",
            "__consumer_offsets",
        ]);
        assert!(o.status.success(), "{f}: {}", stderr(&o));
        assert_eq!(stdout(&o), "false\n", "{f}");
    }
}

#[test]
fn eval_takes_config_and_lists() {
    let prefix = both_kinds("prod_prefix")[0].clone();
    let o = run(&[
        "plugin",
        "eval",
        prefix.to_str().unwrap(),
        "format-remote-topics",
        "east",
        "a",
        "b",
        "--config",
        "prefix=dr-",
    ]);
    assert_eq!(
        stdout(&o),
        "[\"dr-east.a\",\"dr-east.b\"]\n",
        "{}",
        stderr(&o)
    );
    let o = run(&[
        "plugin",
        "eval",
        "builtin:default-topic-filter",
        "should-replicate-topic",
        "orders.tmp",
        "--config",
        "topics.exclude=.*\\.tmp",
    ]);
    assert_eq!(stdout(&o), "false\n");
}

#[test]
fn eval_errors_have_exit_codes() {
    let o = run(&[
        "plugin",
        "eval",
        "builtin:default-policy",
        "no-such-function",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unknown function `no-such-function`"),
        "{}",
        stderr(&o)
    );
    let o = run(&["plugin", "eval", "builtin:nope", "topic-source", "x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown built-in `nope`"));
    let o = run(&[
        "plugin",
        "eval",
        "builtin:default-policy",
        "topic-source",
        "x",
        "--config",
        "colour=blue",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unknown key `colour`"),
        "{}",
        stderr(&o)
    );
    let trap = both_kinds("test_trap")[0].clone();
    let o = run(&[
        "plugin",
        "eval",
        trap.to_str().unwrap(),
        "should-replicate-topic",
        "panic",
    ]);
    assert_eq!(o.status.code(), Some(1), "a plugin failure is exit 1");
    assert!(stderr(&o).contains("trapped"), "{}", stderr(&o));
}

#[test]
fn check_passes_every_reference_plugin() {
    for name in [
        "default_policy",
        "identity_policy",
        "regex_filter",
        "default_config_filter",
        "prod_prefix",
        "drop_by_header",
        "header_strip",
    ] {
        for path in both_kinds(name) {
            let o = run(&["plugin", "check", path.to_str().unwrap()]);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{}:\n{}{}",
                path.display(),
                stdout(&o),
                stderr(&o)
            );
            assert!(stdout(&o).contains(" 0 failed"), "{}", stdout(&o));
        }
    }
    for b in [
        "default-policy",
        "identity-policy",
        "default-topic-filter",
        "default-group-filter",
        "default-config-property-filter",
        "keep-all",
    ] {
        let o = run(&["plugin", "check", &format!("builtin:{b}")]);
        assert_eq!(o.status.code(), Some(0), "{b}: {}", stdout(&o));
    }
}

/// The reference transforms with their documented configurations pass the checks, answer
/// `plugin eval` and `plugin test` as documented, and a transform that traps, answers one
/// outcome short or too much fails the checks naming the case.
#[test]
fn record_transforms_are_checked_evaluated_and_tested() {
    for (name, config) in [
        ("drop_by_header", vec!["header=internal", "value=true"]),
        ("header_strip", vec!["pattern=trace.*"]),
        ("json_mask", vec!["fields=card.number,email", "mask=#"]),
    ] {
        for path in both_kinds(name) {
            let mut args = vec!["plugin", "check", path.to_str().unwrap()];
            for c in &config {
                args.extend(["--config", c]);
            }
            let o = run(&args);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{name}: {}{}",
                stdout(&o),
                stderr(&o)
            );
            assert!(
                stdout(&o).contains("roles: record-transform"),
                "{}",
                stdout(&o)
            );
        }
    }
    let mask = both_kinds("json_mask")[0].clone();
    let o = run(&[
        "plugin",
        "eval",
        mask.to_str().unwrap(),
        "transform",
        r#"{"value": "{\"email\": \"a@b\", \"n\": 1}"}"#,
        r#"{"value": "not json"}"#,
        "--config",
        "fields=email",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(out[0]["outcome"], "rewrite", "{out}");
    assert_eq!(out[0]["value"], r#"{"email": "***", "n": 1}"#, "{out}");
    assert_eq!(out[1]["outcome"], "keep", "{out}");

    let bad = both_kinds("test_bad_transform")[1].clone();
    for (mode, why) in [
        ("trap-on", "trap"),
        ("short", "7 outcomes for 8 records"),
        ("huge", "rewritten to 9437184 bytes"),
    ] {
        let o = run(&[
            "plugin",
            "check",
            bad.to_str().unwrap(),
            "--config",
            &format!("mode={mode}"),
            "--config",
            "needle=plain text",
        ]);
        assert_eq!(o.status.code(), Some(1), "{mode}: {}", stdout(&o));
        assert!(stdout(&o).contains(why), "{mode}: {}", stdout(&o));
    }
}

#[test]
fn check_lists_roles_in_a_table() {
    let path = both_kinds("regex_filter")[1].clone();
    let o = run(&["plugin", "check", path.to_str().unwrap()]);
    let out = stdout(&o);
    assert!(out.contains("roles: topic-filter, group-filter"), "{out}");
    assert!(
        out.contains("batch equals single") && out.contains("PASS"),
        "{out}"
    );
}

#[test]
fn check_rejects_the_broken_policy_naming_the_case() {
    let path = both_kinds("test_broken_policy")[0].clone();
    let o = run(&["plugin", "check", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("FAIL"), "{out}");
    assert!(
        out.contains("upstream-topic(format-remote-topic(a,t)) == t: a=us-west t=orders.v2 -> us-west.orders.v2 -> got Some(\"v2\"), expected Some(\"orders.v2\")"),
        "{out}"
    );
}

#[test]
fn check_load_errors_are_exit_2() {
    let no_role = both_kinds("test_no_role")[1].clone();
    let o = run(&["plugin", "check", no_role.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("exports no kmirror role")
            && stderr(&o).contains("example:greeter/greet"),
        "{}",
        stderr(&o)
    );
    let o = run(&["plugin", "check", "/no/such/plugin.wasm"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/no/such/plugin.wasm"));
    let o = run(&["plugin", "check"]);
    assert_eq!(o.status.code(), Some(2), "usage error");
}

#[test]
fn hostile_components_never_take_the_cli_down() {
    for (name, topic, expect) in [
        ("test_loop_forever", "loop", "did not return within"),
        ("test_memory_bomb", "bomb", "memory limit"),
        ("test_trap", "panic", "trapped"),
    ] {
        for path in both_kinds(name) {
            let o = run(&[
                "plugin",
                "eval",
                path.to_str().unwrap(),
                "should-replicate-topic",
                topic,
                "--call-timeout",
                "200ms",
            ]);
            assert_eq!(o.status.code(), Some(1), "{name}: {}", stderr(&o));
            assert!(stderr(&o).contains(expect), "{name}: {}", stderr(&o));
        }
    }
}

/// `plugin new` for every role, from a copy of the binary outside the source tree (as
/// installed): each scaffold is self-contained, `plugin build` makes it a component
/// (wasm32-wasip2, and wasm32-unknown-unknown through wit-component) and it passes the
/// conformance suite unchanged.
#[test]
fn new_scaffolds_rust_plugins_that_build_and_pass_check() {
    let dir = tempfile::tempdir().unwrap();
    let installed = dir.path().join("bin/kmirror");
    std::fs::create_dir_all(installed.parent().unwrap()).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_kmirror"), &installed).unwrap();
    let target = plugins_dir().join("../scaffold-target");
    let kmirror = |args: &[&str]| {
        std::process::Command::new(&installed)
            .arg("--no-cache")
            .args(args)
            .env("KMIRROR_LOG", "warn")
            .env("CARGO_TARGET_DIR", &target)
            .env("CARGO_NET_OFFLINE", "true")
            .output()
            .unwrap()
    };
    for (name, role, build_target) in [
        ("my-policy", "replication-policy", "wasm32-wasip2"),
        ("my-topics", "topic-filter", "wasm32-unknown-unknown"),
        ("my-groups", "group-filter", "wasm32-wasip2"),
        ("my-configs", "config-property-filter", "wasm32-wasip2"),
        ("my-transform", "record-transform", "wasm32-unknown-unknown"),
    ] {
        let o = kmirror(&[
            "plugin",
            "new",
            name,
            "--role",
            role,
            "--dir",
            dir.path().to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let project = dir.path().join(name);
        let cargo = std::fs::read_to_string(project.join("Cargo.toml")).unwrap();
        assert!(
            !cargo.contains(env!("CARGO_MANIFEST_DIR")),
            "no path into the sources: {cargo}"
        );
        let o = kmirror(&[
            "plugin",
            "build",
            project.to_str().unwrap(),
            "--target",
            build_target,
        ]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{name}:\n{}{}",
            stdout(&o),
            stderr(&o)
        );
        assert!(
            stdout(&o).contains(&format!("roles: {role}")),
            "{}",
            stdout(&o)
        );
        assert!(project.join(format!("{name}.wasm")).is_file());
    }
    let o = run(&[
        "plugin",
        "new",
        "my-policy",
        "--role",
        "replication-policy",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "refuses to overwrite");
    let o = run(&["plugin", "new", "x", "--role", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown role `nope`"), "{}", stderr(&o));
    assert!(Path::new(&target).is_dir());
}

/// `plugin new --lang python|javascript` for every role: componentize-py and
/// componentize-js (installed by scripts/setup.sh) build each scaffold into a component
/// that passes the conformance suite; and `plugin test` shows a role's answers.
#[test]
fn python_scaffolds_build_and_pass_check() {
    scaffolds_build_and_pass_check("python");
}

#[test]
fn javascript_scaffolds_build_and_pass_check() {
    scaffolds_build_and_pass_check("javascript");
}

/// Every role's `plugin new --lang LANG` scaffold builds with `plugin build` (which checks
/// it), and the policy answers `plugin test` with its configuration.
fn scaffolds_build_and_pass_check(lang: &str) {
    let dir = tempfile::tempdir().unwrap();
    // `plugin build` compiles into it; `plugin test` loads from it.
    let cache = dir.path().join("cache");
    for role in [
        "replication-policy",
        "topic-filter",
        "group-filter",
        "config-property-filter",
        "record-transform",
    ] {
        let name = format!("{}-{role}", &lang[..2]);
        let o = run(&[
            "plugin",
            "new",
            &name,
            "--role",
            role,
            "--lang",
            lang,
            "--dir",
            dir.path().to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let project = dir.path().join(&name);
        let o = run_with_cache(&cache, &["plugin", "build", project.to_str().unwrap()]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{name}:\n{}{}",
            stdout(&o),
            stderr(&o)
        );
        assert!(
            stdout(&o).contains(&format!("roles: {role}")),
            "{}",
            stdout(&o)
        );
        assert!(
            stdout(&o).contains(&format!("{name}.wasm: compiled in ")),
            "compiled into the cache: {}",
            stdout(&o)
        );
        if role == "replication-policy" {
            let names = dir.path().join("names.txt");
            std::fs::write(
                &names,
                "orders\n# a comment\nbackup.orders\n__consumer_offsets\n",
            )
            .unwrap();
            let component = project.join(format!("{name}.wasm"));
            let o = run_with_cache(
                &cache,
                &[
                    "plugin",
                    "test",
                    component.to_str().unwrap(),
                    "--input",
                    names.to_str().unwrap(),
                    "--config",
                    "prefix=dr-",
                    "--json",
                ],
            );
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
            let rows: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
            assert_eq!(rows[0]["target"], "dr-primary.orders", "{rows}");
            assert_eq!(rows[1]["decision"], "mirror", "{rows}");
            assert_eq!(rows[2]["decision"], "skip: internal", "{rows}");
            assert_eq!(rows.as_array().unwrap().len(), 3);
        }
        if role == "record-transform" {
            // The scaffold drops the records carrying the configured header.
            let records = dir.path().join("records.jsonl");
            std::fs::write(
                &records,
                "{\"offset\": 0, \"value\": \"a\", \"headers\": [[\"internal\", \"1\"]]}\n{\"offset\": 1, \"value\": \"b\"}\n",
            )
            .unwrap();
            let component = project.join(format!("{name}.wasm"));
            let o = run_with_cache(
                &cache,
                &[
                    "plugin",
                    "test",
                    component.to_str().unwrap(),
                    "--input",
                    records.to_str().unwrap(),
                    "--config",
                    "header=internal",
                    "--json",
                ],
            );
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
            let rows: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
            assert_eq!(rows[0]["outcome"], "drop", "{rows}");
            assert_eq!(rows[1]["outcome"], "keep", "{rows}");
            assert_eq!(rows[1]["value"], "b", "{rows}");
        }
    }
}

fn run_with_cache(cache: &Path, args: &[&str]) -> Output {
    kmirror()
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_cache_entry_copied_over_another_plugins_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let (policy, prefix) = (
        both_kinds("default_policy")[0].clone(),
        both_kinds("prod_prefix")[0].clone(),
    );
    let eval = |plugin: &Path| {
        run_with_cache(
            &cache,
            &[
                "plugin",
                "eval",
                plugin.to_str().unwrap(),
                "format-remote-topic",
                "us-west",
                "topic1",
            ],
        )
    };
    assert_eq!(stdout(&eval(&policy)).trim(), "\"us-west.topic1\"");
    let entries = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
            .collect()
    };
    let policy_entry = entries().pop().unwrap();
    eval(&prefix);
    let prefix_entry = entries().into_iter().find(|p| *p != policy_entry).unwrap();
    std::fs::copy(&prefix_entry, &policy_entry).unwrap();
    let o = eval(&policy);
    assert_eq!(
        stdout(&o).trim(),
        "\"us-west.topic1\"",
        "not prod_prefix's answer; {}",
        stderr(&o)
    );
}

#[test]
fn compiling_a_plugin_is_bounded_by_the_compile_timeout() {
    let started = std::time::Instant::now();
    let o = run(&[
        "plugin",
        "check",
        both_kinds("regex_filter")[0].to_str().unwrap(),
        "--compile-timeout",
        "1ms",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("compiling took longer than 1ms"),
        "{}",
        stderr(&o)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

#[test]
fn offsets_with_a_chatty_wasi_policy_fails_cleanly_instead_of_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kmirror.toml");
    std::fs::write(
        &config,
        format!(
            "[clusters.primary]\nbootstrap_servers = \"127.0.0.1:1\"\n[clusters.backup]\nbootstrap_servers = \"127.0.0.1:1\"\n[plugins]\ndir = \"{}\"\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\nreplication_policy = {{ plugin = \"wasip2/test_liar.wasm\", config = {{ lie = \"chatty\" }} }}\n",
            plugins_dir().display()
        ),
    )
    .unwrap();
    let o = run(&[
        "offsets",
        "translate",
        "--config",
        config.to_str().unwrap(),
        "--flow",
        "primary->backup",
        "--group",
        "g",
    ]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "an error, not a panic: {}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}
