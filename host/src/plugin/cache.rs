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
//! and compiles without a cache); it is created, 0700, when missing (only the directory
//! itself is checked, not its parents). The directory, the secret and every entry are
//! opened without following a symbolic link and checked as opened (`fstat`), so a path
//! swapped after a check cannot slip in another file: each must be owned by the running
//! user, the secret readable by it alone and an entry writable by it alone. Entries are
//! written to exclusively created temporary files in it and renamed into place.

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
    /// the configuration file's directory), reading also `$KMIRROR_PRECOMPILED_DIR`.
    pub fn resolve(&self, configured: Option<PathBuf>) -> Option<ComponentCache> {
        match self {
            CacheChoice::Disabled => None,
            CacheChoice::Dir(dir) => Some(ComponentCache::new(dir.clone())),
            CacheChoice::FromConfig => configured
                .map(ComponentCache::new)
                .or_else(ComponentCache::default_location),
        }
        .map(|c| c.with_precompiled(ComponentCache::precompiled_from_env()))
    }
}

/// A directory of compiled components, and optionally a read-only one consulted on a miss
/// (compiled into a deployment image with `kmirror plugin compile`).
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: PathBuf,
    precompiled: Option<PathBuf>,
}

/// The environment variable naming a read-only directory of precompiled components.
pub const PRECOMPILED_ENV: &str = "KMIRROR_PRECOMPILED_DIR";

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
/// The secret's length.
const SECRET_LEN: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// Why the cache directory, its secret or one of its entries is not used.
#[derive(Debug, thiserror::Error)]
pub enum CacheRefused {
    /// The directory, the secret or an entry is not owned by the running user.
    #[error("{path} is owned by uid {owner}, not by this user (uid {me}); it is ignored")]
    NotOwned {
        /// The directory or file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The running user.
        me: u32,
    },
    /// Others may write into the directory.
    #[error(
        "{dir} is writable by group or others (mode {mode:o}); use a private directory (chmod 700)"
    )]
    Writable {
        /// The directory.
        dir: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// The secret is readable or writable by others, an entry is writable by others, or
    /// either is not a plain file.
    #[error("{path} is not a private plain file (mode {mode:o}); it is ignored")]
    NotPrivate {
        /// The file.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// The directory, the secret or an entry is a symbolic link: never followed.
    #[error("{path} is a symbolic link; it is ignored")]
    Symlink {
        /// The link.
        path: PathBuf,
    },
    /// The secret does not have the length this cache writes.
    #[error("{path} is not a cache secret ({len} bytes, not {SECRET_LEN}); it is ignored")]
    BadKey {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: usize,
    },
    /// An I/O error.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl CacheRefused {
    fn is_not_found(&self) -> bool {
        matches!(self, CacheRefused::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

impl ComponentCache {
    /// A cache in `dir` (created, private, on first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ComponentCache {
            dir: dir.into(),
            precompiled: None,
        }
    }

    /// The same cache, also reading (never writing) the entries of the cache directory
    /// `precompiled` — under that directory's own secret, with the same ownership checks.
    pub fn with_precompiled(mut self, precompiled: Option<PathBuf>) -> Self {
        self.precompiled = precompiled.filter(|p| *p != self.dir);
        self
    }

    /// `$KMIRROR_PRECOMPILED_DIR`, if set.
    pub fn precompiled_from_env() -> Option<PathBuf> {
        std::env::var_os(PRECOMPILED_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }

    /// The read-only directory of precompiled components, if any.
    pub fn precompiled(&self) -> Option<&Path> {
        self.precompiled.as_deref()
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
        }
        match open_private(&self.dir, Private::Dir) {
            Ok(_) => {}
            Err(e) if !create && e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        }
        let path = self.dir.join(KEY_FILE);
        if let Some(secret) = read_key(&path)? {
            return Ok(Some(secret));
        }
        if !create {
            return Ok(None);
        }
        let mut secret = vec![0u8; SECRET_LEN];
        getrandom::fill(&mut secret)
            .map_err(|e| CacheRefused::Io(std::io::Error::other(e.to_string())))?;
        let mut tmp = private_temp(&self.dir)?;
        tmp.write_all(&secret)?;
        tmp.as_file().sync_all()?;
        // Another process may have created it meanwhile: the first one wins.
        match tmp.persist_noclobber(&path) {
            Ok(_) => Ok(Some(secret)),
            Err(e) => match read_key(&path)? {
                Some(theirs) => Ok(Some(theirs)),
                None => Err(e.error.into()),
            },
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

    /// The artefact stored under `key`, if an authentic one exists here or in the
    /// precompiled directory.
    pub(crate) fn read(&self, key: &str) -> Option<Vec<u8>> {
        self.read_own(key).or_else(|| {
            let precompiled = ComponentCache::new(self.precompiled.as_ref()?);
            precompiled.read_own(key)
        })
    }

    fn read_own(&self, key: &str) -> Option<Vec<u8>> {
        let secret = match self.secret(false) {
            Ok(Some(s)) => s,
            Ok(None) => return None,
            Err(e) => {
                warn_refused(&self.dir, &e);
                return None;
            }
        };
        let mut data = match read_private(&self.entry_path(key), Private::Entry) {
            Ok(data) => data,
            Err(e) if e.is_not_found() => return None,
            Err(e) => {
                tracing::warn!(cache = %self.dir.display(), entry = %key, error = %e, "a compiled plugin in the cache is refused; compiling instead");
                return None;
            }
        };
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
        let mut tmp = private_temp(&self.dir)?;
        tmp.write_all(&mac)?;
        tmp.write_all(artefact)?;
        tmp.as_file().sync_all()?;
        // A rename replaces whatever has the entry's name (a symbolic link included),
        // never a file it points to.
        tmp.persist(self.entry_path(key)).map_err(|e| e.error)?;
        Ok(())
    }
}

fn warn_refused(dir: &Path, e: &CacheRefused) {
    tracing::warn!(cache = %dir.display(), error = %e, "not using the plugin compile cache; compiling instead");
}

/// Creates `dir` and its missing parents, private (0700) and so owned by the running user;
/// only `dir` itself is checked when used, its parents may be anyone's.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// A new file in `dir` under a random name, created exclusively (never through an
/// existing file or symbolic link) and private (0600), to be renamed into place.
fn private_temp(dir: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    tempfile::Builder::new().make_in(dir, |path| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
        }
        options.open(path)
    })
}

/// What an opened part of the cache must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Private {
    /// The directory: owned by the running user, not writable by group or others.
    Dir,
    /// The secret: a plain file owned by the running user, no access for group or others.
    Key,
    /// An entry: a plain file owned by the running user, not writable by group or others.
    Entry,
}

/// Opens `path` for reading without following a symbolic link at its end (nor blocking on
/// a FIFO), then checks the opened file's owner, type and mode (`fstat`): what is checked
/// is what is read, whatever the path names by then.
fn open_private(path: &Path, kind: Private) -> Result<std::fs::File, CacheRefused> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let directory = if kind == Private::Dir {
            libc::O_DIRECTORY
        } else {
            0
        };
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | directory);
    }
    let file = options.open(path).map_err(|e| {
        // Only to name the refusal: the open itself did not follow the link (ELOOP, or
        // ENOTDIR for a directory).
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            CacheRefused::Symlink {
                path: path.to_path_buf(),
            }
        } else {
            CacheRefused::Io(e)
        }
    })?;
    check_private(path, &file.metadata()?, kind)?;
    Ok(file)
}

