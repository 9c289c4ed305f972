//! A flow's tasks as one set: each named, a panic (or a fallible task's error) observed and
//! turned into the flow's error.

use super::FlowError;
use std::future::Future;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// How often a stop that takes long names the tasks not ended yet.
const STILL_RUNNING_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// A flow's tasks, each named for the error a panic becomes.
#[derive(Default)]
pub(crate) struct Tasks {
    set: JoinSet<()>,
    names: Vec<(tokio::task::Id, &'static str)>,
    /// The first error a fallible task ended with.
    failed: std::sync::Arc<std::sync::Mutex<Option<FlowError>>>,
}

impl Tasks {
    pub(crate) fn spawn(
        &mut self,
        name: &'static str,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        let handle = self.set.spawn(task);
        self.names.push((handle.id(), name));
    }

    /// Spawns a task that may end with the flow's error: it cancels `stop` (the other tasks
    /// stop) and becomes the flow's error, unless one came first.
    pub(crate) fn spawn_fallible(
        &mut self,
        name: &'static str,
        stop: &CancellationToken,
        task: impl Future<Output = Result<(), FlowError>> + Send + 'static,
    ) {
        let (failed, stop) = (self.failed.clone(), stop.clone());
        self.spawn(name, async move {
            if let Err(e) = task.await {
                failed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(e);
                stop.cancel();
            }
        });
    }

    /// Fails the flow with `error` (unless one came first) and cancels `stop`.
    pub(crate) fn fail(&self, error: FlowError, stop: &CancellationToken) {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(error);
        stop.cancel();
    }

    /// Waits for every task; the first that panics (or a fallible task's error, which
    /// comes first) cancels `stop` and becomes the error.
    pub(crate) async fn join(
        mut self,
        flow: &str,
        stop: &CancellationToken,
    ) -> Result<(), FlowError> {
        let mut failure = None;
        let mut done: Vec<tokio::task::Id> = Vec::new();
        let mut waited = tokio::time::interval(STILL_RUNNING_EVERY);
        waited.reset();
        loop {
            let joined = tokio::select! {
                joined = self.set.join_next_with_id() => joined,
                _ = waited.tick(), if stop.is_cancelled() => {
                    // A stop that takes long: which tasks hold it up.
                    let running: Vec<&str> = self
                        .names
                        .iter()
                        .filter(|(id, _)| !done.contains(id))
                        .map(|(_, n)| *n)
                        .collect();
                    tracing::warn!(flow, tasks = %running.join(", "), "the flow is stopping; these tasks have not ended yet");
                    continue;
                }
            };
            let Some(joined) = joined else { break };
            done.push(match &joined {
                Ok((id, ())) => *id,
                Err(e) => e.id(),
            });
            let Err(e) = joined else { continue };
            if e.is_cancelled() {
                continue;
            }
            let task = self
                .names
                .iter()
                .find(|(id, _)| *id == e.id())
                .map_or("flow", |(_, n)| *n);
            let message = panic_message(e);
            tracing::error!(flow, task, error = %message, "flow task panicked; stopping the flow");
            stop.cancel();
            failure.get_or_insert(FlowError::Task {
                flow: flow.to_string(),
                task,
                message,
            });
        }
        let error = self.failed.lock().unwrap_or_else(|e| e.into_inner()).take();
        error.or(failure).map_or(Ok(()), Err)
    }
}

fn panic_message(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".to_string()),
        Err(e) => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_panicking_task_fails_the_flow_and_stops_the_others() {
        let stop = CancellationToken::new();
        let mut tasks = Tasks::default();
        let sibling = stop.clone();
        tasks.spawn("heartbeats", async move { sibling.cancelled().await });
        tasks.spawn("checkpoints", async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            panic!("interval of zero");
        });
        let result = tokio::time::timeout(Duration::from_secs(10), tasks.join("a->b", &stop))
            .await
            .expect("the sibling was stopped");
        match result {
            Err(FlowError::Task {
                flow,
                task,
                message,
            }) => {
                assert_eq!(
                    (flow.as_str(), task, message.as_str()),
                    ("a->b", "checkpoints", "interval of zero")
                );
            }
            other => panic!("expected a task failure, got {other:?}"),
        }
        assert!(stop.is_cancelled());
    }

    #[tokio::test]
    async fn a_fallible_task_s_error_fails_the_flow_and_stops_the_others() {
        let stop = CancellationToken::new();
        let mut tasks = Tasks::default();
        let sibling = stop.clone();
        tasks.spawn("replication", async move { sibling.cancelled().await });
        tasks.spawn_fallible("single-instance lease", &stop, async {
            Err(FlowError::SingleInstance {
                flow: "a->b".into(),
                message: "lease lost".into(),
            })
        });
        let result = tokio::time::timeout(Duration::from_secs(10), tasks.join("a->b", &stop))
            .await
            .expect("the sibling was stopped");
        match result {
            Err(e @ FlowError::SingleInstance { .. }) => {
                assert_eq!(e.to_string(), "flow a->b: single_instance: lease lost")
            }
            other => panic!("expected the lease's error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn tasks_that_end_normally_are_not_failures() {
        let stop = CancellationToken::new();
        let mut tasks = Tasks::default();
        tasks.spawn("discovery", async {});
        assert!(tasks.join("a->b", &stop).await.is_ok());
        assert!(!stop.is_cancelled());
    }
}
