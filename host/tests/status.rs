//! The status endpoint under a misbehaving client: oversized headers, a client that never
//! sends its request, more connections than the cap. It must keep serving.

use kmirror::status::{self, MAX_CONNECTIONS};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn get(addr: &str, path: &str, extra: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    Some(text)
}

/// Reads until the server closes; returns how long that took.
fn closed_after(mut s: TcpStream) -> Duration {
    let started = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut buf = [0u8; 1024];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misbehaving_clients_are_bounded() {
    let server = status::serve("127.0.0.1:0", Default::default())
        .await
        .expect("serve");
    let addr = server.addr.to_string();
    let a = addr.clone();
    tokio::task::spawn_blocking(move || {
        let ok = get(&a, "/health", "").expect("health");
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        let ready = get(&a, "/ready", "").expect("ready");
        assert!(
            ready.starts_with("HTTP/1.1 200"),
            "no flows: ready: {ready}"
        );

        // A 32 KiB header: refused, and the server goes on.
        let big = format!("X-Big: {}\r\n", "a".repeat(32 << 10));
        let refused = get(&a, "/health", &big).unwrap_or_default();
        assert!(
            !refused.starts_with("HTTP/1.1 200"),
            "{}",
            &refused[..refused.len().min(200)]
        );
        assert!(
            get(&a, "/health", "")
                .expect("health")
                .starts_with("HTTP/1.1 200")
        );

        // A client that never finishes its request is cut off.
        let mut slow = TcpStream::connect(&a).unwrap();
        slow.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            .unwrap();
        assert!(
            closed_after(slow) < Duration::from_secs(15),
            "the header timeout holds"
        );

        // Idle connections up to the cap and beyond: a liveness probe is still answered —
        // each connection over the cap closes the oldest one (a kubelet's probe must not
        // be shut out by clients holding connections) — and the held ones time out.
        let mut held: Vec<TcpStream> = (0..MAX_CONNECTIONS + 6)
            .map(|_| TcpStream::connect(&a).unwrap())
            .collect();
        let probe = get(&a, "/health", "").expect("health under a connection flood");
        assert!(probe.starts_with("HTTP/1.1 200"), "{probe}");
        // The oldest held ones were closed for the newer ones (and the probe).
        let first: Vec<TcpStream> = held.drain(..7).collect();
        for s in first {
            assert!(
                closed_after(s) < Duration::from_secs(2),
                "the oldest is closed at once"
            );
        }
        for s in held {
            assert!(closed_after(s) < Duration::from_secs(35));
        }
        assert!(
            get(&a, "/status", "")
                .expect("status")
                .starts_with("HTTP/1.1 200")
        );
        let missing = get(&a, "/nope", "").expect("404");
        assert!(
            missing.starts_with("HTTP/1.1 404") && missing.contains("/ready"),
            "{missing}"
        );
    })
    .await
    .expect("client");
    drop(server);
}
