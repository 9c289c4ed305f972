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

/// Why the daemon stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// A flow could not start, or failed.
    #[error(transparent)]
    Flow(#[from] FlowError),
    /// A flow's task panicked outside the flow's own watch.
    #[error("flow task panicked: {0}")]
    Panic(String),
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
    // Kept alive until the flows stopped.
    let _status = match &config.status_listen {
        Some(listen) => {
            let server = crate::status::serve(listen, all_stats).map_err(DaemonError::Status)?;
            tracing::info!(addr = %server.addr, "status endpoint: /health, /status");
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
    loop {
        tokio::select! {
            _ = &mut shutdown, if !token.is_cancelled() => {
                tracing::info!("stopping: finishing in-flight records and storing progress");
                token.cancel();
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
