//! `kmirror status [--url URL | --config FILE] [--json]`: a running daemon's `/status`,
//! read over HTTP and shown as tables ([`super::status_render`]), or as the daemon's JSON.
//!
//! Exit 0 when every flow is ok, 1 when any flow is degraded, 2 when the daemon cannot be
//! reached or does not answer kmirror status JSON. With `--config`, only `[status] listen`
//! is read from the file (plugins are not loaded), so it works wherever the file is.
//!
//! The request is a plain blocking HTTP/1.1 GET over [`TcpStream`]: connecting and each
//! read time out after [`IO_TIMEOUT`], the whole exchange after [`TOTAL_TIMEOUT`], and an
//! answer larger than [`MAX_RESPONSE_BYTES`] is refused.

use super::status_render::{is_status, render};
use clap::{ArgGroup, Args};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long connecting, and each read or write, may take.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the whole request may take.
pub const TOTAL_TIMEOUT: Duration = Duration::from_secs(15);
/// The largest answer read.
pub const MAX_RESPONSE_BYTES: usize = 256 << 20;

/// `kmirror status` arguments.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("endpoint").required(true).args(["url", "config"])))]
pub struct StatusArgs {
    /// The daemon's status endpoint: `http://HOST:PORT` (its `[status] listen`), or a full
    /// URL of `/status`.
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// Read the endpoint from this configuration's `[status] listen`.
    #[arg(long, short, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the daemon's JSON as it is (pretty).
    #[arg(long)]
    json: bool,
    /// Instead of the daemon's status: each flow's consumer groups' failover readiness, read
    /// from both clusters as `kmirror failover --dry-run` reads it (needs --config; exit 1
    /// when a group is not ready).
    #[arg(long, requires = "config")]
    groups: bool,
    /// With --groups: only this flow (SOURCE->TARGET).
    #[arg(long, requires = "groups")]
    flow: Option<String>,
}

/// Why the status could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The configuration file gives no endpoint.
    #[error("{path}: {message}")]
    Config {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The URL is not one this command can fetch.
    #[error("{url}: {message}")]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong.
        message: String,
    },
    /// Nothing answered at the URL.
    #[error(
        "cannot reach kmirror at {url}: {error} (is `kmirror run` running with this [status] listen?)"
    )]
    Unreachable {
        /// The URL fetched.
        url: String,
        /// The connection or read error.
        error: String,
    },
    /// Something answered, but not kmirror's status.
    #[error("{url} did not answer kmirror status JSON: {why}")]
    NotStatus {
        /// The URL fetched.
        url: String,
        /// What was wrong with the answer.
        why: String,
    },
}

/// Where to send the request: `host:port` to connect to, and the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `host:port` (an IPv6 host in brackets).
    pub authority: String,
    /// The request path, `/status` unless the URL names one.
    pub path: String,
}

impl Endpoint {
    /// The URL, as errors name it.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.authority, self.path)
    }
}

