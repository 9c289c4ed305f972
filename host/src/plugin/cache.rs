//! Compiled components on disk, so a restart does not recompile — without ever running
//! native code that this host did not compile for exactly this plugin.
//!
//! An entry is keyed by the SHA-256 of the engine's compatibility hash (wasmtime version,
//! compiler settings, CPU features) and of the component's bytes, so a changed plugin or
//! engine never reuses a stale artefact. Each entry is authenticated: it carries an
//! HMAC-SHA256, under a secret only this cache's owner can read (`.key`, mode 0600), of its
//! key and its artefact. An entry copied under another plugin's key, edited, or written by
//! anyone without the secret fails the check and is compiled again — it never reaches
//! `Component::deserialize`, which trusts its input. The directory is used only when it is
//! owned by the running user and not writable by group or others (otherwise kmirror warns
//! and compiles without a cache); entries are written to exclusively created temporary
//! files in it and renamed into place.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use wasmtime::Engine;

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

/// `bytes` in lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The secret's file in the cache directory.
const KEY_FILE: &str = ".key";
/// The MAC's length at the start of an entry.
const MAC_LEN: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// Why the cache directory is not used.
#[derive(Debug, thiserror::Error)]
pub enum CacheRefused {
    /// It is not owned by the running user.
    #[error("{dir} is owned by uid {owner}, not by this user (uid {me})")]
    NotOwned {
        /// The directory.
        dir: PathBuf,
        /// Its owner.
        owner: u32,
        /// The running user.
        me: u32,
    },
    /// Others may write into it.
    #[error(
        "{dir} is writable by group or others (mode {mode:o}); use a private directory (chmod 700)"
    )]
    Writable {
        /// The directory.
        dir: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// Its secret is readable or writable by others, or not a plain file.
    #[error("{path} is not a private file (mode {mode:o}); it is ignored")]
    OpenKey {
        /// The file.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// An I/O error.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl ComponentCache {
    /// A cache in `dir` (created, private, on first write).
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

    /// The key of `component`'s entry for `engine`.
    pub fn key(engine: &Engine, component: &[u8]) -> String {
        let mut hasher = ShaHasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        hasher.0.update(b"\0component\0");
        hasher.0.update(component);
        hex(&hasher.0.finalize())
    }

    /// The file of the entry with `key`.
    pub fn entry_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.cwasm"))
    }

    /// The cache's secret, creating the private directory and the secret when missing.
    fn secret(&self, create: bool) -> Result<Option<Vec<u8>>, CacheRefused> {
        if create {
            create_private_dir(&self.dir)?;
        } else if !self.dir.is_dir() {
            return Ok(None);
        }
        check_private_dir(&self.dir)?;
        let path = self.dir.join(KEY_FILE);
        match read_private_file(&path) {
            Ok(secret) if secret.len() == 32 => return Ok(Some(secret)),
            Ok(_) => return Err(CacheRefused::OpenKey { path, mode: 0 }),
            Err(CacheRefused::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if !create {
            return Ok(None);
        }
        let mut secret = vec![0u8; 32];
        getrandom::fill(&mut secret)
            .map_err(|e| CacheRefused::Io(std::io::Error::other(e.to_string())))?;
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)?;
        tmp.write_all(&secret)?;
        tmp.as_file().sync_all()?;
        // Another process may have created it meanwhile: the first one wins.
        match tmp.persist_noclobber(&path) {
            Ok(_) => Ok(Some(secret)),
            Err(_) => Ok(Some(read_private_file(&path)?)),
        }
    }

    fn mac(secret: &[u8], key: &str, artefact: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(secret)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        mac.update(key.as_bytes());
        mac.update(b"\0");
        mac.update(artefact);
        mac
    }

    /// The artefact stored under `key`, if an authentic one exists.
    pub(crate) fn read(&self, key: &str) -> Option<Vec<u8>> {
        let secret = match self.secret(false) {
            Ok(Some(s)) => s,
            Ok(None) => return None,
            Err(e) => {
                warn_refused(&self.dir, &e);
                return None;
            }
        };
        let mut data = std::fs::read(self.entry_path(key)).ok()?;
        if data.len() < MAC_LEN {
            return None;
        }
        let artefact = data.split_off(MAC_LEN);
        match Self::mac(&secret, key, &artefact).verify_slice(&data) {
            Ok(()) => Some(artefact),
            Err(_) => {
                tracing::warn!(cache = %self.dir.display(), entry = %key, "a compiled plugin in the cache failed its authentication; compiling instead");
                None
            }
        }
    }

    /// Stores `artefact` under `key` (best effort: a cache that cannot be written is skipped).
    pub(crate) fn write(&self, key: &str, artefact: &[u8]) {
        if let Err(e) = self.try_write(key, artefact) {
            warn_refused(&self.dir, &e);
        }
    }

    fn try_write(&self, key: &str, artefact: &[u8]) -> Result<(), CacheRefused> {
        let Some(secret) = self.secret(true)? else {
            return Ok(());
        };
        let mac = Self::mac(&secret, key, artefact).finalize().into_bytes();
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)?;
        tmp.write_all(&mac)?;
        tmp.write_all(artefact)?;
        tmp.as_file().sync_all()?;
        tmp.persist(self.entry_path(key)).map_err(|e| e.error)?;
        Ok(())
    }
}