#[cfg(unix)]
fn check_private(path: &Path, meta: &std::fs::Metadata, kind: Private) -> Result<(), CacheRefused> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(CacheRefused::NotOwned {
            path: path.to_path_buf(),
            owner: meta.uid(),
            me,
        });
    }
    let mode = meta.mode();
    let private = match kind {
        Private::Dir => meta.is_dir() && mode & 0o022 == 0,
        Private::Key => meta.is_file() && mode & 0o077 == 0,
        Private::Entry => meta.is_file() && mode & 0o022 == 0,
    };
    match (private, kind) {
        (true, _) => Ok(()),
        (false, Private::Dir) => Err(CacheRefused::Writable {
            dir: path.to_path_buf(),
            mode: mode & 0o7777,
        }),
        (false, _) => Err(CacheRefused::NotPrivate {
            path: path.to_path_buf(),
            mode: mode & 0o7777,
        }),
    }
}

#[cfg(not(unix))]
fn check_private(_: &Path, _: &std::fs::Metadata, _: Private) -> Result<(), CacheRefused> {
    Ok(())
}

/// The content of the private file at `path`.
fn read_private(path: &Path, kind: Private) -> Result<Vec<u8>, CacheRefused> {
    let mut data = Vec::new();
    open_private(path, kind)?.read_to_end(&mut data)?;
    Ok(data)
}

