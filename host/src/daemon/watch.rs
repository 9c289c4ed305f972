//! Watching the plugin directory: changes are debounced (an editor's or `cp`'s several
//! writes, a Kubernetes ConfigMap's symlink swap) and reported as one batch of paths.

use notify_debouncer_mini::notify::RecursiveMode;
use notify_debouncer_mini::{DebounceEventResult, Debouncer, new_debouncer};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::mpsc;

/// How long the directory must be quiet before a batch of changes is reported.
pub const DEBOUNCE: Duration = Duration::from_millis(500);

/// A watch on a directory; stops when dropped.
pub struct DirWatch {
    _debouncer: Debouncer<notify_debouncer_mini::notify::RecommendedWatcher>,
    /// The directory watched.
    pub dir: PathBuf,
}

/// Watches `dir` (and below) and sends each debounced batch of changed paths on `changes`.
pub fn watch(dir: &Path, changes: mpsc::UnboundedSender<Vec<PathBuf>>) -> Result<DirWatch, String> {
    let mut debouncer = new_debouncer(DEBOUNCE, move |result: DebounceEventResult| match result {
        Ok(events) => {
            let paths: Vec<PathBuf> = events.into_iter().map(|e| e.path).collect();
            if !paths.is_empty() {
                let _ = changes.send(paths);
            }
        }
        Err(e) => tracing::warn!(error = %e, "watching the plugin directory failed"),
    })
    .map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
    debouncer
        .watcher()
        .watch(dir, RecursiveMode::Recursive)
        .map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
    Ok(DirWatch {
        _debouncer: debouncer,
        dir: dir.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_written_file_is_reported_once_debounced() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _watch = watch(dir.path(), tx).unwrap();
        let file = dir.path().join("policy.wasm");
        for i in 0..5 {
            std::fs::write(&file, vec![i; 1000]).unwrap();
        }
        let batch = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a batch within 10 s")
            .unwrap();
        assert!(
            batch.iter().any(|p| p.ends_with("policy.wasm")),
            "{batch:?}"
        );
    }
}
