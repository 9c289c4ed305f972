use super::*;

#[test]
fn the_cdylib_wasm_is_found_among_cargo_messages() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("Cargo.toml");
    std::fs::write(&manifest, "").unwrap();
    let m = manifest.display();
    let messages = format!(
        "{{\"reason\":\"compiler-artifact\",\"manifest_path\":\"/elsewhere/Cargo.toml\",\"target\":{{\"kind\":[\"cdylib\"]}},\"filenames\":[\"/x/dep.wasm\"]}}\n\
         not json\n\
         {{\"reason\":\"compiler-artifact\",\"manifest_path\":\"{m}\",\"target\":{{\"kind\":[\"cdylib\",\"rlib\"]}},\"filenames\":[\"/t/p.rlib\",\"/t/p.wasm\"]}}\n\
         {{\"reason\":\"build-finished\",\"success\":true}}"
    );
    assert_eq!(
        wasm_artifact(&messages, &manifest),
        Some(PathBuf::from("/t/p.wasm"))
    );
    assert_eq!(wasm_artifact("", &manifest), None);
}

#[test]
fn projects_are_recognised_or_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let e = build(dir.path(), RustTarget::Wasip2, None).unwrap_err();
    assert!(matches!(e, BuildError::NotAProject(_)), "{e}");
    std::fs::write(
        dir.path().join(MANIFEST),
        "name = \"x\"\nlanguage = \"cobol\"\nworld = \"w\"\nsource = \"x.cob\"\n",
    )
    .unwrap();
    let e = build(dir.path(), RustTarget::Wasip2, None).unwrap_err();
    assert!(e.to_string().contains("source `x.cob` not found"), "{e}");
    std::fs::write(dir.path().join("x.cob"), "").unwrap();
    std::fs::create_dir(dir.path().join("wit")).unwrap();
    let e = build(dir.path(), RustTarget::Wasip2, None).unwrap_err();
    assert!(e.to_string().contains("unknown language `cobol`"), "{e}");
    std::fs::write(
        dir.path().join(MANIFEST),
        "name = \"x\"\nlang = \"python\"\n",
    )
    .unwrap();
    let e = build(dir.path(), RustTarget::Wasip2, None).unwrap_err();
    assert!(e.to_string().contains("unknown field `lang`"), "{e}");
}

fn manifest(name: &str, source: &str, wit: &str) -> Manifest {
    toml::from_str(&format!(
        "name = {name:?}\nlanguage = \"javascript\"\nworld = \"w\"\nsource = {source:?}\nwit = {wit:?}\n"
    ))
    .unwrap()
}

#[test]
fn the_output_name_must_stay_in_the_project() {
    for name in ["x", "eu-west_1", "A9", &"n".repeat(64)] {
        assert_eq!(
            manifest_problems(&manifest(name, "app.py", "wit")),
            Vec::<String>::new(),
            "{name}"
        );
    }
    for name in [
        "",
        "../../x",
        "a/b",
        "-x",
        ".x",
        "a.b",
        "a b",
        "é",
        &"n".repeat(65),
    ] {
        let problems = manifest_problems(&manifest(name, "app.py", "wit"));
        assert_eq!(problems.len(), 1, "{name}: {problems:?}");
        assert!(
            problems[0].starts_with(&format!("name `{name}` is not a plugin name")),
            "{problems:?}"
        );
    }
    assert_eq!(
        manifest_problems(&manifest("x", "./src/app.py", "../../wit")),
        Vec::<String>::new(),
        "inputs may live beside the project (a shared WIT directory)"
    );
}

#[test]
fn a_bad_manifest_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("p");
    std::fs::create_dir_all(project.join("wit")).unwrap();
    std::fs::write(project.join("app.py"), "").unwrap();
    std::fs::write(
        project.join(MANIFEST),
        "name = \"../../x\"\nlanguage = \"python\"\nworld = \"w\"\nsource = \"app.py\"\n",
    )
    .unwrap();
    let e = build(&project, RustTarget::Wasip2, None).unwrap_err();
    let BuildError::Manifest { path, message } = &e else {
        panic!("{e}")
    };
    assert_eq!(path, &project.join(MANIFEST));
    assert!(
        message.contains("name `../../x` is not a plugin name"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

/// An executable shell script at `path`.
fn script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A JavaScript project in `dir`, with its own `node_modules/.bin/componentize-js`
/// that creates `marker` when run.
fn javascript_project(dir: &Path, marker: &Path) {
    std::fs::create_dir_all(dir.join("wit")).unwrap();
    std::fs::write(dir.join("plugin.js"), "").unwrap();
    std::fs::write(
        dir.join(MANIFEST),
        "name = \"p\"\nlanguage = \"javascript\"\nworld = \"w\"\nsource = \"plugin.js\"\n",
    )
    .unwrap();
    script(
        &dir.join("node_modules/.bin/componentize-js"),
        &format!("touch '{}'", marker.display()),
    );
}

#[test]
fn a_project_local_componentize_js_is_never_run() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("p");
    let marker = dir.path().join("ran");
    javascript_project(&project, &marker);
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    // No global tool; nor through a relative PATH entry, which would name the
    // project's copy once the tool runs in the project.
    let search = std::env::join_paths([empty.as_path(), Path::new("node_modules/.bin")]).unwrap();
    let e = build_with(&project, RustTarget::Wasip2, None, &search).unwrap_err();
    let BuildError::MissingTool { tool, hint } = &e else {
        panic!("{e}")
    };
    assert_eq!(tool, "componentize-js");
    assert!(hint.contains("npm install -g"), "{hint}");
    assert!(hint.contains("is not run"), "{hint}");
    assert!(!marker.exists(), "the project's componentize-js ran");
}

#[test]
fn the_installed_tool_gets_absolute_paths_for_a_relative_project() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("p");
    let marker = dir.path().join("ran");
    javascript_project(&project, &marker);
    let bin = dir.path().join("bin");
    let args = dir.path().join("args");
    script(
        &bin.join("componentize-js"),
        &format!(
            "printf '%s\\n' \"$@\" > '{}'\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && : > \"$2\"; shift; done",
            args.display()
        ),
    );
    // `project` as a path relative to the current directory.
    let cwd = std::env::current_dir().unwrap();
    let up = "../".repeat(cwd.components().count() - 1);
    let relative = Path::new(&up).join(project.strip_prefix("/").unwrap());
    assert!(relative.is_relative() && relative.join(MANIFEST).is_file());

    let out = build_with(&relative, RustTarget::Wasip2, None, bin.as_os_str()).unwrap();
    let project = std::path::absolute(&relative).unwrap();
    assert_eq!(out, project.join("p.wasm"));
    assert!(!marker.exists(), "the project's componentize-js ran");
    let args = std::fs::read_to_string(&args).unwrap();
    let args: Vec<&str> = args.lines().collect();
    let source = project.join("plugin.js");
    let wit = project.join("wit");
    let out = out.display().to_string();
    assert_eq!(
        args,
        [
            source.to_str().unwrap(),
            "--wit",
            wit.to_str().unwrap(),
            "-n",
            "w",
            "-d",
            "http",
            "fetch-event",
            "-o",
            &out,
        ]
    );
}
