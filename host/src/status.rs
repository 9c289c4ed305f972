//! The status endpoint: `GET /health` (liveness: 200 while every flow runs and its loops
//! turn, else 503), `GET /ready` (200 once every flow reached both clusters and finished
//! its first discovery pass), `GET /status` (every flow's health, mirrored topics,
//! partitions and counters; every plugin's calls, errors, hash and reloads; config reloads;
//! as JSON) and `GET /metrics` (Prometheus, OpenMetrics text).
//!
//! It is unauthenticated and meant for loopback or behind a proxy (a warning is logged
//! otherwise). It runs on the daemon's tokio runtime (hyper, axum) with bounds that a
//! misbehaving client cannot get past: headers at most 16 KiB and 5 s to arrive, a
//! connection lives at most 30 s, at most 64 connections at once: one more closes the oldest,
//! so that clients holding idle connections never keep a liveness probe out (it used to be
//! the new connection that was closed: 64 idle sockets made `/health` unanswerable).
//! A failing `accept` (too many open files, say) is retried with a backoff, and logged at
//! most every 30 s, rather than spinning.

use crate::telemetry::Telemetry;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Connections served at once at most.
pub const MAX_CONNECTIONS: usize = 64;

/// The connections being served, oldest first.
#[derive(Default)]
struct Slots {
    next: u64,
    open: VecDeque<(u64, CancellationToken)>,
}

impl Slots {
    /// A slot for a new connection: at the cap, the oldest connection is closed for it.
    fn take(&mut self) -> (u64, CancellationToken) {
        if self.open.len() >= MAX_CONNECTIONS
            && let Some((_, oldest)) = self.open.pop_front()
        {
            oldest.cancel();
        }
        let id = self.next;
        self.next += 1;
        let close = CancellationToken::new();
        self.open.push_back((id, close.clone()));
        (id, close)
    }

    /// The connection `id` ended.
    fn release(&mut self, id: u64) {
        self.open.retain(|(i, _)| *i != id);
    }
}
/// The largest request head (request line and headers) accepted, in bytes.
pub const MAX_HEAD_BYTES: usize = 16 << 10;
/// How long a client may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection may stay open.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// The wait after the first of consecutive failed accepts.
const ACCEPT_BACKOFF_START: Duration = Duration::from_millis(10);
/// The longest wait between failed accepts.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// A failed accept is logged at most this often.
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(30);

type Flows = Arc<Telemetry>;

/// The accept loop's answer to failures: how long to wait before the next accept (from
/// [`ACCEPT_BACKOFF_START`], doubling up to [`ACCEPT_BACKOFF_MAX`], from the start again
/// after a success) and whether to log (at most once per [`ACCEPT_LOG_EVERY`]).
#[derive(Debug)]
struct AcceptBackoff {
    /// The wait after the next failure.
    next: Duration,
    /// When a failure was last logged.
    logged: Option<Instant>,
    /// Failures since then, not logged.
    unlogged: u64,
}

impl AcceptBackoff {
    fn new() -> Self {
        AcceptBackoff {
            next: ACCEPT_BACKOFF_START,
            logged: None,
            unlogged: 0,
        }
    }

    /// An accept failed at `now`: the wait before the next one, and, if this failure is to
    /// be logged, how many went unlogged before it.
    fn failed(&mut self, now: Instant) -> (Duration, Option<u64>) {
        let wait = self.next;
        self.next = (self.next * 2).min(ACCEPT_BACKOFF_MAX);
        let due = self
            .logged
            .is_none_or(|at| now.saturating_duration_since(at) >= ACCEPT_LOG_EVERY);
        if due {
            self.logged = Some(now);
            let unlogged = std::mem::take(&mut self.unlogged);
            (wait, Some(unlogged))
        } else {
            self.unlogged += 1;
            (wait, None)
        }
    }

    /// An accept succeeded: the next failure waits [`ACCEPT_BACKOFF_START`] again.
    fn succeeded(&mut self) {
        self.next = ACCEPT_BACKOFF_START;
    }
}

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
    let slots = Arc::new(Mutex::new(Slots::default()));
    let until = stop.clone();
    tokio::spawn(async move {
        let mut backoff = AcceptBackoff::new();
        loop {
            let accepted = tokio::select! {
                _ = until.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => {
                    backoff.succeeded();
                    stream
                }
                Err(error) => {
                    let (wait, log) = backoff.failed(Instant::now());
                    if let Some(unlogged) = log {
                        tracing::warn!(%addr, %error, unlogged, "the status endpoint cannot accept a connection; retrying with backoff");
                    }
                    tokio::select! {
                        _ = until.cancelled() => return,
                        _ = tokio::time::sleep(wait) => {}
                    }
                    continue;
                }
            };
            let (id, close) = slots.lock().unwrap_or_else(|e| e.into_inner()).take();
            let service = TowerToHyperService::new(app.clone());
            let (until, slots) = (until.clone(), slots.clone());
            tokio::spawn(async move {
                let connection = hyper::server::conn::http1::Builder::new()
                    .max_buf_size(MAX_HEAD_BYTES)
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEAD_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service);
                tokio::select! {
                    _ = until.cancelled() => {}
                    _ = close.cancelled() => {}
                    _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection) => {}
                }
                slots.lock().unwrap_or_else(|e| e.into_inner()).release(id);
            });
        }
    });
    Ok(StatusServer { addr, stop })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_a_new_connection_closes_the_oldest() {
        let mut slots = Slots::default();
        let taken: Vec<(u64, CancellationToken)> =
            (0..MAX_CONNECTIONS).map(|_| slots.take()).collect();
        assert!(taken.iter().all(|(_, c)| !c.is_cancelled()));
        let (newest, _) = slots.take();
        assert!(taken[0].1.is_cancelled(), "the oldest goes");
        assert!(taken[1..].iter().all(|(_, c)| !c.is_cancelled()));
        // An ended connection frees its slot: the next takes it without closing anyone.
        slots.release(taken[5].0);
        slots.release(newest);
        slots.take();
        assert!(!taken[1].1.is_cancelled());
        assert_eq!(slots.open.len(), MAX_CONNECTIONS - 1);
    }

    #[test]
    fn failed_accepts_back_off_and_start_over_after_a_success() {
        let mut backoff = AcceptBackoff::new();
        let now = Instant::now();
        let waits: Vec<u64> = (0..9)
            .map(|_| backoff.failed(now).0.as_millis() as u64)
            .collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        backoff.succeeded();
        assert_eq!(backoff.failed(now).0, Duration::from_millis(10));
        assert_eq!(backoff.failed(now).0, Duration::from_millis(20));
    }

    #[test]
    fn failed_accepts_are_logged_at_most_every_30_seconds() {
        let mut backoff = AcceptBackoff::new();
        let start = Instant::now();
        assert_eq!(backoff.failed(start).1, Some(0), "the first is logged");
        for s in [0, 1, 29] {
            assert_eq!(backoff.failed(start + Duration::from_secs(s)).1, None);
        }
        backoff.succeeded();
        assert_eq!(
            backoff.failed(start + Duration::from_millis(29_999)).1,
            None,
            "a success does not reset the rate limit"
        );
        assert_eq!(
            backoff.failed(start + Duration::from_secs(30)).1,
            Some(4),
            "30 s later, with the count of those not logged"
        );
        assert_eq!(backoff.failed(start + Duration::from_secs(31)).1, None);
        assert_eq!(backoff.failed(start + Duration::from_secs(60)).1, Some(1));
    }
}
