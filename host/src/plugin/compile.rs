//! Compiling a component within bounds: a size limit is checked before, and compiling may
//! take at most the compile timeout. In the `kmirror` binary the compiler runs in a child
//! process (`kmirror __compile-plugin`), killed at the timeout, so a pathological module
//! cannot keep Cranelift busy inside the daemon; a library user without the binary
//! compiles on a thread that is abandoned at the timeout.

use super::engine::new_engine;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::OnceLock;
use std::time::Duration;
use wait_timeout::ChildExt;
use wasmtime::{Engine, Precompiled};

/// The executable that compiles out of process, when set.
static COMPILER: OnceLock<PathBuf> = OnceLock::new();

/// The hidden subcommand the compiler process runs.
pub const COMPILE_SUBCOMMAND: &str = "__compile-plugin";

/// Compiles components in child processes of `exe` (the `kmirror` binary itself) from now
/// on.
pub fn compile_out_of_process(exe: PathBuf) {
    let _ = COMPILER.set(exe);
}

/// The compiled artefact of `bytes` for `engine`, in at most `timeout`.
pub(crate) fn precompile(
    engine: &Engine,
    bytes: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    match COMPILER.get() {
        Some(exe) => in_child(engine, exe, bytes, timeout),
        None => on_thread(engine, bytes, timeout),
    }
}

fn too_slow(timeout: Duration) -> String {
    format!("compiling took longer than {timeout:?} (plugins.compile_timeout) and was stopped")
}

fn on_thread(engine: &Engine, bytes: &[u8], timeout: Duration) -> Result<Vec<u8>, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (engine, bytes) = (engine.clone(), bytes.to_vec());
    std::thread::Builder::new()
        .name("kmirror-compile".into())
        .spawn(move || {
            let _ = tx.send(
                engine
                    .precompile_component(&bytes)
                    .map_err(|e| format!("{e:#}")),
            );
        })
        .map_err(|e| format!("cannot start the compiler thread: {e}"))?;
    rx.recv_timeout(timeout).map_err(|_| too_slow(timeout))?
}

fn in_child(
    _engine: &Engine,
    exe: &PathBuf,
    bytes: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    let mut child = Command::new(exe)
        .arg(COMPILE_SUBCOMMAND)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the compiler process {}: {e}", exe.display()))?;
    let (mut stdin, mut stdout, stderr) =
        match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
            (Some(i), Some(o), Some(e)) => (i, o, e),
            _ => return Err("the compiler process has no pipes".into()),
        };
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        stdout.read_to_end(&mut out).map(|_| out)
    });
    let errors = std::thread::spawn(move || {
        let mut err = String::new();
        let _ = stderr.take(64 << 10).read_to_string(&mut err);
        err
    });
    let status = match child.wait_timeout(timeout) {
        Ok(Some(status)) => status,
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(too_slow(timeout));
        }
    };
    let _ = writer.join();
    let artefact = reader
        .join()
        .map_err(|_| "the compiler output was lost".to_string())?
        .map_err(|e| format!("reading the compiler output: {e}"))?;
    let errors = errors.join().unwrap_or_default();
    if !status.success() {
        return Err(errors.trim().to_string());
    }
    match Engine::detect_precompiled(&artefact) {
        Some(Precompiled::Component) => Ok(artefact),
        _ => Err("the compiler process returned no component".into()),
    }
}

/// `kmirror __compile-plugin`: compiles the component on stdin to stdout.
pub fn compile_stdin_to_stdout() -> ExitCode {
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut bytes) {
        eprintln!("cannot read the component: {e}");
        return ExitCode::from(2);
    }
    let compiled = new_engine().and_then(|engine| engine.precompile_component(&bytes));
    match compiled {
        Ok(artefact) => match std::io::stdout().write_all(&artefact) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cannot write the artefact: {e}");
                ExitCode::from(2)
            }
        },
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::from(1)
        }
    }
}
