//! The daemon: runs every flow of a configuration until the shutdown future resolves, then
//! stops them gracefully (stop fetching, finish in-flight produces, store progress).

use crate::config::LoadedConfig;
use crate::flow::supervisor::{self, FlowError};
use std::future::Future;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Runs `config`'s flows until `shutdown` resolves. A flow that cannot start stops all of
/// them and is returned as the error.
pub async fn run(config: LoadedConfig, shutdown: impl Future<Output = ()>) -> Result<(), FlowError> {
    let token = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    for flow in config.flows {
        tracing::info!(flow = %flow.name, source = ?flow.source, target = ?flow.target,
            topic_filter = %flow.topic_filter.source, replication_policy = %flow.replication_policy.source,
            "configured flow");
        tasks.spawn(supervisor::run(Arc::new(flow), token.clone()));
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
                    failure.get_or_insert(e);
                    token.cancel();
                }
                Some(Err(e)) => {
                    tracing::error!(error = %e, "flow task panicked; stopping every flow");
                    token.cancel();
                }
            }
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
