//! Shared by the plugin tests: where the built components are.

#![allow(dead_code)]

use std::path::PathBuf;

/// `target/plugins` (or `$KMIRROR_TEST_PLUGINS`), built by `cargo xtask plugins`.
pub fn plugins_dir() -> PathBuf {
    let dir = std::env::var_os("KMIRROR_TEST_PLUGINS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/plugins"));
    let dir = dir.canonicalize().unwrap_or(dir);
    assert!(
        dir.join("default_policy.wasm").is_file(),
        "no built plugins in {}: run `cargo xtask plugins` first (scripts/test.sh does)",
        dir.display()
    );
    dir
}

/// The two builds of plugin `name`: (`wasm32-unknown-unknown` + wit-component, `wasm32-wasip2`).
pub fn both_kinds(name: &str) -> [PathBuf; 2] {
    let dir = plugins_dir();
    [
        dir.join(format!("{name}.wasm")),
        dir.join("wasip2").join(format!("{name}.wasm")),
    ]
}

/// The `kmirror` binary under test. A spawned one dies with the test process
/// (PR_SET_PDEATHSIG), so a failed assertion never leaves a daemon running.
pub fn kmirror() -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kmirror"));
    cmd.env("KMIRROR_LOG", "warn");
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd
}

/// `path` relative to the repository's root.
pub fn repo(path: &str) -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path)
}

/// The documents of the YAML file `path`, as a JSON array.
pub fn yaml_docs(path: &std::path::Path) -> serde_json::Value {
    let script = r#"
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
print(json.dumps(docs))
"#;
    let o = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}
