//! The deployment files as far as they can be checked here (no Docker engine, no
//! cluster): the example configuration validates and names every key of the generated
//! reference; every TOML example of the README and the user guide validates; the Kubernetes
//! manifests parse with the expected kinds, replicas and probes, and their configuration
//! validates, and their compile cache is one kmirror can use in its emptyDir; the systemd
//! unit passes `systemd-analyze verify`; the container build file is multi-stage,
//! unprivileged, with the plugin directory and cache as volumes. The dashboard and the
//! alerting rules are checked in `observability_files.rs`.

mod common;

use common::{kmirror, plugins_dir, repo, yaml_docs};
use std::path::{Path, PathBuf};

fn validate(config: &Path) -> (Option<i32>, String) {
    validate_with(config, Vec::new())
}

/// `kmirror validate` of `config` with `env` set: (exit code, stdout and stderr).
fn validate_with(config: &Path, env: Vec<(String, String)>) -> (Option<i32>, String) {
    let o = kmirror()
        .arg("--no-cache")
        .args(["validate", "--config"])
        .arg(config)
        .envs(env)
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code(), all)
}

/// Every key of the configuration, as the generated reference lists it (that page is
/// checked against the configuration model by `config::reference`'s tests).
fn every_key() -> Vec<String> {
    let page = std::fs::read_to_string(repo("docs/configuration-reference.md")).unwrap();
    let keys: Vec<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(key, _)| key.to_string())
        .collect();
    assert!(keys.len() > 50, "the reference's keys: {keys:?}");
    keys
}

#[test]
fn the_example_configuration_validates_and_names_every_key() {
    let path = repo("examples/kmirror.toml");
    let (code, out) = validate(&path);
    assert_eq!(code, Some(0), "{out}");
    let text = std::fs::read_to_string(&path).unwrap();
    for key in every_key() {
        if ["clusters", "plugins", "status", "flows", "plugin"].contains(&key.as_str()) {
            continue; // tables, named by their headers; a slot's `plugin` is its alternative
        }
        // The key itself (not `cache_dir` for `dir`), set or shown commented out.
        let named = regex::Regex::new(&format!(r"(?m)(^|[^A-Za-z0-9_]){key}( =|\])")).unwrap();
        assert!(
            named.is_match(&text),
            "examples/kmirror.toml does not mention `{key}`"
        );
    }
}

/// The TOML examples of a Markdown file, with the line each starts on.
fn toml_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks: Vec<(usize, String)> = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        match current.as_mut() {
            None if line.trim_start().starts_with("```toml") => {
                current = Some((n + 1, String::new()))
            }
            Some(_) if line.trim_start().starts_with("```") => blocks.extend(current.take()),
            Some((_, block)) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

/// An example made a whole file: the clusters its flows name (unless it defines them), the
/// built plugins as its plugin directory, and every `${VAR}` it uses set.
fn whole_file(dir: &Path, block: &str) -> (PathBuf, Vec<(String, String)>) {
    let mut text = String::new();
    if !block.contains("[clusters.") {
        let names = regex::Regex::new(r#"(?m)^\s*(?:source|target)\s*=\s*"([^"]+)""#).unwrap();
        let mut aliases: Vec<&str> = names
            .captures_iter(block)
            .map(|c| c.get(1).unwrap().as_str())
            .collect();
        aliases.sort();
        aliases.dedup();
        for alias in aliases {
            text.push_str(&format!(
                "[clusters.{alias}]\nbootstrap_servers = \"127.0.0.1:1\"\n\n"
            ));
        }
    }
    text.push_str(block);
    let dirs = regex::Regex::new(r#"(?m)^\s*dir\s*=\s*"([^"]+)""#).unwrap();
    match dirs.captures(block) {
        Some(c) => {
            let link = dir.join(c.get(1).unwrap().as_str());
            std::os::unix::fs::symlink(plugins_dir(), &link).unwrap();
        }
        None if !block.contains("[plugins]") => {
            text.push_str(&format!(
                "\n[plugins]\ndir = \"{}\"\n",
                plugins_dir().display()
            ));
        }
        None => {}
    }
    let vars = regex::Regex::new(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}").unwrap();
    let env = vars
        .captures_iter(&text)
        .map(|c| (c[1].to_string(), "127.0.0.1:1".to_string()))
        .collect();
    let path = dir.join("kmirror.toml");
    std::fs::write(&path, text).unwrap();
    (path, env)
}

/// Every TOML example of the README and the user guide is a configuration `kmirror
/// validate` accepts (completed with the clusters it names and the built plugins): an
/// example that drifts from the configuration (a key renamed, a value no longer allowed)
/// fails here.
#[test]
fn every_configuration_example_in_the_docs_validates() {
    let mut files = vec![repo("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut checked = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, block) in toml_blocks(&text) {
            let dir = tempfile::tempdir().unwrap();
            let (path, env) = whole_file(dir.path(), &block);
            let (code, out) = validate_with(&path, env);
            assert_eq!(
                code,
                Some(0),
                "{}:{line}: the example does not validate:\n{out}\nas checked:\n{}",
                file.display(),
                std::fs::read_to_string(&path).unwrap()
            );
            checked += 1;
        }
    }
    assert!(checked >= 4, "{checked} examples found");
}

#[test]
fn a_drifted_example_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let (path, env) = whole_file(
        dir.path(),
        "[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\noffset_lag_maxx = 1\n",
    );
    let (code, out) = validate_with(&path, env);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("did you mean `offset_lag_max`?"), "{out}");
}

/// The documents of the Kubernetes manifests, as JSON.
fn kubernetes_docs() -> serde_json::Value {
    yaml_docs(&repo("deploy/k8s/kmirror.yaml"))
}

#[test]
fn the_kubernetes_manifests_parse_with_the_expected_kinds_and_probes() {
    let docs = kubernetes_docs();
    let kinds: Vec<&str> = docs
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        vec!["ConfigMap", "PersistentVolumeClaim", "Deployment"]
    );
    let deployment = &docs[2];
    assert_eq!(deployment["spec"]["replicas"], 3);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/health");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/ready");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"],
        true
    );
    let mounts: Vec<&str> = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    assert!(
        mounts.contains(&"/etc/kmirror/plugins.d") && mounts.contains(&"/var/cache/kmirror"),
        "{mounts:?}"
    );
    // The ConfigMap's configuration is valid.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("plugins.d")).unwrap();
    let config = dir.path().join("kmirror.toml");
    std::fs::write(&config, docs[0]["data"]["kmirror.toml"].as_str().unwrap()).unwrap();
    let (code, out) = validate(&config);
    assert_eq!(code, Some(0), "{out}");
}

