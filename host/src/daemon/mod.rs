//! The daemon: runs every flow of a configuration until the shutdown future resolves, then
//! stops them gracefully (stop fetching, finish in-flight produces, store progress). A
//! flow that fails stops the daemon with an error: it exits non-zero, never silently.

use crate::config::LoadedConfig;
use crate::flow::FlowError;
use crate::flow::supervisor;
use crate::flow::telemetry::FlowTelemetry;
use std::future::Future;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// How long the stop may take beyond the longest flow `shutdown_timeout`.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(20);

/// Why the daemon stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// A flow could not start, or failed.
    #[error(transparent)]
    Flow(#[from] FlowError),
    /// A flow's task panicked outside the flow's own watch.
    #[error("flow task panicked: {0}")]
    Panic(String),
    /// The flows did not stop within the stop deadline.
    #[error("the flows did not stop within {0:?}; exiting without waiting further")]
    StopTimeout(std::time::Duration),
    /// The status endpoint could not listen.
    #[error("status endpoint: {0}")]
    Status(String),
}

/// Runs `config`'s flows until `shutdown` resolves. A flow that cannot start or fails
/// stops all of them and is returned as the error.
pub async fn run(
    config: LoadedConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    let flows: Vec<_> = config
        .flows
        .into_iter()
        .map(|f| {
            let telemetry = Arc::new(FlowTelemetry::with_unreachable_after(
                &f.name,
                f.settings.unreachable_after,
            ));
            (f, telemetry)
        })
        .collect();
    let all_stats = flows.iter().map(|(_, s)| s.clone()).collect();
    // The whole stop is bounded: each flow's drain, then the group leave and client closes.
    let stop_deadline = flows
        .iter()
        .map(|(f, _)| f.settings.shutdown_timeout)
        .max()
        .unwrap_or_default()
        + STOP_GRACE;
    // Kept alive until the flows stopped.
    let _status = match &config.status_listen {
        Some(listen) => {
            let server = crate::status::serve(listen, all_stats)
                .await
                .map_err(DaemonError::Status)?;
            tracing::info!(addr = %server.addr, "status endpoint: /health, /ready, /status, /metrics");
            Some(server)
        }
        None => None,
    };
    let token = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    for (flow, stats) in flows {
        tracing::info!(flow = %flow.name, source = ?flow.source, target = ?flow.target,
            topic_filter = %flow.slots.topic_filter, replication_policy = %flow.slots.replication_policy,
            "configured flow");
        tasks.spawn(supervisor::run(Arc::new(flow), stats, token.clone()));
    }

    tokio::pin!(shutdown);
    let mut failure = None;
    let overdue = tokio::time::sleep(std::time::Duration::MAX / 4);
    tokio::pin!(overdue);
    let mut stopping = false;
    loop {
        if token.is_cancelled() && !stopping {
            stopping = true;
            overdue
                .as_mut()
                .reset(tokio::time::Instant::now() + stop_deadline);
        }
        tokio::select! {
            _ = &mut shutdown, if !token.is_cancelled() => {
                tracing::info!("stopping: finishing in-flight records and storing progress");
                token.cancel();
            }
            _ = &mut overdue, if stopping => {
                tracing::error!(deadline = ?stop_deadline, "the flows did not stop in time");
                return Err(DaemonError::StopTimeout(stop_deadline));
            }
            joined = tasks.join_next() => match joined {
                None => break,
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(e))) => {
                    tracing::error!(error = %e, "flow failed; stopping every flow");
                    failure.get_or_insert(DaemonError::Flow(e));
                    token.cancel();
                }
                Some(Err(e)) => {
                    tracing::error!(error = %e, "flow task panicked; stopping every flow");
                    failure.get_or_insert(DaemonError::Panic(e.to_string()));
                    token.cancel();
                }
            }
        }
    }
    failure.map_or(Ok(()), Err)
}