/// Parses `http://HOST[:PORT][/PATH]` (or `HOST:PORT` alone): no path or `/` means
/// `/status`, no port means 80.
pub fn parse_url(url: &str) -> Result<Endpoint, StatusError> {
    let bad = |message: &str| StatusError::Url {
        url: url.to_string(),
        message: message.to_string(),
    };
    let lower = url.to_ascii_lowercase();
    let rest = if lower.starts_with("http://") {
        &url["http://".len()..]
    } else if lower.starts_with("https://") {
        return Err(bad(
            "https is not supported: the status endpoint serves plain HTTP (on loopback or behind a proxy)",
        ));
    } else if url.contains("://") {
        return Err(bad("only http:// URLs are supported"));
    } else {
        url
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err(bad("expected http://HOST:PORT"));
    }
    let has_port = match authority.rfind(']') {
        Some(end) => authority[end..].contains(':'),
        None => authority.contains(':'),
    };
    let authority = if has_port {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let path = match path {
        "" | "/" => "/status".to_string(),
        p => p.to_string(),
    };
    Ok(Endpoint { authority, path })
}

/// The endpoint a configuration's `[status] listen` serves: an unspecified address
/// (`0.0.0.0`, `[::]`) is reached on loopback.
pub fn endpoint_from_config(path: &Path) -> Result<Endpoint, StatusError> {
    #[derive(serde::Deserialize)]
    struct File {
        status: Option<Status>,
    }
    #[derive(serde::Deserialize)]
    struct Status {
        listen: Option<String>,
    }
    let err = |message: String| StatusError::Config {
        path: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
    let file: File = toml::from_str(&text).map_err(|e| err(e.to_string().trim().to_string()))?;
    let listen = file
        .status
        .ok_or_else(|| err("no [status] section: the daemon serves no status endpoint (add [status] listen = \"127.0.0.1:9644\")".into()))?
        .listen
        .ok_or_else(|| err("[status] has no listen: the daemon serves no status endpoint".into()))?;
    let listen = if let Some(port) = listen.strip_prefix("0.0.0.0:") {
        format!("127.0.0.1:{port}")
    } else if let Some(port) = listen.strip_prefix("[::]:") {
        format!("[::1]:{port}")
    } else {
        listen
    };
    parse_url(&format!("http://{listen}"))
}

/// Splits a raw HTTP/1.1 response into its status code and body (by `Content-Length`,
/// chunked, or to the end); `None` while `raw` is not complete yet.
pub fn parse_response(raw: &[u8], at_eof: bool) -> Result<Option<(u16, Vec<u8>)>, String> {
    let Some(head_end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if at_eof {
            Err("the connection closed before a complete HTTP answer".into())
        } else {
            Ok(None)
        };
    };
    let head = String::from_utf8_lossy(&raw[..head_end]);
    let body = &raw[head_end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let code = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|s| s.split_whitespace().nth(1))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP answer: {:?}", truncate(status_line, 80)))?;
    let header = |name: &str| {
        head.split("\r\n").skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    if header("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked")) {
        return match dechunk(body)? {
            Some(b) => Ok(Some((code, b))),
            None if at_eof => Err("the connection closed inside a chunked answer".into()),
            None => Ok(None),
        };
    }
    if let Some(len) = header("content-length") {
        let len: usize = len
            .parse()
            .map_err(|_| format!("bad Content-Length {len:?}"))?;
        return match body.len() >= len {
            true => Ok(Some((code, body[..len].to_vec()))),
            false if at_eof => Err(format!(
                "the connection closed after {} of {len} bytes",
                body.len()
            )),
            false => Ok(None),
        };
    }
    Ok(at_eof.then(|| (code, body.to_vec())))
}

/// A chunked body decoded; `None` while incomplete.
fn dechunk(mut body: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = body.windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let size_text = String::from_utf8_lossy(&body[..eol]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        body = &body[eol + 2..];
        if size == 0 {
            return Ok(Some(out));
        }
        if body.len() < size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// GETs the endpoint: the answer's status code and body.
fn get(endpoint: &Endpoint) -> Result<(u16, Vec<u8>), StatusError> {
    let url = endpoint.url();
    let unreachable = |error: String| StatusError::Unreachable {
        url: url.clone(),
        error,
    };
    let addrs: Vec<_> = endpoint
        .authority
        .to_socket_addrs()
        .map_err(|e| unreachable(format!("cannot resolve {}: {e}", endpoint.authority)))?
        .collect();
    let mut last = format!("{} resolves to no address", endpoint.authority);
    let mut stream = None;
    for addr in &addrs {
        match TcpStream::connect_timeout(addr, IO_TIMEOUT) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e.to_string(),
        }
    }
    let mut stream = stream.ok_or_else(|| unreachable(last))?;
    let io = |e: std::io::Error| unreachable(e.to_string());
    stream.set_write_timeout(Some(IO_TIMEOUT)).map_err(io)?;
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nUser-Agent: kmirror-status\r\nConnection: close\r\n\r\n",
        endpoint.path, endpoint.authority
    );
    stream.write_all(request.as_bytes()).map_err(io)?;
    let deadline = Instant::now() + TOTAL_TIMEOUT;
    let mut raw = Vec::new();
    let mut chunk = [0u8; 64 << 10];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(unreachable(format!(
                "no complete answer within {TOTAL_TIMEOUT:?}"
            )));
        }
        stream
            .set_read_timeout(Some(left.min(IO_TIMEOUT)))
            .map_err(io)?;
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(unreachable(format!("reading the answer: {e}"))),
        };
        raw.extend_from_slice(&chunk[..n]);
        let not_status = |why: String| StatusError::NotStatus {
            url: url.clone(),
            why,
        };
        if let Some(answer) = parse_response(&raw, n == 0).map_err(not_status)? {
            return Ok(answer);
        }
        if raw.len() > MAX_RESPONSE_BYTES {
            return Err(not_status(format!(
                "the answer is larger than {} MiB",
                MAX_RESPONSE_BYTES >> 20
            )));
        }
    }
}

/// Fetches and checks the daemon's status JSON.
pub fn fetch(endpoint: &Endpoint) -> Result<serde_json::Value, StatusError> {
    let (code, body) = get(endpoint)?;
    let not_status = |why: String| StatusError::NotStatus {
        url: endpoint.url(),
        why,
    };
    if code != 200 {
        let text = String::from_utf8_lossy(&body);
        return Err(not_status(format!(
            "HTTP {code}: {}",
            truncate(text.trim(), 200)
        )));
    }
    let json: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
        let text = String::from_utf8_lossy(&body);
        not_status(format!("{e}: {:?}", truncate(text.trim(), 80)))
    })?;
    is_status(&json).map_err(not_status)?;
    Ok(json)
}

