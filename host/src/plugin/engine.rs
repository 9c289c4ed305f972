//! The one place wasmtime is configured: engine settings, per-instance limits, the epoch
//! ticker that enforces call deadlines, and the WASI context that grants nothing.

use super::cache::ComponentCache;
use super::output::GuestOutput;
use super::stats::PluginRegistry;
use crate::policy::PluginError;
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Engine, ResourceLimiter};
use wasmtime_wasi::{
    HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView,
};

/// How often the epoch advances; call deadlines are rounded up to this.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Resource limits: per instance, per call, and per component loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Memory cap per instance, in bytes, over all of its linear memories together.
    pub memory_bytes: usize,
    /// The longest one call (including instantiation and `configure`) may run before it is
    /// interrupted.
    pub call_deadline: Duration,
    /// Cap on table elements per table.
    pub table_elements: usize,
    /// The largest component file loaded, in bytes.
    pub max_component_bytes: usize,
    /// The longest compiling one component may take.
    pub compile_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 64 << 20,
            call_deadline: Duration::from_secs(1),
            table_elements: 100_000,
            max_component_bytes: 32 << 20,
            compile_timeout: Duration::from_secs(60),
        }
    }
}

impl Limits {
    /// The deadline in epoch ticks (at least one whole tick beyond the current one).
    pub(crate) fn deadline_ticks(&self) -> u64 {
        let tick = EPOCH_TICK.as_nanos();
        (self.call_deadline.as_nanos().div_ceil(tick) as u64).max(1) + 1
    }
}

/// The error a memory grow past the cap traps with.
#[derive(Debug, thiserror::Error)]
#[error("memory limit of {limit} bytes exceeded (asked for {desired})")]
pub(crate) struct MemoryLimitExceeded {
    pub limit: usize,
    pub desired: usize,
}

/// Enforces [`Limits`] on one store: the memory cap counts every linear memory of the
/// instance together.
pub(crate) struct Limiter {
    limits: Limits,
    /// Bytes of linear memory the instance holds, over all its memories.
    used: usize,
}

impl Limiter {
    fn new(limits: Limits) -> Self {
        Limiter { limits, used: 0 }
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = (self.used - current.min(self.used)).saturating_add(desired);
        if total > self.limits.memory_bytes {
            return Err(MemoryLimitExceeded {
                limit: self.limits.memory_bytes,
                desired: total,
            }
            .into());
        }
        self.used = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= self.limits.table_elements)
    }

    fn instances(&self) -> usize {
        // A component built by wit-component holds a handful of core instances.
        32
    }

    fn tables(&self) -> usize {
        16
    }

    fn memories(&self) -> usize {
        4
    }
}

/// What a plugin's store holds: the limiter and a WASI context that grants nothing.
pub(crate) struct HostState {
    pub limiter: Limiter,
    /// What the guest writes to stdout and stderr (the newest bytes).
    pub output: GuestOutput,
    wasi: WasiCtx,
    table: ResourceTable,
}

