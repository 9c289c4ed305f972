//! Why a cluster cannot be reached. librdkafka says why a connection failed — a SASL
//! authentication refused, a certificate not trusted, a TLS handshake failed — only in its
//! log and error events, and the rdkafka crate delivers those only to a client that polls
//! its main queue, which its admin client never does: an operation then fails with
//! `BrokerTransportFailure` and nothing else (seen on Apache Kafka with a wrong SCRAM
//! password). [`watch`] polls the admin client's main queue on a thread of its own,
//! logs each such failure (scrubbed of the cluster's secrets, repeats within a minute
//! suppressed) and keeps the last one, which [`super::Cluster::error`] adds to transport
//! failures.

use super::acls::text;
use super::secrets;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka_sys as sys;
use std::ffi::c_char;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// How long a connection failure explains later transport failures.
const FRESH: Duration = Duration::from_secs(120);
/// Repeats of the same failure within this are not logged again.
const QUIET: Duration = Duration::from_secs(60);

/// The last connection failure of one cluster.
#[derive(Debug, Default)]
pub struct LastFailure {
    last: Mutex<Option<(Instant, String)>>,
}

impl LastFailure {
    /// The last failure, if it happened within [`FRESH`].
    pub fn recent(&self) -> Option<String> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.as_ref()
            .filter(|(at, _)| at.elapsed() < FRESH)
            .map(|(_, m)| m.clone())
    }

    /// Records `message`; whether it should be logged (not a repeat within [`QUIET`]).
    fn record(&self, message: String) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let repeat = last
            .as_ref()
            .is_some_and(|(at, m)| *m == message && at.elapsed() < QUIET);
        if !repeat {
            *last = Some((Instant::now(), message));
        }
        !repeat
    }
}

/// Whether a librdkafka log or error text tells why connections fail (as opposed to the
/// ordinary noise of a broker going away).
pub fn explains(message: &str) -> bool {
    // The text after the broker's name (`sasl_ssl://host:port/id: `), which would match.
    let m = message
        .rsplit_once("/bootstrap: ")
        .map_or(message, |(_, rest)| rest)
        .to_ascii_lowercase();
    ["authentication", "ssl handshake", "certificate", "authoriz"]
        .iter()
        .any(|k| m.contains(k))
}

/// `message` without librdkafka's thread prefix (`[thrd:...]: `), so that the log and the
/// error event of one failure read the same.
fn normalized(message: &str) -> &str {
    match message.strip_prefix("[thrd:") {
        Some(rest) => rest.split_once("]: ").map_or(message, |(_, m)| m),
        None => message,
    }
}

/// Polls the main queue of `admin` (the client of cluster `alias`) until the admin client
/// is dropped.
pub fn watch(
    alias: String,
    admin: Weak<AdminClient<DefaultClientContext>>,
    hidden: Arc<Vec<String>>,
    failure: Arc<LastFailure>,
) {
    let spawned = std::thread::Builder::new()
        .name(format!("kmirror-{alias}-events"))
        .spawn(move || {
            while let Some(admin) = admin.upgrade() {
                let rk = admin.inner().native_ptr();
                // SAFETY: `rk` is valid while `admin` (a strong reference) lives, which is
                // past the queue's destruction below; the event is destroyed after it is
                // read.
                let seen = unsafe {
                    let queue = sys::rd_kafka_queue_get_main(rk);
                    let event = sys::rd_kafka_queue_poll(queue, 200);
                    let seen = if event.is_null() {
                        None
                    } else {
                        let seen = read(event);
                        sys::rd_kafka_event_destroy(event);
                        seen
                    };
                    sys::rd_kafka_queue_destroy(queue);
                    seen
                };
                drop(admin);
                if let Some(message) = seen.filter(|m| explains(m)) {
                    let message = secrets::scrub(normalized(&message), &hidden);
                    if failure.record(message.clone()) {
                        tracing::error!(cluster = %alias, error = %message, "cannot connect to the cluster");
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no thread for the cluster's connection events");
    }
}

/// The text of a log (level error or worse) or error event.
///
/// SAFETY: `event` must be a valid event for the call.
unsafe fn read(event: *mut sys::rd_kafka_event_t) -> Option<String> {
    // SAFETY: per the caller; the strings live as long as the event.
    unsafe {
        match sys::rd_kafka_event_type(event) {
            sys::RD_KAFKA_EVENT_LOG => {
                let (mut fac, mut msg, mut level): (*const c_char, *const c_char, i32) =
                    (std::ptr::null(), std::ptr::null(), 0);
                if sys::rd_kafka_event_log(event, &mut fac, &mut msg, &mut level) != 0 {
                    return None;
                }
                (level <= 3).then(|| text(msg))
            }
            sys::RD_KAFKA_EVENT_ERROR => Some(text(sys::rd_kafka_event_error_string(event))),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authentication_and_tls_failures_explain_transport_failures() {
        for m in [
            "sasl_ssl://127.0.0.1:1/bootstrap: SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
            "ssl://127.0.0.1:1/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed",
        ] {
            assert!(explains(m), "{m}");
        }
        for m in [
            "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused",
            "[thrd:sasl_ssl://127.0.0.1:1/bootstrap]: 1/1 brokers are down",
            "sasl_ssl://127.0.0.1:1/bootstrap: Disconnected (after 3ms in state UP)",
        ] {
            assert!(!explains(m), "{m}");
        }
    }

    #[test]
    fn the_log_and_the_error_event_of_one_failure_read_the_same() {
        let log = "sasl_ssl://127.0.0.1:1/bootstrap: SSL handshake failed";
        assert_eq!(
            normalized(
                "[thrd:sasl_ssl://127.0.0.1:1/bootstrap]: sasl_ssl://127.0.0.1:1/bootstrap: SSL handshake failed"
            ),
            log
        );
        assert_eq!(normalized(log), log);
    }

    #[test]
    fn a_failure_is_kept_and_its_repeats_are_not_logged_again() {
        let f = LastFailure::default();
        assert_eq!(f.recent(), None);
        assert!(f.record("SASL authentication error".into()));
        assert!(!f.record("SASL authentication error".into()), "a repeat");
        assert!(f.record("SSL handshake failed".into()), "another failure");
        assert_eq!(f.recent().as_deref(), Some("SSL handshake failed"));
    }
}
