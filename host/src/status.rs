//! The status endpoint: `GET /health` (200 when every flow runs, else 503),
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
                    "/health" => {
                        let healthy = flows_json.iter().all(|f| f["state"] == "running");
                        let states: serde_json::Map<String, serde_json::Value> = flows_json
                            .iter()
                            .map(|f| {
                                (
                                    f["flow"].as_str().unwrap_or("").to_string(),
                                    f["state"].clone(),
                                )
                            })
                            .collect();
                        json(
                            if healthy { 200 } else { 503 },
                            &serde_json::json!({ "healthy": healthy, "flows": states }),
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
                        &serde_json::json!({ "error": "not found; try /health, /status or /metrics" }),
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