fn warn_refused(dir: &Path, e: &CacheRefused) {
    tracing::warn!(cache = %dir.display(), error = %e, "not using the plugin compile cache; compiling instead");
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

#[cfg(unix)]
fn check_private_dir(dir: &Path) -> Result<(), CacheRefused> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(CacheRefused::NotOwned {
            dir: dir.to_path_buf(),
            owner: meta.uid(),
            me,
        });
    }
    if meta.mode() & 0o022 != 0 || !meta.is_dir() {
        return Err(CacheRefused::Writable {
            dir: dir.to_path_buf(),
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private_dir(_dir: &Path) -> Result<(), CacheRefused> {
    Ok(())
}

/// Reads a file that must be a plain file readable and writable by its owner only.
fn read_private_file(path: &Path) -> Result<Vec<u8>, CacheRefused> {
    let meta = std::fs::symlink_metadata(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if !meta.is_file() || meta.mode() & 0o077 != 0 {
            return Err(CacheRefused::OpenKey {
                path: path.to_path_buf(),
                mode: meta.mode() & 0o7777,
            });
        }
    }
    let mut data = Vec::new();
    std::fs::File::open(path)?.read_to_end(&mut data)?;
    let _ = meta;
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_authenticated_and_bound_to_their_key() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(dir.path().join("c"));
        assert!(cache.read("a").is_none(), "nothing yet");
        cache.write("a", b"artefact of a");
        cache.write("b", b"artefact of b");
        assert_eq!(cache.read("a").as_deref(), Some(&b"artefact of a"[..]));
        // b's entry moved under a's key: refused.
        std::fs::copy(cache.entry_path("b"), cache.entry_path("a")).unwrap();
        assert!(cache.read("a").is_none());
        // Tampered bytes: refused.
        let mut data = std::fs::read(cache.entry_path("b")).unwrap();
        let last = data.len() - 1;
        data[last] ^= 1;
        std::fs::write(cache.entry_path("b"), &data).unwrap();
        assert!(cache.read("b").is_none());
        // Short entries: refused.
        std::fs::write(cache.entry_path("c"), b"short").unwrap();
        assert!(cache.read("c").is_none());
    }

    #[cfg(unix)]
    #[test]
    fn an_open_directory_or_secret_is_not_used() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c");
        let cache = ComponentCache::new(&path);
        cache.write("a", b"x");
        assert!(cache.read("a").is_some());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            cache.secret(false),
            Err(CacheRefused::Writable { .. })
        ));
        assert!(
            cache.read("a").is_none(),
            "a group/other-writable directory is refused"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
        let key = path.join(KEY_FILE);
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(cache.read("a").is_none(), "a readable secret is refused");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}
