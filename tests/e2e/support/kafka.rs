//! Apache Kafka for the tests and benches: a single-node KRaft cluster (broker and controller
//! in one JVM) on free loopback ports, from the jars `scripts/setup.sh` fetches from Maven
//! Central (`tests/kafka/pom.xml`), and MirrorMaker 2 in dedicated mode from the same jars.
//!
//! Every process is started with PR_SET_PDEATHSIG and killed when its handle drops, so a
//! failed run never leaves a broker serving the next one. Each cluster lives in its own
//! temporary directory (kept, and named on stderr, when the test panics).

use super::{die_with_parent, free_port, poll_until};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The SASL users every cluster started with [`KafkaOptions::sasl`] knows, for PLAIN and for
/// both SCRAM mechanisms: `admin` is a super user, the others have only what a test grants.
pub const USERS: [(&str, &str); 3] = [
    ("admin", "admin-secret"),
    ("alice", "alice-secret"),
    ("bob", "bob-secret"),
];

/// What a test asks of its cluster beyond the defaults.
#[derive(Debug, Clone, Default)]
pub struct KafkaOptions {
    /// SASL listeners (PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 with [`USERS`]).
    pub sasl: bool,
    /// TLS listeners (a CA and a broker certificate made for the test; see [`Kafka::ca`]).
    pub tls: bool,
    /// Kafka's `StandardAuthorizer`, `admin` and the PLAINTEXT listener's anonymous user as
    /// super users (so the test's own plain clients may do anything).
    pub authorizer: bool,
    /// `offsets.retention.minutes` (committed offsets of empty groups expire after it),
    /// checked every second.
    pub offsets_retention_minutes: Option<u32>,
    /// Listen on this PLAINTEXT port (default: a free one).
    pub port: Option<u16>,
    /// Advertise this port on the PLAINTEXT listener instead of its own (a proxy in front).
    pub advertised_port: Option<u16>,
    /// Further `server.properties` lines.
    pub extra: Vec<(String, String)>,
    /// The broker's maximum heap (default 512m).
    pub heap: Option<String>,
    /// JVM options replacing the test defaults (serial GC, C1 only), e.g. G1 for a broker
    /// with thousands of partitions, whose serial full collections paused it for seconds.
    pub jvm: Option<Vec<String>>,
    /// Brokers in the cluster (default 1): the first is also its controller, the others
    /// brokers only, each a JVM of its own. Kafka keeps a descriptor open per partition,
    /// and a process may hold at most 20,000 here: more partitions need more brokers.
    pub brokers: Option<u32>,
}

impl KafkaOptions {
    pub fn sasl(mut self) -> Self {
        self.sasl = true;
        self
    }
    pub fn heap(mut self, heap: &str) -> Self {
        self.heap = Some(heap.to_string());
        self
    }
    pub fn jvm(mut self, options: &[&str]) -> Self {
        self.jvm = Some(options.iter().map(|o| o.to_string()).collect());
        self
    }
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }
    pub fn authorizer(mut self) -> Self {
        self.authorizer = true;
        self
    }
    pub fn offsets_retention_minutes(mut self, minutes: u32) -> Self {
        self.offsets_retention_minutes = Some(minutes);
        self
    }
    pub fn brokers(mut self, n: u32) -> Self {
        self.brokers = Some(n);
        self
    }
    pub fn set(mut self, key: &str, value: &str) -> Self {
        self.extra.push((key.to_string(), value.to_string()));
        self
    }
}

/// A running Apache Kafka cluster: one node (broker and controller), or more with
/// [`KafkaOptions::brokers`].
pub struct Kafka {
    /// `127.0.0.1:port` of the PLAINTEXT listener (anonymous; a super user under the
    /// authorizer).
    pub addr: String,
    sasl: Option<String>,
    ssl: Option<String>,
    sasl_ssl: Option<String>,
    dir: Option<tempfile::TempDir>,
    child: Option<Child>,
    heap: String,
    jvm: Option<Vec<String>>,
    /// The cluster's other nodes (brokers only), dying with this one.
    more: Vec<Kafka>,
}

