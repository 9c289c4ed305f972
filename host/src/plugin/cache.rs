//! Compiled components on disk, so a restart does not recompile.
//!
//! An entry is keyed by the SHA-256 of the component's bytes and of the engine's
//! compatibility hash (wasmtime version, compiler settings, CPU features), so a changed
//! plugin or engine never reuses a stale artefact. Entries are only ever read from a
//! directory this host created and wrote, and each carries the SHA-256 of its own bytes,
//! checked before the artefact is handed to wasmtime.

use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Whether a load was served from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Read a compiled artefact from the cache.
    Hit,
    /// Compiled the component (and stored it, if there is a cache).
    Compiled,
}

/// Where compiled components are cached, as the command line chose.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CacheChoice {
    /// The configuration's `[plugins] cache_dir` if it has one, else the user's cache
    /// directory ([`ComponentCache::default_location`]).
    #[default]
    FromConfig,
    /// This directory (`--cache-dir`), whatever the configuration says.
    Dir(PathBuf),
    /// No cache (`--no-cache`).
    Disabled,
}

impl CacheChoice {
    /// The cache to use, given the configuration's `cache_dir` (already resolved against
    /// the configuration file's directory).
    pub fn resolve(&self, configured: Option<PathBuf>) -> Option<ComponentCache> {
        match self {
            CacheChoice::Disabled => None,
            CacheChoice::Dir(dir) => Some(ComponentCache::new(dir.clone())),
            CacheChoice::FromConfig => configured
                .map(ComponentCache::new)
                .or_else(ComponentCache::default_location),
        }
    }
}

/// A directory of compiled components.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: PathBuf,
}

/// Feeds `Hash` output into SHA-256, for a hash that is stable across processes.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl ComponentCache {
    /// A cache in `dir` (created on first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ComponentCache { dir: dir.into() }
    }

    /// `$KMIRROR_CACHE_DIR`, else `$XDG_CACHE_HOME/kmirror/components`, else
    /// `$HOME/.cache/kmirror/components`; `None` if none of them is set.
    pub fn default_location() -> Option<Self> {
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        env("KMIRROR_CACHE_DIR")
            .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("kmirror/components")))
            .or_else(|| env("HOME").map(|d| d.join(".cache/kmirror/components")))
            .map(Self::new)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn key(engine: &Engine, component: &[u8]) -> String {
        let mut hasher = ShaHasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        hasher.0.update(b"\0component\0");
        hasher.0.update(component);
        hex(&hasher.0.finalize())
    }

    fn entry_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.cwasm"))
    }

    /// The compiled form of `bytes`: from the cache if a valid entry exists, else compiled
    /// and stored. A corrupt entry is replaced; a cache that cannot be written is skipped
    /// (the component still loads).
    pub(crate) fn load_or_compile(
        &self,
        engine: &Engine,
        bytes: &[u8],
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        let key = Self::key(engine, bytes);
        let path = self.entry_path(&key);
        if let Some(artefact) = read_entry(&path) {
            // SAFETY: the artefact was produced by `Engine::precompile_component` of an
            // engine with the same compatibility hash (it is part of the key), written by
            // this host into its own cache directory, and its checksum matched.
            if let Ok(component) = unsafe { Component::deserialize(engine, &artefact) } {
                return Ok((component, CacheOutcome::Hit));
            }
        }
        let artefact = engine.precompile_component(bytes)?;
        if let Err(e) = self.write_entry(&path, &artefact) {
            tracing::warn!(cache = %self.dir.display(), error = %e, "cannot write the plugin compile cache");
        }
        // SAFETY: produced just now by this engine's `precompile_component`.
        let component = unsafe { Component::deserialize(engine, &artefact)? };
        Ok((component, CacheOutcome::Compiled))
    }

    fn write_entry(&self, path: &Path, artefact: &[u8]) -> std::io::Result<()> {
        create_private_dir(&self.dir)?;
        let mut tmp = tempfile_in(&self.dir)?;
        tmp.1.write_all(&Sha256::digest(artefact))?;
        tmp.1.write_all(artefact)?;
        tmp.1.sync_all()?;
        std::fs::rename(&tmp.0, path)
    }
}

/// The artefact of an entry whose checksum matches, else `None`.
fn read_entry(path: &Path) -> Option<Vec<u8>> {
    let mut data = std::fs::read(path).ok()?;
    if data.len() < 32 {
        return None;
    }
    let artefact = data.split_off(32);
    (Sha256::digest(&artefact).as_slice() == data.as_slice()).then_some(artefact)
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    let path = dir.join(format!(
        ".tmp-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let file = std::fs::File::create(&path)?;
    Ok((path, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrupt_entries_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.cwasm");
        std::fs::write(&path, b"short").unwrap();
        assert!(read_entry(&path).is_none());
        let mut data = Sha256::digest(b"artefact").to_vec();
        data.extend_from_slice(b"artefact");
        std::fs::write(&path, &data).unwrap();
        assert_eq!(read_entry(&path).as_deref(), Some(&b"artefact"[..]));
        data.push(0);
        std::fs::write(&path, &data).unwrap();
        assert!(read_entry(&path).is_none());
    }
}
