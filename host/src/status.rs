//! The status endpoint: `GET /health` (liveness: 200 while every flow runs and its loops
//! turn, else 503), `GET /ready` (200 once every flow reached both clusters and finished
//! its first discovery pass), `GET /status` (every flow's health, mirrored topics,
//! partitions and counters; every plugin's calls, errors, hash and reloads; config reloads;
//! as JSON) and `GET /metrics` (Prometheus, OpenMetrics text).
//!
//! It is unauthenticated and meant for loopback or behind a proxy (a warning is logged
//! otherwise). It runs on the daemon's tokio runtime (hyper, axum) with bounds that a
//! misbehaving client cannot get past: headers at most 16 KiB and 5 s to arrive, a
//! connection lives at most 30 s, at most 64 connections at once (more are closed at once).

use crate::telemetry::Telemetry;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Connections served at once at most.
pub const MAX_CONNECTIONS: usize = 64;
/// The largest request head (request line and headers) accepted, in bytes.
pub const MAX_HEAD_BYTES: usize = 16 << 10;
/// How long a client may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection may stay open.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);

type Flows = Arc<Telemetry>;

/// A running status endpoint; stops when dropped.
pub struct StatusServer {
    /// The address it listens on.
    pub addr: SocketAddr,
    stop: CancellationToken,
}

impl Drop for StatusServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn health_or_ready(telemetry: &Flows, readiness: bool) -> Response {
    let flows = telemetry.flows();
    let healths: Vec<_> = flows.iter().map(|f| (f.flow.clone(), f.health())).collect();
    let live = healths.iter().all(|(_, h)| h.alive);
    let ready = healths.iter().all(|(_, h)| h.ready);
    let per_flow: serde_json::Map<String, serde_json::Value> = healths
        .iter()
        .map(|(name, h)| (name.clone(), serde_json::to_value(h).unwrap_or_default()))
        .collect();
    let states: serde_json::Map<String, serde_json::Value> = flows
        .iter()
        .map(|f| (f.flow.clone(), f.status().state.into()))
        .collect();
    let ok = if readiness { ready } else { live };
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body =
        serde_json::json!({ "healthy": live, "ready": ready, "flows": states, "health": per_flow });
    (code, Json(body)).into_response()
}

fn router(flows: Flows) -> axum::Router {
    axum::Router::new()
        .route(
            "/health",
            get(|State(f): State<Flows>| async move { health_or_ready(&f, false).await }),
        )
        .route(
            "/ready",
            get(|State(f): State<Flows>| async move { health_or_ready(&f, true).await }),
        )
        .route(
            "/status",
            get(|State(f): State<Flows>| async move { Json(f.to_json()) }),
        )
        .route(
            "/metrics",
            get(|State(f): State<Flows>| async move {
                (
                    [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
                    crate::metrics::render(&f),
                )
            }),
        )
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                Json(serde_json::json!({ "error": "not found; try /health, /ready, /status or /metrics" })),
            )
        })
        .with_state(flows)
}

/// Serves the endpoint on `listen` (`host:port`) for `telemetry`, on the current runtime.
pub async fn serve(listen: &str, telemetry: Arc<Telemetry>) -> Result<StatusServer, String> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "the status endpoint is unauthenticated and listens beyond loopback; put it behind a proxy or bind it to 127.0.0.1");
    }
    let stop = CancellationToken::new();
    let app = router(telemetry);
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let until = stop.clone();
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = until.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let Ok((stream, _)) = accepted else { continue };
            let Ok(permit) = connections.clone().try_acquire_owned() else {
                drop(stream); // over the connection cap
                continue;
            };
            let service = TowerToHyperService::new(app.clone());
            let until = until.clone();
            tokio::spawn(async move {
                let connection = hyper::server::conn::http1::Builder::new()
                    .max_buf_size(MAX_HEAD_BYTES)
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEAD_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service);
                tokio::select! {
                    _ = until.cancelled() => {}
                    _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection) => {}
                }
                drop(permit);
            });
        }
    });
    Ok(StatusServer { addr, stop })
}
