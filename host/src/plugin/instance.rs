//! A long-lived, configured component instance per role.
//!
//! Each role instance owns its store. Calls are serialised by a mutex, bounded by the
//! epoch deadline and the memory limiter. After any failed call the instance is dropped
//! (a trapped component instance cannot be entered again) and the next call instantiates
//! and configures a fresh one, so one bad input never disables a plugin.

use super::bindings::{
    config_property_filter, group_filter, record_transform, replication_policy, topic_filter,
};
use super::engine::{HostState, MemoryLimitExceeded};
use crate::policy::transform::MAX_TRANSFORMED_RECORD_BYTES;
use crate::policy::{
    ConfigPropertyFilter, GroupFilter, Outcome, PluginError, RecordIn, RecordTransform,
    ReplicationPolicy, Rewritten, Role, TopicFilter, TrapKind,
};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;
use wasmtime::Store;
use wasmtime::component::{Instance, InstancePre};

type Pairs = Vec<(String, String)>;

/// The longest string a plugin may return, in bytes (topic names are at most 249).
pub const MAX_ANSWER_BYTES: usize = 64 << 10;

fn short(s: &str) -> Result<(), String> {
    if s.len() > MAX_ANSWER_BYTES {
        return Err(format!(
            "a string of {} bytes (at most {MAX_ANSWER_BYTES})",
            s.len()
        ));
    }
    Ok(())
}

fn short_opt(s: &Option<String>) -> Result<(), String> {
    s.as_deref().map_or(Ok(()), short)
}

fn one_each<T>(asked: usize) -> impl FnOnce(&Vec<T>) -> Result<(), String> {
    move |answers| {
        if answers.len() == asked {
            Ok(())
        } else {
            Err(format!(
                "{} answers for {asked} names (one per name, in order)",
                answers.len()
            ))
        }
    }
}

/// What every instance of a component shares.
pub(crate) struct Loaded {
    pub host: super::PluginHost,
    pub pre: InstancePre<HostState>,
    pub name: String,
    /// Where its calls are counted.
    pub stats: Arc<super::stats::PluginStats>,
}

/// The bindgen `Guest` type of one role's interface.
pub(crate) trait RoleGuest: Sized + Send + 'static {
    const ROLE: Role;
    type Indices: Send + Sync + 'static;
    fn indices(pre: &InstancePre<HostState>) -> wasmtime::Result<Self::Indices>;
    fn load(
        indices: &Self::Indices,
        store: &mut Store<HostState>,
        instance: &Instance,
    ) -> wasmtime::Result<Self>;
    fn configure(
        &self,
        store: &mut Store<HostState>,
        config: &Pairs,
    ) -> wasmtime::Result<Result<(), String>>;
}

macro_rules! role_guest {
    ($module:ident, $role:expr) => {
        impl RoleGuest for $module::Guest {
            const ROLE: Role = $role;
            type Indices = $module::GuestIndices;
            fn indices(pre: &InstancePre<HostState>) -> wasmtime::Result<Self::Indices> {
                $module::GuestIndices::new(pre)
            }
            fn load(
                indices: &Self::Indices,
                store: &mut Store<HostState>,
                instance: &Instance,
            ) -> wasmtime::Result<Self> {
                indices.load(store, instance)
            }
            fn configure(
                &self,
                store: &mut Store<HostState>,
                config: &Pairs,
            ) -> wasmtime::Result<Result<(), String>> {
                self.call_configure(store, config)
            }
        }
    };
}

role_guest!(topic_filter, Role::TopicFilter);
role_guest!(group_filter, Role::GroupFilter);
role_guest!(replication_policy, Role::ReplicationPolicy);
role_guest!(config_property_filter, Role::ConfigPropertyFilter);

impl RoleGuest for record_transform::Guest {
    const ROLE: Role = Role::RecordTransform;
    type Indices = record_transform::GuestIndices;
    fn indices(pre: &InstancePre<HostState>) -> wasmtime::Result<Self::Indices> {
        record_transform::GuestIndices::new(pre)
    }
    fn load(
        indices: &Self::Indices,
        store: &mut Store<HostState>,
        instance: &Instance,
    ) -> wasmtime::Result<Self> {
        indices.load(store, instance)
    }
    fn configure(
        &self,
        store: &mut Store<HostState>,
        config: &Pairs,
    ) -> wasmtime::Result<Result<(), String>> {
        // Its bindings borrow their parameters.
        let pairs: Vec<(&str, &str)> = config
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.call_configure(store, &pairs)
    }
}