/// Runs `kmirror status`.
pub fn run(args: StatusArgs, cache: &crate::plugin::cache::CacheChoice) -> ExitCode {
    if let (true, Some(config)) = (args.groups, &args.config) {
        return super::cutover::readiness(config, args.flow.as_deref(), args.json, cache);
    }
    let endpoint = match (&args.url, &args.config) {
        (Some(url), _) => parse_url(url),
        (None, Some(path)) => endpoint_from_config(path),
        (None, None) => Err(StatusError::Url {
            url: String::new(),
            message: "give --url or --config".into(),
        }),
    };
    let json = match endpoint.and_then(|e| fetch(&e)) {
        Ok(json) => json,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let (text, degraded) = render(&json, crate::flow::telemetry::now_ms());
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json).unwrap_or_default()
        );
    } else {
        print!("{text}");
    }
    if degraded {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(authority: &str, path: &str) -> Endpoint {
        Endpoint {
            authority: authority.into(),
            path: path.into(),
        }
    }

    #[test]
    fn urls_default_to_the_status_path_and_port_80() {
        assert_eq!(
            parse_url("http://127.0.0.1:9644").unwrap(),
            ep("127.0.0.1:9644", "/status")
        );
        assert_eq!(
            parse_url("127.0.0.1:9644/").unwrap(),
            ep("127.0.0.1:9644", "/status")
        );
        assert_eq!(
            parse_url("HTTP://mirror.local/x/status").unwrap(),
            ep("mirror.local:80", "/x/status")
        );
        assert_eq!(
            parse_url("http://[::1]:9644").unwrap(),
            ep("[::1]:9644", "/status")
        );
        assert_eq!(
            parse_url("http://[::1]").unwrap(),
            ep("[::1]:80", "/status")
        );
        assert_eq!(
            parse_url("http://127.0.0.1:9644").unwrap().url(),
            "http://127.0.0.1:9644/status"
        );
        for bad in ["https://h:1", "ftp://h", "http://", "http://u@h:1"] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_config_gives_the_listen_address_and_needs_a_status_section() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.toml");
        let write = |text: &str| std::fs::write(&path, text).unwrap();
        write("[clusters.a]\nbootstrap_servers = \"x\"\n[status]\nlisten = \"0.0.0.0:9644\"\n");
        assert_eq!(
            endpoint_from_config(&path).unwrap(),
            ep("127.0.0.1:9644", "/status")
        );
        write("[status]\nlisten = \"[::]:1\"\n");
        assert_eq!(
            endpoint_from_config(&path).unwrap(),
            ep("[::1]:1", "/status")
        );
        write("[clusters.a]\nbootstrap_servers = \"x\"\n");
        let e = endpoint_from_config(&path).unwrap_err().to_string();
        assert!(
            e.contains("no [status] section") && e.contains("k.toml"),
            "{e}"
        );
        write("[status]\n");
        let e = endpoint_from_config(&path).unwrap_err().to_string();
        assert!(e.contains("no listen"), "{e}");
        write("[status\n");
        assert!(endpoint_from_config(&path).is_err());
        let e = endpoint_from_config(&dir.path().join("none.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot read"), "{e}");
    }

    #[test]
    fn responses_by_length_chunked_or_to_the_end() {
        let cl = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
        assert_eq!(
            parse_response(cl, false).unwrap(),
            Some((200, b"hello".to_vec()))
        );
        assert_eq!(parse_response(&cl[..cl.len() - 1], false).unwrap(), None);
        assert!(parse_response(&cl[..cl.len() - 1], true).is_err());
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n";
        assert_eq!(
            parse_response(chunked, false).unwrap(),
            Some((200, b"hello".to_vec()))
        );
        assert_eq!(parse_response(&chunked[..60], false).unwrap(), None);
        let eof = b"HTTP/1.0 404 Not Found\r\n\r\nnope";
        assert_eq!(parse_response(eof, false).unwrap(), None);
        assert_eq!(
            parse_response(eof, true).unwrap(),
            Some((404, b"nope".to_vec()))
        );
        assert!(parse_response(b"SSH-2.0-OpenSSH\r\n\r\n", true).is_err());
        assert!(parse_response(b"HTTP/1.1 200", true).is_err());
    }

    #[test]
    fn a_refused_connection_names_the_url() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let e = fetch(&ep(&format!("127.0.0.1:{port}"), "/status")).unwrap_err();
        assert!(matches!(e, StatusError::Unreachable { .. }), "{e}");
        assert!(
            e.to_string()
                .contains(&format!("http://127.0.0.1:{port}/status")),
            "{e}"
        );
    }

    #[test]
    fn an_answer_that_is_not_status_json_is_refused() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            for body in ["{\"healthy\": true}", "<html>hi</html>"] {
                let (mut s, _) = listener.accept().unwrap();
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(answer.as_bytes());
            }
        });
        for _ in 0..2 {
            let e = fetch(&ep(&addr.to_string(), "/status")).unwrap_err();
            assert!(matches!(e, StatusError::NotStatus { .. }), "{e}");
            assert!(e.to_string().contains(&addr.to_string()), "{e}");
        }
        server.join().unwrap();
    }
}
