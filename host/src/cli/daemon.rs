//! `kmirror run` and `kmirror validate`.

use crate::config;
use crate::plugin::cache::CacheChoice;
use std::path::Path;
use std::process::ExitCode;

/// `kmirror validate --config FILE`: everything but connecting. Exit 0 valid, 2 invalid.
pub fn validate(path: &Path, cache: &CacheChoice) -> ExitCode {
    match config::load(path, cache) {
        Ok(cfg) => {
            println!("{}: valid", path.display());
            for flow in &cfg.flows {
                println!("flow {}:", flow.name);
                for (slot, source) in flow.slots.all() {
                    println!("  {slot:<24} {source}");
                }
            }
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!("{}: {} error(s)", path.display(), errors.0.len());
            ExitCode::from(2)
        }
    }
}

/// `kmirror run --config FILE`: runs until SIGINT/SIGTERM (a second signal exits at once);
/// SIGHUP reloads the configuration file.
pub fn run(path: &Path, cache: &CacheChoice) -> ExitCode {
    let cfg = match config::load(path, cache) {
        Ok(cfg) => cfg,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(async {
        let reloads = crate::daemon::Reloads {
            path: path.to_path_buf(),
            cache: cache.clone(),
            requests: hangups(),
        };
        let shutdown = async {
            first_signal().await;
            tokio::spawn(async {
                first_signal().await;
                tracing::warn!("second signal: exiting at once");
                std::process::exit(130);
            });
        };
        match crate::daemon::run(cfg, Some(reloads), shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(1)
            }
        }
    });
    // Whatever is still running (a plugin call past its deadline, a client closing) does
    // not hold up the exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    code
}

async fn first_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut int), Ok(mut term)) => {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// One message per SIGHUP.
fn hangups() -> tokio::sync::mpsc::UnboundedReceiver<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    match signal(SignalKind::hangup()) {
        Ok(mut hup) => {
            tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    if tx.send(()).is_err() {
                        return;
                    }
                }
            });
        }
        Err(e) => tracing::warn!(error = %e, "cannot listen for SIGHUP; config reload is off"),
    }
    rx
}