impl HostState {
    pub fn new(limits: Limits) -> Self {
        let output = GuestOutput::default();
        HostState {
            limiter: Limiter::new(limits),
            wasi: deny_all_wasi(&output),
            output,
            table: ResourceTable::new(),
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// A wall clock stopped at the Unix epoch.
struct FixedWallClock;

impl HostWallClock for FixedWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

/// A monotonic clock that never advances.
struct FixedMonotonicClock;

impl HostMonotonicClock for FixedMonotonicClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

/// A WASI context that grants nothing: no preopened directories, no environment, no
/// arguments, empty stdin and discarded stdout/stderr, no sockets or name lookups, clocks
/// stopped at zero and "random" numbers from a fixed seed. Guests built for `wasm32-wasip2`
/// import WASI and would not instantiate without it; they get no capability through it.
fn deny_all_wasi(output: &GuestOutput) -> WasiCtx {
    WasiCtxBuilder::new()
        .stdout(output.clone())
        .stderr(output.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .wall_clock(FixedWallClock)
        .monotonic_clock(FixedMonotonicClock)
        .secure_random(StdRng::seed_from_u64(0))
        .insecure_random(StdRng::seed_from_u64(0))
        .insecure_random_seed(0)
        .build()
}

/// The engine every plugin runs on (also built by the compiler process: the same settings
/// give the same compatibility hash).
pub(crate) fn new_engine() -> wasmtime::Result<Engine> {
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    // Component-model concurrency doubles the cost of every call and no role needs it.
    config.concurrency_support(false);
    config.cranelift_opt_level(wasmtime::OptLevel::Speed);
    Engine::new(&config)
}

/// The WASI monotonic-clock interface the linker provides.
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// Why a guest's wait was refused.
#[derive(Debug, thiserror::Error)]
#[error("plugins may not sleep or wait on a clock ({0} is denied): a call must return promptly")]
pub(crate) struct WaitDenied(pub &'static str);

/// Replaces the clock subscriptions with functions that trap: a guest's `sleep` would block
/// inside the host, where the call deadline (epoch interruption) cannot reach it. Nothing
/// else a guest can import blocks: there are no sockets or files, stdin is empty and
/// stdout/stderr never fill.
fn deny_waiting(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    use wasmtime::component::Resource;
    use wasmtime_wasi::p2::DynPollable;
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    clock.func_wrap(
        "subscribe-duration",
        |_, (_,): (u64,)| -> wasmtime::Result<(Resource<DynPollable>,)> {
            Err(WaitDenied("subscribe-duration").into())
        },
    )?;
    clock.func_wrap(
        "subscribe-instant",
        |_, (_,): (u64,)| -> wasmtime::Result<(Resource<DynPollable>,)> {
            Err(WaitDenied("subscribe-instant").into())
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// The epoch ticker's state: it ticks only while a call is running, so an idle host costs
/// nothing.
struct Ticker {
    stop: AtomicBool,
    active: AtomicUsize,
    thread: OnceLock<std::thread::Thread>,
}

/// Keeps the epoch ticking while a guest runs.
pub(crate) struct Busy<'a>(&'a Ticker);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

struct Inner {
    engine: Engine,
    linker: Linker<HostState>,
    limits: Limits,
    cache: Option<ComponentCache>,
    ticker: Arc<Ticker>,
    registry: Arc<PluginRegistry>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.ticker.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.ticker.thread.get() {
            t.unpark();
        }
    }
}

/// The plugin runtime: one engine, one linker, the limits every instance gets and the
/// on-disk compile cache. Cheap to clone; components keep it alive.
#[derive(Clone)]
pub struct PluginHost(Arc<Inner>);

impl PluginHost {
    /// A host with `limits` and, when `cache` is given, a compile cache there.
    pub fn new(limits: Limits, cache: Option<ComponentCache>) -> Result<Self, PluginError> {
        Self::with_registry(limits, cache, Arc::default())
    }

    /// A runtime whose plugins count their calls in `registry` (shared across the
    /// configurations a daemon loads, so counts survive a reload).
    pub fn with_registry(
        limits: Limits,
        cache: Option<ComponentCache>,
        registry: Arc<PluginRegistry>,
    ) -> Result<Self, PluginError> {
        let engine = new_engine().map_err(|e| PluginError::Engine(format!("{e:#}")))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| PluginError::Engine(format!("{e:#}")))?;
        deny_waiting(&mut linker).map_err(|e| PluginError::Engine(format!("{e:#}")))?;

        let ticker = Arc::new(Ticker {
            stop: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            thread: OnceLock::new(),
        });
        let (ticker_engine, t) = (engine.clone(), ticker.clone());
        let handle = std::thread::Builder::new()
            .name("kmirror-epoch".into())
            .spawn(move || {
                while !t.stop.load(Ordering::Relaxed) {
                    if t.active.load(Ordering::Acquire) == 0 {
                        std::thread::park_timeout(Duration::from_secs(1));
                        continue;
                    }
                    std::thread::sleep(EPOCH_TICK);
                    ticker_engine.increment_epoch();
                }
            })
            .map_err(|e| PluginError::Engine(format!("cannot start the epoch ticker: {e}")))?;
        let _ = ticker.thread.set(handle.thread().clone());
        Ok(PluginHost(Arc::new(Inner {
            engine,
            linker,
            limits,
            cache,
            ticker,
            registry,
        })))
    }

    /// The limits every instance gets.
    pub fn limits(&self) -> Limits {
        self.0.limits
    }

    /// Keeps the epoch ticking until the guard is dropped (around every guest call).
    pub(crate) fn busy(&self) -> Busy<'_> {
        let t = &self.0.ticker;
        if t.active.fetch_add(1, Ordering::AcqRel) == 0
            && let Some(thread) = t.thread.get()
        {
            thread.unpark();
        }
        Busy(t)
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.0.engine
    }

    pub(crate) fn linker(&self) -> &Linker<HostState> {
        &self.0.linker
    }

    pub(crate) fn cache(&self) -> Option<&ComponentCache> {
        self.0.cache.as_ref()
    }

    /// Every plugin's stats.
    pub fn registry(&self) -> &Arc<PluginRegistry> {
        &self.0.registry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_cap_counts_every_memory_together() {
        let limits = Limits {
            memory_bytes: 64 << 20,
            ..Limits::default()
        };
        let mut l = Limiter::new(limits);
        // Two memories of 40 MiB each exceed 64 MiB together.
        assert!(l.memory_growing(0, 40 << 20, None).is_ok());
        assert!(l.memory_growing(0, 40 << 20, None).is_err());
        // Growing the first one within the cap is still fine.
        assert!(l.memory_growing(40 << 20, 60 << 20, None).is_ok());
        assert!(l.memory_growing(60 << 20, 65 << 20, None).is_err());
    }

    #[test]
    fn deadline_rounds_up_to_ticks() {
        let l = Limits {
            call_deadline: Duration::from_millis(12),
            ..Limits::default()
        };
        assert_eq!(l.deadline_ticks(), 4);
        let l = Limits {
            call_deadline: Duration::ZERO,
            ..Limits::default()
        };
        assert_eq!(l.deadline_ticks(), 2);
    }
}