struct Live<G> {
    store: Store<HostState>,
    guest: G,
}

/// One configured instance of a component playing role `G`.
pub(crate) struct RoleInstance<G: RoleGuest> {
    loaded: Arc<Loaded>,
    indices: G::Indices,
    config: Pairs,
    live: Mutex<Option<Live<G>>>,
}

impl<G: RoleGuest> RoleInstance<G> {
    /// Instantiates and configures; a configuration error is reported here, once.
    pub fn new(loaded: Arc<Loaded>, config: Pairs) -> Result<Self, PluginError> {
        let indices = G::indices(&loaded.pre).map_err(|e| PluginError::Instantiate {
            plugin: loaded.name.clone(),
            message: format!("{} role: {e:#}", G::ROLE),
        })?;
        let this = RoleInstance {
            loaded,
            indices,
            config,
            live: Mutex::new(None),
        };
        let live = this.start()?;
        *this.live.lock().unwrap_or_else(PoisonError::into_inner) = Some(live);
        Ok(this)
    }

    fn start(&self) -> Result<Live<G>, PluginError> {
        let host = &self.loaded.host;
        let _ticking = host.busy();
        let mut store = Store::new(host.engine(), HostState::new(host.limits()));
        store.limiter(|state| &mut state.limiter);
        store.set_epoch_deadline(host.limits().deadline_ticks());
        let instance = match self.loaded.pre.instantiate(&mut store) {
            Ok(i) => i,
            Err(e) => return Err(self.classify(e, "instantiate", store.data().output.take())),
        };
        let guest = match G::load(&self.indices, &mut store, &instance) {
            Ok(g) => g,
            Err(e) => return Err(self.classify(e, "instantiate", store.data().output.take())),
        };
        store.set_epoch_deadline(host.limits().deadline_ticks());
        let configured = guest.configure(&mut store, &self.config);
        let output = store.data().output.take();
        self.log_output("configure", &output);
        match configured {
            Ok(Ok(())) => Ok(Live { store, guest }),
            Ok(Err(message)) => Err(PluginError::Config {
                plugin: self.loaded.name.clone(),
                role: G::ROLE,
                message,
            }),
            Err(e) => Err(self.classify(e, "configure", output)),
        }
    }

