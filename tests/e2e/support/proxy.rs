//! A loopback TCP proxy the test controls, put in front of a broker to cut and restore the
//! connections of everything that goes through it (the broker advertises the proxy's
//! address, so every client of that broker does). Threads: one acceptor, two per
//! connection; all end when the proxy is dropped.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

struct State {
    /// Bytes sent from clients to the upstream.
    upstream_bytes: std::sync::atomic::AtomicU64,
    cut: AtomicBool,
    stop: AtomicBool,
    open: Mutex<Vec<TcpStream>>,
}

/// A proxy from `addr` to an upstream address.
pub struct Proxy {
    /// `127.0.0.1:port` clients connect to.
    pub addr: String,
    state: Arc<State>,
    acceptor: Option<JoinHandle<()>>,
}

fn pipe(mut from: TcpStream, mut to: TcpStream, state: Arc<State>, upstream: bool) {
    let mut buf = [0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if state.cut.load(Ordering::Acquire) || to.write_all(&buf[..n]).is_err() {
                    break;
                }
                if upstream {
                    state.upstream_bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

impl Proxy {
    /// Listens on `listen` (`127.0.0.1:port`) and forwards to `upstream`.
    pub fn start(listen: &str, upstream: &str) -> Proxy {
        let listener = TcpListener::bind(listen).expect("proxy listen");
        let addr = listener.local_addr().expect("addr").to_string();
        let state = Arc::new(State {
            upstream_bytes: std::sync::atomic::AtomicU64::new(0),
            cut: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
        });
        let (s, upstream) = (state.clone(), upstream.to_string());
        let acceptor = std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.stop.load(Ordering::Acquire) {
                    break;
                }
                let Ok(client) = client else { continue };
                if s.cut.load(Ordering::Acquire) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) {
                    let mut open = s.open.lock().expect("lock");
                    open.retain(|c| c.peer_addr().is_ok());
                    open.push(c2);
                    open.push(s2);
                }
                let (c, sv) = (client.try_clone(), server.try_clone());
                if let (Ok(c), Ok(sv)) = (c, sv) {
                    let st = s.clone();
                    std::thread::spawn(move || pipe(c, sv, st, true));
                    let st = s.clone();
                    std::thread::spawn(move || pipe(server, client, st, false));
                }
            }
        });
        Proxy {
            addr,
            state,
            acceptor: Some(acceptor),
        }
    }

    /// Closes every connection and refuses new ones until [`Self::restore`].
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::Release);
        for c in self.state.open.lock().expect("lock").drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    /// Bytes clients sent to the upstream so far.
    pub fn upstream_bytes(&self) -> u64 {
        self.state.upstream_bytes.load(Ordering::Relaxed)
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.state.cut.store(false, Ordering::Release);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Release);
        self.cut();
        // Unblocks the acceptor.
        let _ =
            TcpStream::connect_timeout(&self.addr.parse().expect("addr"), Duration::from_secs(1));
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}