/// The directory holding the Kafka and MirrorMaker 2 jars: `KMIRROR_KAFKA_LIB`, or where
/// `scripts/kafka.sh fetch` puts them (`$KMIRROR_CACHE` or `~/.cache/kmirror`, then
/// `kafka-<version>/lib`, the version being `tests/kafka/pom.xml`'s).
pub fn kafka_lib() -> PathBuf {
    if let Some(dir) = std::env::var_os("KMIRROR_KAFKA_LIB") {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("KMIRROR_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/kmirror")))
        .expect("HOME or KMIRROR_CACHE");
    let dir = cache.join(format!("kafka-{}", kafka_version())).join("lib");
    assert!(
        dir.is_dir(),
        "Apache Kafka is not installed at {}: run scripts/setup.sh (it fetches the jars \
         named by tests/kafka/pom.xml from Maven Central)",
        dir.display()
    );
    dir
}

/// The Kafka version the tests run, from `tests/kafka/pom.xml`.
pub fn kafka_version() -> String {
    let pom = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/kafka/pom.xml");
    let text = std::fs::read_to_string(&pom).expect("tests/kafka/pom.xml");
    let start = text
        .find("<kafka.version>")
        .expect("<kafka.version> in the pom")
        + 15;
    let end = start + text[start..].find('<').expect("</kafka.version>");
    text[start..end].trim().to_string()
}

/// Kafka keeps one descriptor open per partition (its active segment): a broker with 20,000
/// topics needs more than this machine's default limit of 20,000. The JVM gets 65,536 (or
/// the most the kernel and the user's hard limit allow; raising the hard limit needs root).
fn more_open_files(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getrlimit/setrlimit are async-signal-safe; nothing else runs before exec.
    unsafe {
        cmd.pre_exec(|| {
            let mut l = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < 65_536 {
                let want = libc::rlimit {
                    rlim_cur: 65_536,
                    rlim_max: l.rlim_max.max(65_536),
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &want) != 0 {
                    let soft = libc::rlimit {
                        rlim_cur: l.rlim_max,
                        rlim_max: l.rlim_max,
                    };
                    libc::setrlimit(libc::RLIMIT_NOFILE, &soft);
                }
            }
            Ok(())
        });
    }
}

/// `java` (dying with the calling thread) with the test JVM's options: a small heap, serial GC and the C1 compiler only
/// (quick starts on two cores, several JVMs at once), unless `KMIRROR_KAFKA_JVM_OPTS`
/// replaces them (the benches do).
pub fn java(dir: &Path, heap: &str) -> Command {
    java_with(dir, heap, None)
}

/// [`java`] with `options` instead of the test defaults (`KMIRROR_KAFKA_JVM_OPTS` still wins).
pub fn java_with(dir: &Path, heap: &str, options: Option<&[String]>) -> Command {
    let java = std::env::var_os("JAVA_HOME")
        .map(|h| PathBuf::from(h).join("bin/java"))
        .filter(|j| j.is_file())
        .unwrap_or_else(|| PathBuf::from("java"));
    let mut cmd = Command::new(java);
    match std::env::var("KMIRROR_KAFKA_JVM_OPTS") {
        Ok(opts) => {
            cmd.args(opts.split_whitespace());
        }
        Err(_) if options.is_some() => {
            cmd.arg(format!("-Xmx{heap}"))
                .args(options.unwrap_or_default());
        }
        Err(_) => {
            cmd.args([
                &format!("-Xmx{heap}"),
                "-Xms64m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-XX:ActiveProcessorCount=2",
            ]);
        }
    }
    java_rest(cmd, dir)
}