/// The Deployment's compile cache (KMIRROR_CACHE_DIR, the ConfigMap sets no `cache_dir`) and
/// the mount point of the emptyDir it lives in.
fn kubernetes_cache() -> (PathBuf, PathBuf) {
    let docs = kubernetes_docs();
    assert!(
        !docs[0]["data"]["kmirror.toml"]
            .as_str()
            .unwrap()
            .contains("cache_dir"),
        "the cache is set by KMIRROR_CACHE_DIR"
    );
    let pod = &docs[2]["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let cache = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "KMIRROR_CACHE_DIR")
        .and_then(|e| e["value"].as_str())
        .expect("KMIRROR_CACHE_DIR is set");
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v.get("emptyDir").is_some())
        .and_then(|v| v["name"].as_str())
        .expect("an emptyDir volume");
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume)
        .and_then(|m| m["mountPath"].as_str())
        .expect("the emptyDir is mounted");
    (PathBuf::from(cache), PathBuf::from(mount))
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

/// The kubelet makes an emptyDir 0777 (and root's): kmirror refuses such a directory as
/// its cache, so the cache must be a directory it creates in the mount, not the mount.
#[test]
fn the_kubernetes_compile_cache_is_created_inside_its_empty_dir() {
    use std::os::unix::fs::PermissionsExt;
    let (cache, mount) = kubernetes_cache();
    let below = cache
        .strip_prefix(&mount)
        .unwrap_or_else(|_| panic!("{} is not in {}", cache.display(), mount.display()));
    assert!(
        below.components().count() > 0,
        "the cache is the emptyDir mount point {} itself",
        mount.display()
    );
    let dockerfile = std::fs::read_to_string(repo("Dockerfile")).unwrap();
    let image_cache = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("ENV "))
        .flat_map(str::split_whitespace)
        .find_map(|v| v.strip_prefix("KMIRROR_CACHE_DIR="))
        .expect("the image sets KMIRROR_CACHE_DIR");
    assert_eq!(
        Path::new(image_cache),
        cache,
        "the image's cache is the same"
    );

    // The same layout on disk: a 0777 volume, the cache where the Deployment puts it.
    let dir = tempfile::tempdir().unwrap();
    let volume = dir.path().join("volume");
    std::fs::create_dir(&volume).unwrap();
    std::fs::set_permissions(&volume, std::fs::Permissions::from_mode(0o777)).unwrap();
    let config = dir.path().join("kmirror.toml");
    std::fs::write(
        &config,
        format!(
            "[clusters.primary]\nbootstrap_servers = \"127.0.0.1:1\"\n[clusters.backup]\nbootstrap_servers = \"127.0.0.1:2\"\n[plugins]\ndir = \"{}\"\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\nreplication_policy = {{ plugin = \"default_policy.wasm\" }}\n",
            plugins_dir().display()
        ),
    )
    .unwrap();
    let validate_with_cache = |cache: &Path| {
        let o = kmirror()
            .env("KMIRROR_CACHE_DIR", cache)
            .args(["validate", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let err = validate_with_cache(&volume);
    assert!(err.contains("not using the plugin compile cache"), "{err}");
    assert_eq!(
        cached_entries(&volume),
        0,
        "the mount point itself is refused"
    );

    let used = volume.join(below);
    let err = validate_with_cache(&used);
    assert!(!err.contains("compile cache"), "{err}");
    assert_eq!(cached_entries(&used), 1, "the plugin is cached");
    let mode = std::fs::metadata(&used).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
}

#[test]
fn the_systemd_unit_verifies() {
    let unit = std::fs::read_to_string(repo("deploy/systemd/kmirror.service")).unwrap();
    assert!(unit.contains("Restart=on-failure"));
    let Ok(found) = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
    else {
        eprintln!("systemd-analyze is not installed here: only the unit's content is checked");
        return;
    };
    assert!(found.status.success());
    // The unit names the installed binary; verify it against the one under test.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kmirror.service");
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/kmirror", env!("CARGO_BIN_EXE_kmirror")),
    )
    .unwrap();
    let o = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let relevant: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("kmirror.service") && !l.contains("User=") && !l.contains("Group="))
        .collect();
    assert!(relevant.is_empty(), "systemd-analyze: {err}");
}

