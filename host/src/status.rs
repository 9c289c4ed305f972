//! The status endpoint: `GET /health` (liveness: 200 while every flow runs and its loops
//! turn, else 503), `GET /ready` (200 once every flow reached both clusters and finished
//! its first discovery pass),
//! `GET /status` (every flow's mirrored topics, problems and counters, as JSON) and
//! `GET /metrics` (Prometheus, OpenMetrics text).

use crate::flow::telemetry::FlowTelemetry;
use std::sync::Arc;
use std::thread::JoinHandle;

/// A running status endpoint; stops when dropped.
pub struct StatusServer {
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
    /// The address it listens on.
    pub addr: String,
}

impl Drop for StatusServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn json(code: u16, body: &serde_json::Value) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let header = tiny_http::Header::from_bytes("Content-Type", "application/json").ok();
    let mut response =
        tiny_http::Response::from_data(body.to_string().into_bytes()).with_status_code(code);
    if let Some(h) = header {
        response = response.with_header(h);
    }
    response
}

/// Serves the endpoint on `listen` (`host:port`) for `flows`.
pub fn serve(listen: &str, flows: Vec<Arc<FlowTelemetry>>) -> Result<StatusServer, String> {
    let server = Arc::new(
        tiny_http::Server::http(listen).map_err(|e| format!("cannot listen on {listen}: {e}"))?,
    );
    let addr = server.server_addr().to_string();
    let srv = server.clone();
    let thread = std::thread::Builder::new()
        .name("kmirror-status".into())
        .spawn(move || {
            for request in srv.incoming_requests() {
                let flows_json: Vec<serde_json::Value> =
                    flows.iter().map(|f| f.to_json()).collect();
                let response = match request.url() {
                    "/health" | "/ready" => {
                        let healths: Vec<_> = flows.iter().map(|f| (f.flow.clone(), f.health())).collect();
                        let live = healths.iter().all(|(_, h)| h.alive);
                        let ready = healths.iter().all(|(_, h)| h.ready);
                        let per_flow: serde_json::Map<String, serde_json::Value> = healths
                            .iter()
                            .map(|(name, h)| (name.clone(), serde_json::to_value(h).unwrap_or_default()))
                            .collect();
                        let states: serde_json::Map<String, serde_json::Value> = flows_json
                            .iter()
                            .map(|f| (f["flow"].as_str().unwrap_or("").to_string(), f["state"].clone()))
                            .collect();
                        let ok = if request.url() == "/health" { live } else { ready };
                        json(
                            if ok { 200 } else { 503 },
                            &serde_json::json!({ "healthy": live, "ready": ready, "flows": states, "health": per_flow }),
                        )
                    }
                    "/status" => json(200, &serde_json::json!({ "flows": flows_json })),
                    "/metrics" => {
                        let body = crate::metrics::render(&flows);
                        let mut response = tiny_http::Response::from_data(body.into_bytes());
                        if let Ok(h) = tiny_http::Header::from_bytes("Content-Type", crate::metrics::CONTENT_TYPE) {
                            response = response.with_header(h);
                        }
                        let _ = request.respond(response);
                        continue;
                    }
                    _ => json(
                        404,
                        &serde_json::json!({ "error": "not found; try /health, /ready, /status or /metrics" }),
                    ),
                };
                let _ = request.respond(response);
            }
        })
        .map_err(|e| format!("cannot start the status thread: {e}"))?;
    Ok(StatusServer {
        server,
        thread: Some(thread),
        addr,
    })
}