    /// Runs one call within the limits; on failure the instance is discarded.
    fn call<R>(
        &self,
        function: &'static str,
        f: impl FnOnce(&G, &mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<R, PluginError> {
        self.checked(function, f, |_| Ok(()))
    }

    /// Runs one call within the limits and checks its answer with `check`; on a failed call
    /// the instance is discarded (a refused answer keeps it: the call itself returned).
    /// Every call is counted in the plugin's stats, with its duration and outcome.
    fn checked<R>(
        &self,
        function: &'static str,
        f: impl FnOnce(&G, &mut Store<HostState>) -> wasmtime::Result<R>,
        check: impl FnOnce(&R) -> Result<(), String>,
    ) -> Result<R, PluginError> {
        let began = Instant::now();
        let (result, output) = self.run(function, f);
        let result = result.and_then(|value| {
            check(&value).map_err(|message| PluginError::Output {
                plugin: self.loaded.name.clone(),
                function,
                message,
            })?;
            Ok(value)
        });
        let error = result.as_ref().err();
        self.loaded
            .stats
            .call(began.elapsed(), error, Some(&output));
        if error.is_none() {
            self.log_output(function, &output);
        }
        result
    }

    /// The call and what the guest wrote during it.
    fn run<R>(
        &self,
        function: &'static str,
        f: impl FnOnce(&G, &mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> (Result<R, PluginError>, String) {
        let mut slot = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        let _ticking = self.loaded.host.busy();
        let live = match slot.as_mut() {
            Some(live) => live,
            None => match self.start() {
                Ok(live) => slot.insert(live),
                Err(e) => return (Err(e), String::new()),
            },
        };
        live.store
            .set_epoch_deadline(self.loaded.host.limits().deadline_ticks());
        let result = f(&live.guest, &mut live.store);
        let output = live.store.data().output.take();
        match result {
            Ok(value) => (Ok(value), output),
            Err(e) => {
                *slot = None;
                let error = self.classify(e, function, output.clone());
                (Err(error), output)
            }
        }
    }

    /// A guest's output from a call that succeeded, at debug level (a failed call carries
    /// it in its error).
    fn log_output(&self, function: &'static str, output: &str) {
        if !output.is_empty() {
            tracing::debug!(plugin = %self.loaded.name, function, output, "plugin output");
        }
    }

    fn classify(
        &self,
        error: wasmtime::Error,
        function: &'static str,
        output: String,
    ) -> PluginError {
        let plugin = self.loaded.name.clone();
        if let Some(limit) = error.downcast_ref::<MemoryLimitExceeded>() {
            return PluginError::MemoryLimit {
                plugin,
                function,
                limit: limit.limit,
            };
        }
        let Some(trap) = error.downcast_ref::<wasmtime::Trap>() else {
            return PluginError::Call {
                plugin,
                function,
                message: format!("{error:#}"),
            };
        };
        // The trap alone; the wasm backtrace is for `KMIRROR_LOG=debug`.
        tracing::debug!(plugin = %plugin, function, error = %format!("{error:?}"), "plugin call trapped");
        let message = trap.to_string();
        let kind = match trap {
            wasmtime::Trap::Interrupt => {
                let deadline = self.loaded.host.limits().call_deadline;
                return PluginError::Timeout {
                    plugin,
                    function,
                    deadline,
                };
            }
            wasmtime::Trap::UnreachableCodeReached => TrapKind::Unreachable,
            wasmtime::Trap::MemoryOutOfBounds
            | wasmtime::Trap::TableOutOfBounds
            | wasmtime::Trap::HeapMisaligned => TrapKind::OutOfBounds,
            wasmtime::Trap::StackOverflow => TrapKind::StackOverflow,
            wasmtime::Trap::IntegerDivisionByZero
            | wasmtime::Trap::IntegerOverflow
            | wasmtime::Trap::BadConversionToInteger => TrapKind::Arithmetic,
            _ => TrapKind::Other,
        };
        PluginError::Trap {
            plugin,
            function,
            kind,
            message,
            output,
        }
    }
}

impl TopicFilter for RoleInstance<topic_filter::Guest> {
    fn should_replicate_topic(&self, topic: &str) -> Result<bool, PluginError> {
        self.call("should-replicate-topic", |g, s| {
            g.call_should_replicate_topic(s, topic)
        })
    }
    fn should_replicate_topics(&self, topics: &[String]) -> Result<Vec<bool>, PluginError> {
        self.checked(
            "should-replicate-topics",
            |g, s| g.call_should_replicate_topics(s, topics),
            one_each(topics.len()),
        )
    }
}

impl GroupFilter for RoleInstance<group_filter::Guest> {
    fn should_replicate_group(&self, group: &str) -> Result<bool, PluginError> {
        self.call("should-replicate-group", |g, s| {
            g.call_should_replicate_group(s, group)
        })
    }
    fn should_replicate_groups(&self, groups: &[String]) -> Result<Vec<bool>, PluginError> {
        self.checked(
            "should-replicate-groups",
            |g, s| g.call_should_replicate_groups(s, groups),
            one_each(groups.len()),
        )
    }
}

impl ConfigPropertyFilter for RoleInstance<config_property_filter::Guest> {
    fn should_replicate_config_property(&self, name: &str) -> Result<bool, PluginError> {
        self.call("should-replicate-config-property", |g, s| {
            g.call_should_replicate_config_property(s, name)
        })
    }
    fn should_replicate_source_default(&self, name: &str) -> Result<bool, PluginError> {
        self.call("should-replicate-source-default", |g, s| {
            g.call_should_replicate_source_default(s, name)
        })
    }
}

impl ReplicationPolicy for RoleInstance<replication_policy::Guest> {
    fn format_remote_topic(&self, source_alias: &str, topic: &str) -> Result<String, PluginError> {
        self.checked(
            "format-remote-topic",
            |g, s| g.call_format_remote_topic(s, source_alias, topic),
            |a| short(a),
        )
    }
    fn topic_source(&self, topic: &str) -> Result<Option<String>, PluginError> {
        self.checked(
            "topic-source",
            |g, s| g.call_topic_source(s, topic),
            short_opt,
        )
    }
    fn upstream_topic(&self, topic: &str) -> Result<Option<String>, PluginError> {
        self.checked(
            "upstream-topic",
            |g, s| g.call_upstream_topic(s, topic),
            short_opt,
        )
    }
    fn original_topic(&self, topic: &str) -> Result<String, PluginError> {
        self.checked(
            "original-topic",
            |g, s| g.call_original_topic(s, topic),
            |a| short(a),
        )
    }
    fn heartbeats_topic(&self) -> Result<String, PluginError> {
        self.checked(
            "heartbeats-topic",
            |g, s| g.call_heartbeats_topic(s),
            |a| short(a),
        )
    }
    fn offset_syncs_topic(&self, cluster_alias: &str) -> Result<String, PluginError> {
        self.checked(
            "offset-syncs-topic",
            |g, s| g.call_offset_syncs_topic(s, cluster_alias),
            |a| short(a),
        )
    }
    fn checkpoints_topic(&self, cluster_alias: &str) -> Result<String, PluginError> {
        self.checked(
            "checkpoints-topic",
            |g, s| g.call_checkpoints_topic(s, cluster_alias),
            |a| short(a),
        )
    }
    fn is_heartbeats_topic(&self, topic: &str) -> Result<bool, PluginError> {
        self.call("is-heartbeats-topic", |g, s| {
            g.call_is_heartbeats_topic(s, topic)
        })
    }
    fn is_checkpoints_topic(&self, topic: &str) -> Result<bool, PluginError> {
        self.call("is-checkpoints-topic", |g, s| {
            g.call_is_checkpoints_topic(s, topic)
        })
    }
    fn is_mm2_internal_topic(&self, topic: &str) -> Result<bool, PluginError> {
        self.call("is-mm2-internal-topic", |g, s| {
            g.call_is_mm2_internal_topic(s, topic)
        })
    }
    fn is_internal_topic(&self, topic: &str) -> Result<bool, PluginError> {
        self.call("is-internal-topic", |g, s| {
            g.call_is_internal_topic(s, topic)
        })
    }
    fn format_remote_topics(
        &self,
        source_alias: &str,
        topics: &[String],
    ) -> Result<Vec<String>, PluginError> {
        self.checked(
            "format-remote-topics",
            |g, s| g.call_format_remote_topics(s, source_alias, topics),
            |names: &Vec<String>| {
                one_each(topics.len())(names)?;
                names.iter().try_for_each(|n| short(n))
            },
        )
    }
}

impl RecordTransform for RoleInstance<record_transform::Guest> {
    fn transform(&self, records: &[RecordIn<'_>]) -> Result<Vec<Outcome>, PluginError> {
        use record_transform as wit;
        // The batch's headers in one vector, each record's a slice of it: no allocation per
        // record on the hot path.
        let headers: Vec<wit::HeaderParam<'_>> = records
            .iter()
            .flat_map(|r| &r.headers)
            .map(|(key, value)| wit::HeaderParam { key, value: *value })
            .collect();
        let mut rest = headers.as_slice();
        let batch: Vec<wit::SourceRecord<'_>> = records
            .iter()
            .map(|r| {
                let (headers, after) = rest.split_at(r.headers.len());
                rest = after;
                wit::SourceRecord {
                    topic: r.topic,
                    partition: r.partition,
                    offset: r.offset,
                    timestamp: r.timestamp,
                    key: r.key,
                    value: r.value,
                    headers,
                }
            })
            .collect();
        let answers = self.checked(
            "transform",
            |g, s| g.call_transform(s, &batch),
            |outcomes: &Vec<wit::Outcome>| {
                if outcomes.len() != records.len() {
                    return Err(format!(
                        "{} outcomes for {} records (one per record, in order)",
                        outcomes.len(),
                        records.len()
                    ));
                }
                for (i, o) in outcomes.iter().enumerate() {
                    if let wit::Outcome::Rewrite(r) = o {
                        let size = r.key.as_ref().map_or(0, Vec::len)
                            + r.value.as_ref().map_or(0, Vec::len)
                            + r.headers
                                .iter()
                                .map(|h| h.key.len() + h.value.as_ref().map_or(0, Vec::len))
                                .sum::<usize>();
                        if size > MAX_TRANSFORMED_RECORD_BYTES {
                            return Err(format!(
                                "record {i} (offset {}) rewritten to {size} bytes (at most {MAX_TRANSFORMED_RECORD_BYTES})",
                                records[i].offset
                            ));
                        }
                    }
                }
                Ok(())
            },
        )?;
        Ok(answers
            .into_iter()
            .map(|o| match o {
                wit::Outcome::Keep => Outcome::Keep,
                wit::Outcome::Drop => Outcome::Drop,
                wit::Outcome::Rewrite(r) => Outcome::Rewrite(Rewritten {
                    key: r.key,
                    value: r.value,
                    headers: r.headers.into_iter().map(|h| (h.key, h.value)).collect(),
                }),
            })
            .collect())
    }
}