#[test]
fn the_container_build_is_multi_stage_and_unprivileged() {
    let text = std::fs::read_to_string(repo("Dockerfile")).unwrap();
    let froms = text.lines().filter(|l| l.starts_with("FROM ")).count();
    assert!(froms >= 2, "multi-stage");
    let user = text
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("USER");
    assert!(user.trim() != "root" && user.trim() != "0", "non-root");
    assert!(text.contains("ENTRYPOINT [\"/usr/local/bin/kmirror\"]"));
    let volume = text
        .lines()
        .find(|l| l.starts_with("VOLUME"))
        .expect("VOLUME");
    assert!(
        volume.contains("/etc/kmirror/plugins.d") && volume.contains("/var/cache/kmirror"),
        "{volume}"
    );
}

/// The image compiles its plugins ahead of time (`plugin compile` into a read-only cache
/// named by `KMIRROR_PRECOMPILED_DIR`): run the Dockerfile's own command on disk, then a
/// daemon-side load with an empty writable cache (the emptyDir) compiles nothing.
#[test]
fn the_image_precompiles_its_plugins_and_a_start_compiles_nothing() {
    let text = std::fs::read_to_string(repo("Dockerfile")).unwrap();
    let precompiled = text
        .lines()
        .filter_map(|l| l.strip_prefix("ENV "))
        .flat_map(str::split_whitespace)
        .find_map(|v| v.strip_prefix("KMIRROR_PRECOMPILED_DIR="))
        .expect("the image sets KMIRROR_PRECOMPILED_DIR");
    let joined = text.replace("\\\n", " ");
    let compile = joined
        .lines()
        .find(|l| l.starts_with("RUN kmirror") && l.contains("plugin compile"))
        .expect("the image runs kmirror plugin compile");
    assert!(
        compile.contains(&format!("--cache-dir {precompiled} ")),
        "it compiles into {precompiled}: {compile}"
    );
    let after_user = text.split("USER 10001").nth(1).expect("USER 10001");
    assert!(
        after_user.contains("plugin compile"),
        "compiled as the user that runs kmirror (the cache must be its own)"
    );

    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("precompiled");
    let o = kmirror()
        .arg("--cache-dir")
        .arg(&image)
        .args(["plugin", "compile"])
        .arg(plugins_dir().join("default_policy.wasm"))
        .arg(plugins_dir().join("regex_filter.wasm"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(out.matches(": compiled in ").count(), 2, "{out}");
    assert!(out.contains("(replication-policy) -> "), "{out}");
    assert_eq!(cached_entries(&image), 2);
    let again = kmirror()
        .arg("--cache-dir")
        .arg(&image)
        .args(["plugin", "compile"])
        .arg(plugins_dir().join("default_policy.wasm"))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&again.stdout).contains(": already compiled ("),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );

    let config = dir.path().join("kmirror.toml");
    std::fs::write(
        &config,
        format!(
            "[clusters.primary]\nbootstrap_servers = \"127.0.0.1:1\"\n[clusters.backup]\nbootstrap_servers = \"127.0.0.1:2\"\n[plugins]\ndir = \"{}\"\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\ntopic_filter = {{ plugin = \"regex_filter.wasm\", config = {{ \"topics\" = \"orders.*\" }} }}\nreplication_policy = {{ plugin = \"default_policy.wasm\" }}\n",
            plugins_dir().display()
        ),
    )
    .unwrap();
    let volume = dir.path().join("volume/components");
    let o = kmirror()
        .env("KMIRROR_CACHE_DIR", &volume)
        .env("KMIRROR_PRECOMPILED_DIR", &image)
        .args(["validate", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        cached_entries(&volume),
        0,
        "both plugins came from the image: nothing compiled, nothing written"
    );
    // Without the image's cache the same start compiles them.
    let o = kmirror()
        .env("KMIRROR_CACHE_DIR", &volume)
        .env_remove("KMIRROR_PRECOMPILED_DIR")
        .args(["validate", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(cached_entries(&volume), 2);
}

/// `plugin compile` needs somewhere to write and says so.
#[test]
fn plugin_compile_without_a_cache_is_refused() {
    let o = kmirror()
        .args(["--no-cache", "plugin", "compile"])
        .arg(plugins_dir().join("default_policy.wasm"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no cache to compile into"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