/// `java` with exactly `options` (no test defaults, no `KMIRROR_KAFKA_JVM_OPTS`): a JVM
/// started as a shipped script starts it, for benchmarks.
pub fn java_exact(dir: &Path, options: &[&str]) -> Command {
    let java = std::env::var_os("JAVA_HOME")
        .map(|h| PathBuf::from(h).join("bin/java"))
        .filter(|j| j.is_file())
        .unwrap_or_else(|| PathBuf::from("java"));
    let mut cmd = Command::new(java);
    cmd.args(options);
    java_rest(cmd, dir)
}

/// Logging, dying with the parent, open files and the class path: every JVM's.
fn java_rest(mut cmd: Command, dir: &Path) -> Command {
    let log4j = dir.join("log4j2.properties");
    if !log4j.is_file() {
        std::fs::write(&log4j, LOG4J).expect("log4j2.properties");
    }
    // Every JVM dies with the thread that started it (its test, or a tool it waits for).
    die_with_parent(&mut cmd);
    more_open_files(&mut cmd);
    cmd.arg("-Djava.awt.headless=true")
        .arg(format!("-Dlog4j2.configurationFile={}", log4j.display()))
        .arg(format!("-Dkafka.logs.dir={}", dir.display()))
        .arg("-cp")
        .arg(format!("{}/*", kafka_lib().display()));
    cmd
}

const LOG4J: &str = "status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.target = SYSTEM_ERR
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.krs.name = kafka.server.KafkaRaftServer
logger.krs.level = INFO
logger.mm2.name = org.apache.kafka.connect.mirror
logger.mm2.level = INFO
";

/// The line a broker logs once it serves clients.
const STARTED: &str = "Kafka Server started";

impl Kafka {
    /// Starts a cluster with the defaults (see [`Kafka::start_with`]).
    pub fn start() -> Kafka {
        Self::start_with(&KafkaOptions::default())
    }

    /// Formats a fresh KRaft log directory and starts the broker with `opts`; returns once
    /// it has logged that it serves clients. A start that loses a port to another process
    /// is retried on new ports.
    pub fn start_with(opts: &KafkaOptions) -> Kafka {
        Self::start_many(std::slice::from_ref(opts))
            .pop()
            .expect("one cluster")
    }