/// The secret at `path`; `None` if there is none yet.
fn read_key(path: &Path) -> Result<Option<Vec<u8>>, CacheRefused> {
    match read_private(path, Private::Key) {
        Ok(secret) if secret.len() == SECRET_LEN => Ok(Some(secret)),
        Ok(secret) => Err(CacheRefused::BadKey {
            path: path.to_path_buf(),
            len: secret.len(),
        }),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
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

    #[test]
    fn a_precompiled_directory_is_read_on_a_miss_and_never_written() {
        let dir = tempfile::tempdir().unwrap();
        let image = ComponentCache::new(dir.path().join("image"));
        image.write("a", b"artefact of a");
        let cache = ComponentCache::new(dir.path().join("run"))
            .with_precompiled(Some(dir.path().join("image")));
        assert_eq!(cache.read("a").as_deref(), Some(&b"artefact of a"[..]));
        cache.write("b", b"artefact of b");
        assert!(
            image.read("b").is_none(),
            "written to the cache, not the image"
        );
        assert_eq!(cache.read("b").as_deref(), Some(&b"artefact of b"[..]));
        // An entry of the image under the running cache's name is not authentic there:
        // each directory's entries are checked with its own secret.
        std::fs::copy(image.entry_path("a"), cache.entry_path("c")).unwrap();
        assert!(
            ComponentCache::new(dir.path().join("run"))
                .read("c")
                .is_none()
        );
        // Its own entry wins over the image's.
        cache.write("a", b"recompiled a");
        assert_eq!(cache.read("a").as_deref(), Some(&b"recompiled a"[..]));
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
        assert!(
            matches!(
                cache.secret(false),
                Err(CacheRefused::NotPrivate { mode: 0o644, .. })
            ),
            "{:?}",
            cache.secret(false)
        );
        assert!(cache.read("a").is_none(), "a readable secret is refused");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[cfg(unix)]
    #[test]
    fn symbolic_links_are_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c");
        let cache = ComponentCache::new(&path);
        cache.write("a", b"artefact of a");
        cache.write("b", b"artefact of b");
        assert!(cache.read("a").is_some());

        // An authentic entry, but reached through a link: refused, then replaced.
        let moved = dir.path().join("a.cwasm");
        std::fs::rename(cache.entry_path("a"), &moved).unwrap();
        std::os::unix::fs::symlink(&moved, cache.entry_path("a")).unwrap();
        assert!(cache.read("a").is_none(), "a linked entry is refused");
        cache.write("a", b"artefact of a");
        assert!(!cache.entry_path("a").is_symlink(), "the link was replaced");
        assert_eq!(cache.read("a").as_deref(), Some(&b"artefact of a"[..]));

        // The authentic secret, but reached through a link: refused.
        let key = path.join(KEY_FILE);
        let moved = dir.path().join("key");
        std::fs::rename(&key, &moved).unwrap();
        std::os::unix::fs::symlink(&moved, &key).unwrap();
        assert!(
            matches!(cache.secret(false), Err(CacheRefused::Symlink { .. })),
            "{:?}",
            cache.secret(false)
        );
        assert!(cache.read("b").is_none(), "a linked secret is refused");
        std::fs::remove_file(&key).unwrap();
        std::fs::rename(&moved, &key).unwrap();
        assert!(cache.read("b").is_some());

        // The directory itself, reached through a link: refused.
        let linked = ComponentCache::new(dir.path().join("link"));
        std::os::unix::fs::symlink(&path, linked.dir()).unwrap();
        assert!(
            matches!(linked.secret(false), Err(CacheRefused::Symlink { .. })),
            "{:?}",
            linked.secret(false)
        );
        assert!(linked.read("b").is_none());
    }

    #[cfg(unix)]
    #[test]
    fn a_writable_entry_is_refused_and_replaced() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(dir.path().join("c"));
        cache.write("a", b"artefact of a");
        let entry = cache.entry_path("a");
        std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(
            cache.read("a").is_none(),
            "an entry others may write is refused"
        );
        cache.write("a", b"artefact of a");
        let mode = std::fs::metadata(&entry).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(cache.read("a").is_some());
    }

    #[cfg(unix)]
    #[test]
    fn files_of_another_user_are_refused() {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: only root can give a file to another user");
            return;
        }
        let other = 12345;
        let dir = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(dir.path().join("c"));
        cache.write("a", b"artefact of a");
        let key = cache.dir().join(KEY_FILE);
        std::os::unix::fs::chown(&key, Some(other), None).unwrap();
        assert!(
            matches!(
                cache.secret(false),
                Err(CacheRefused::NotOwned {
                    owner: 12345,
                    me: 0,
                    ..
                })
            ),
            "{:?}",
            cache.secret(false)
        );
        assert!(
            cache.read("a").is_none(),
            "another user's secret is refused"
        );
        std::os::unix::fs::chown(&key, Some(0), None).unwrap();
        assert!(cache.read("a").is_some());

        std::os::unix::fs::chown(cache.entry_path("a"), Some(other), None).unwrap();
        assert!(cache.read("a").is_none(), "another user's entry is refused");
        cache.write("a", b"artefact of a");
        assert!(cache.read("a").is_some(), "and replaced by this user's");

        std::os::unix::fs::chown(cache.dir(), Some(other), None).unwrap();
        assert!(
            matches!(cache.secret(false), Err(CacheRefused::NotOwned { .. })),
            "another user's directory is refused"
        );
    }
}