    /// Starts a cluster for each of `opts` side by side (formatted in parallel, the brokers
    /// starting together). The broker processes are spawned on the calling thread: a child
    /// started with PR_SET_PDEATHSIG dies with the thread that spawned it.
    pub fn start_many(opts: &[KafkaOptions]) -> Vec<Kafka> {
        let mut out: Vec<Option<Kafka>> = (0..opts.len()).map(|_| None).collect();
        let mut last = vec![String::new(); opts.len()];
        for _ in 0..3 {
            let todo: Vec<usize> = (0..opts.len()).filter(|i| out[*i].is_none()).collect();
            if todo.is_empty() {
                break;
            }
            let mut prepared: Vec<(usize, Kafka)> = std::thread::scope(|s| {
                let handles: Vec<_> = todo
                    .iter()
                    .map(|&i| (i, s.spawn(move || Self::prepare(&opts[i]))))
                    .collect();
                handles
                    .into_iter()
                    .map(|(i, h)| {
                        (
                            i,
                            h.join().expect("format").unwrap_or_else(|e| panic!("{e}")),
                        )
                    })
                    .collect()
            });
            let spawned: Vec<(usize, Kafka, Vec<u64>)> = prepared
                .drain(..)
                .map(|(i, mut k)| {
                    let before = k.spawn_nodes();
                    (i, k, before)
                })
                .collect();
            for (i, mut k, before) in spawned {
                match k.wait_nodes(&before) {
                    Ok(()) => out[i] = Some(k),
                    Err(e) if e.contains("Address already in use") => last[i] = e,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        out.into_iter()
            .zip(last)
            .map(|(k, e)| k.unwrap_or_else(|| panic!("{e}")))
            .collect()
    }

    /// Fresh directories with the nodes' configurations, formatted; no process yet.
    fn prepare(opts: &KafkaOptions) -> Result<Kafka, String> {
        let id = cluster_id();
        let controller = free_port();
        let mut first = Self::prepare_node(opts, 1, controller, &id)?;
        for node in 2..=opts.brokers.unwrap_or(1) {
            // Another node's listeners are its own: only the first takes the asked ports.
            let others = KafkaOptions {
                port: None,
                advertised_port: None,
                ..opts.clone()
            };
            first
                .more
                .push(Self::prepare_node(&others, node, controller, &id)?);
        }
        Ok(first)
    }

    /// Node `node` of cluster `cluster_id` whose controller listens on `controller`: node 1
    /// is that controller and a broker, every other node a broker only.
    fn prepare_node(
        opts: &KafkaOptions,
        node: u32,
        controller: u16,
        cluster_id: &str,
    ) -> Result<Kafka, String> {
        let dir = tempfile::Builder::new()
            .prefix("kmirror-kafka-")
            .tempdir()
            .expect("temp dir");
        let d = dir.path();
        let port = opts.port.unwrap_or_else(free_port);
        let sasl = opts.sasl.then(free_port);
        let ssl = opts.tls.then(free_port);
        let sasl_ssl = (opts.sasl && opts.tls).then(free_port);
        let advertised = opts.advertised_port.unwrap_or(port);

        // The broker's own traffic (transaction markers to itself) on a listener of its
        // own, so that a proxy in front of PLAINTEXT cuts only the clients.
        let internal = free_port();
        let mut listeners = vec![
            format!("PLAINTEXT://127.0.0.1:{port}"),
            format!("INTERNAL://127.0.0.1:{internal}"),
        ];
        let mut advertise = vec![
            format!("PLAINTEXT://127.0.0.1:{advertised}"),
            format!("INTERNAL://127.0.0.1:{internal}"),
        ];
        let mut map = vec![
            "PLAINTEXT:PLAINTEXT",
            "INTERNAL:PLAINTEXT",
            "CONTROLLER:PLAINTEXT",
        ];
        for (name, p) in [
            ("SASL_PLAINTEXT", sasl),
            ("SSL", ssl),
            ("SASL_SSL", sasl_ssl),
        ] {
            if let Some(p) = p {
                listeners.push(format!("{name}://127.0.0.1:{p}"));
                advertise.push(format!("{name}://127.0.0.1:{p}"));
                map.push(match name {
                    "SASL_PLAINTEXT" => "SASL_PLAINTEXT:SASL_PLAINTEXT",
                    "SSL" => "SSL:SSL",
                    _ => "SASL_SSL:SASL_SSL",
                });
            }
        }
        if node == 1 {
            listeners.push(format!("CONTROLLER://127.0.0.1:{controller}"));
        }
        let roles = if node == 1 {
            "broker,controller"
        } else {
            "broker"
        };

        let data = d.join("data");
        let mut text = format!(
            "process.roles={roles}
node.id={node}
controller.quorum.voters=1@127.0.0.1:{controller}
listeners={listeners}
advertised.listeners={advertise}
listener.security.protocol.map={map}
inter.broker.listener.name=INTERNAL
controller.listener.names=CONTROLLER
log.dirs={data}
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
num.network.threads=2
num.io.threads=2
log.cleaner.dedupe.buffer.size=16777216
# No time-based retention unless a topic sets retention.ms: the tests write records with fixed
# timestamps from 2023, which Kafka's default 7 days would delete at the next check. A
# topic's retention and DeleteRecords act within a second.
log.retention.ms=-1
log.retention.check.interval.ms=1000
log.segment.delete.delay.ms=1000
# KIP-848 groups: a member that died leaves within 10 s, not 45 s.
group.consumer.min.session.timeout.ms=6000
group.consumer.session.timeout.ms=10000
group.consumer.min.heartbeat.interval.ms=500
group.consumer.heartbeat.interval.ms=1000
",
            listeners = listeners.join(","),
            advertise = advertise.join(","),
            map = map.join(","),
            data = escape(&data.display().to_string()),
        );
        let mut set = |k: &str, v: &str| text.push_str(&format!("{k}={}\n", escape(v)));
        if let Some(minutes) = opts.offsets_retention_minutes {
            set("offsets.retention.minutes", &minutes.to_string());
            set("offsets.retention.check.interval.ms", "1000");
        }
        if opts.sasl {
            set(
                "sasl.enabled.mechanisms",
                "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            );
            let plain_users: String = USERS
                .iter()
                .map(|(u, p)| format!(" user_{u}=\"{p}\""))
                .collect();
            let sasl_listeners: &[&str] = if opts.tls {
                &["sasl_plaintext", "sasl_ssl"]
            } else {
                &["sasl_plaintext"]
            };
            for listener in sasl_listeners {
                set(
                    &format!("listener.name.{listener}.plain.sasl.jaas.config"),
                    &format!(
                        "org.apache.kafka.common.security.plain.PlainLoginModule required \
                         username=\"admin\" password=\"admin-secret\"{plain_users};"
                    ),
                );
                for mech in ["scram-sha-256", "scram-sha-512"] {
                    set(
                        &format!("listener.name.{listener}.{mech}.sasl.jaas.config"),
                        "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                    );
                }
            }
        }
        if opts.tls {
            let store = make_certificates(d);
            set("ssl.keystore.type", "PKCS12");
            set("ssl.keystore.location", &store.display().to_string());
            set("ssl.keystore.password", "test-secret");
            set("ssl.key.password", "test-secret");
        }
        if opts.authorizer {
            set(
                "authorizer.class.name",
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            );
            set("super.users", "User:admin;User:ANONYMOUS");
        }
        for (k, v) in &opts.extra {
            set(k, v);
        }
        let config = d.join("server.properties");
        std::fs::write(&config, text).expect("server.properties");

        // Format: a fresh cluster id, and the SCRAM credentials of the test users.
        let mut format = java(d, "256m");
        format
            .args([
                "kafka.tools.StorageTool",
                "format",
                // `=`: an id may start with '-'.
                &format!("--cluster-id={cluster_id}"),
                "-c",
            ])
            .arg(&config);
        if opts.sasl {
            for (u, p) in USERS {
                for mech in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
                    format.args(["-S", &format!("{mech}=[name={u},password={p}]")]);
                }
            }
        }
        let out = format
            .output()
            .expect("run java (install a JDK: scripts/setup.sh)");
        if !out.status.success() {
            return Err(format!(
                "formatting Kafka's log directory failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }

        Ok(Kafka {
            addr: format!("127.0.0.1:{advertised}"),
            sasl: sasl.map(|p| format!("127.0.0.1:{p}")),
            ssl: ssl.map(|p| format!("127.0.0.1:{p}")),
            sasl_ssl: sasl_ssl.map(|p| format!("127.0.0.1:{p}")),
            dir: Some(dir),
            child: None,
            heap: opts.heap.clone().unwrap_or_else(|| "512m".into()),
            jvm: opts.jvm.clone(),
            more: Vec::new(),
        })
    }

    fn dir(&self) -> &Path {
        self.dir.as_ref().expect("dir").path()
    }

    /// Starts the broker process on the existing directory (on the calling thread); returns
    /// how many times the log said it started before.
    fn spawn_child(&mut self) -> u64 {
        let d = self.dir().to_path_buf();
        let log = d.join("broker.log");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("broker.log");
        let mut cmd = java_with(&d, &self.heap, self.jvm.as_deref());
        cmd.arg("kafka.Kafka")
            .arg(d.join("server.properties"))
            .stdout(file.try_clone().expect("log"))
            .stderr(file);
        let before = std::fs::read_to_string(&log)
            .map(|t| t.matches(STARTED).count() as u64)
            .unwrap_or(0);
        self.child = Some(cmd.spawn().expect("start Kafka (java)"));
        before
    }

    /// Waits until the broker logs that it serves (a start more than `before`).
    fn wait_ready(&mut self, before: u64) -> Result<(), String> {
        let log = self.dir().join("broker.log");
        let child = self.child.as_mut().expect("spawned");
        let ready = poll_until(Duration::from_secs(120), || {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(Err(format!("exited with {status}")));
            }
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            (text.matches(STARTED).count() as u64 > before).then_some(Ok(()))
        });
        let failure = match ready {
            Some(Ok(())) => return Ok(()),
            Some(Err(e)) => e,
            None => "did not start within 120 s".to_string(),
        };
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        Err(format!(
            "Kafka {failure}; its log ({}):\n{}",
            log.display(),
            tail(&std::fs::read_to_string(&log).unwrap_or_default(), 40)
        ))
    }

    /// Starts every node's process (the cluster's other nodes after this one); returns each
    /// one's [`Kafka::spawn_child`] count, in that order.
    fn spawn_nodes(&mut self) -> Vec<u64> {
        let mut before = vec![self.spawn_child()];
        before.extend(self.more.iter_mut().map(Kafka::spawn_child));
        before
    }

    /// Waits until every node spawned by [`Kafka::spawn_nodes`] serves.
    fn wait_nodes(&mut self, before: &[u64]) -> Result<(), String> {
        self.wait_ready(before[0])?;
        for (k, b) in self.more.iter_mut().zip(&before[1..]) {
            k.wait_ready(*b)?;
        }
        Ok(())
    }

    /// Stops every node (SIGTERM, then SIGKILL after 30 s), keeping their data.
    pub fn stop(&mut self) {
        for k in self.more.iter_mut() {
            k.stop();
        }
        if let Some(child) = self.child.take() {
            terminate(child, Duration::from_secs(30));
        }
    }

    /// Starts the stopped cluster again on the same ports and data.
    pub fn restart(&mut self) {
        self.stop();
        let before = self.spawn_nodes();
        self.wait_nodes(&before).unwrap_or_else(|e| panic!("{e}"));
    }

    /// The CA certificate (PEM) the broker's certificate chains to, with
    /// [`KafkaOptions::tls`].
    pub fn ca(&self) -> PathBuf {
        self.dir().join("ca.pem")
    }

    /// The SASL_PLAINTEXT listener (a cluster started with [`KafkaOptions::sasl`]).
    pub fn sasl_addr(&self) -> &str {
        self.sasl.as_deref().expect("a cluster started with SASL")
    }

    /// The SSL listener (a cluster started with [`KafkaOptions::tls`]).
    pub fn ssl_addr(&self) -> &str {
        self.ssl.as_deref().expect("a cluster started with TLS")
    }

    /// The SASL_SSL listener (a cluster started with both).
    pub fn sasl_ssl_addr(&self) -> &str {
        self.sasl_ssl
            .as_deref()
            .expect("a cluster started with SASL and TLS")
    }

    /// The broker's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir().join("broker.log")).unwrap_or_default()
    }
}

impl Drop for Kafka {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("Kafka's directory kept: {}", dir.keep().display());
        }
    }
}

/// SIGTERM, then SIGKILL once `grace` has passed.
fn terminate(mut child: Child, grace: Duration) {
    // SAFETY: signalling our own child by pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    if poll_until(grace, || child.try_wait().ok().flatten()).is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A KRaft cluster id: 16 random bytes, base64url without padding.
fn cluster_id() -> String {
    use base64::Engine;
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("random");
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Escapes a Java properties value (backslashes only; the values are one line).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Makes a CA (`ca.pem`) and a broker certificate for 127.0.0.1 and localhost signed by it,
/// with `openssl`; returns the PKCS#12 keystore holding the broker's key and chain
/// (password `test-secret`).
fn make_certificates(dir: &Path) -> PathBuf {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=kmirror test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "broker.key",
        "-out",
        "broker.csr",
    ]);
    let mut ext = std::fs::File::create(dir.join("broker.ext")).expect("broker.ext");
    writeln!(ext, "subjectAltName=IP:127.0.0.1,DNS:localhost").expect("write");
    run(&[
        "x509",
        "-req",
        "-in",
        "broker.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "broker.ext",
        "-out",
        "broker.pem",
    ]);
    run(&[
        "pkcs12",
        "-export",
        "-in",
        "broker.pem",
        "-inkey",
        "broker.key",
        "-certfile",
        "ca.pem",
        "-name",
        "broker",
        "-passout",
        "pass:test-secret",
        "-out",
        "broker.p12",
    ]);
    dir.join("broker.p12")
}

/// A running MirrorMaker 2 in dedicated mode (`org.apache.kafka.connect.mirror.MirrorMaker`).
pub struct Mm2 {
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl Mm2 {
    /// Starts MirrorMaker 2 with `properties` (an `mm2.properties` text).
    pub fn start(properties: &str) -> Mm2 {
        Self::launch(properties, |dir| java(dir, "512m"))
    }

    /// Starts MirrorMaker 2 with `properties` in a JVM started with `jvm` (for benchmarks:
    /// the options its own script, `connect-mirror-maker.sh`, uses).
    pub fn start_with_jvm(properties: &str, jvm: &[&str]) -> Mm2 {
        Self::launch(properties, |dir| java_exact(dir, jvm))
    }

    /// MirrorMaker 2 in the JVM `java` makes for its directory.
    fn launch(properties: &str, java: impl FnOnce(&Path) -> Command) -> Mm2 {
        let dir = tempfile::Builder::new()
            .prefix("kmirror-mm2-")
            .tempdir()
            .expect("temp dir");
        let config = dir.path().join("mm2.properties");
        std::fs::write(&config, properties).expect("mm2.properties");
        let log = std::fs::File::create(dir.path().join("mm2.log")).expect("mm2.log");
        let mut cmd = java(dir.path());
        cmd.arg("org.apache.kafka.connect.mirror.MirrorMaker")
            .arg(&config)
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        Mm2 {
            child: Some(cmd.spawn().expect("start MirrorMaker 2 (java)")),
            dir,
        }
    }

    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The properties of a test flow `source` -> `target` (aliases `primary` and `backup`):
    /// every internal topic at replication factor 1, discovery, checkpoints and group offset
    /// sync every second or few, an offset sync for every record, no heartbeats back to
    /// the source; `extra` lines on top.
    pub fn test_properties(source: &str, target: &str, extra: &str) -> String {
        format!(
            "clusters = primary, backup
primary.bootstrap.servers = {source}
backup.bootstrap.servers = {target}
primary->backup.enabled = true
primary->backup.topics = .*
backup->primary.enabled = false
backup->primary.emit.heartbeats.enabled = false
replication.factor = 1
offset-syncs.topic.replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
offset.storage.replication.factor = 1
config.storage.replication.factor = 1
status.storage.replication.factor = 1
refresh.topics.interval.seconds = 2
refresh.groups.interval.seconds = 2
emit.checkpoints.interval.seconds = 1
sync.group.offsets.enabled = true
sync.group.offsets.interval.seconds = 1
sync.topic.acls.enabled = false
emit.heartbeats.interval.seconds = 1
offset.lag.max = 0
backup.offset.flush.interval.ms = 1000
backup.scheduled.rebalance.max.delay.ms = 0
{extra}
"
        )
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Stops it (SIGTERM; SIGKILL after 60 s, MirrorMaker's own shutdown bound).
    pub fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            terminate(child, Duration::from_secs(60));
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("mm2.log")).unwrap_or_default()
    }
}

impl Drop for Mm2 {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("MirrorMaker 2's log:\n{}", tail(&self.log(), 60));
        }
    }
}
