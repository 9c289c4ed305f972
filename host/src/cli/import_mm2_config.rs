//! `kmirror import-mm2-config mm2.properties`: a MirrorMaker 2 dedicated-mode configuration
//! as a kmirror configuration ([`crate::config::mm2_import`]).

use crate::config::mm2_import::{self, Untranslated};
use crate::plugin::cache::CacheChoice;
use clap::Args;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `import-mm2-config`.
#[derive(Debug, Args)]
pub struct ImportConfigArgs {
    /// MM2's properties file (`connect-mirror-maker.properties`).
    properties: PathBuf,
    /// Where to write the kmirror configuration (default: standard output).
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Overwrite `--output` if it exists.
    #[arg(long)]
    force: bool,
    /// The configuration's plugin directory (`[plugins] dir`), relative to it.
    #[arg(long, default_value = "plugins.d")]
    plugins_dir: String,
}

/// Runs `import-mm2-config`: exit 0 when every key was translated (or needs nothing), 1
/// when the configuration was written but keys were not translated (each named, with why),
/// 2 when nothing could be written.
pub fn run(args: &ImportConfigArgs) -> ExitCode {
    let text = match std::fs::read_to_string(&args.properties) {
        Ok(text) => text,
        Err(e) => return super::fail(2, &format!("read {}: {e}", args.properties.display())),
    };
    let props = match mm2_import::parse(&text) {
        Ok(props) => props,
        Err(e) => return super::fail(2, &format!("{}: {e}", args.properties.display())),
    };
    let t = match mm2_import::translate(&props, &args.plugins_dir) {
        Ok(t) => t,
        Err(e) => return super::fail(2, &format!("{}: {e}", args.properties.display())),
    };
    // The result is a configuration kmirror loads, or nothing is written.
    let at = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from("kmirror.toml"));
    if let Err(errors) = crate::config::load_str(&t.toml, &at, &CacheChoice::Disabled) {
        return super::fail(
            2,
            // The text is not shown: it may hold credentials.
            &format!("the translation does not load (please report this):\n{errors}"),
        );
    }
    match &args.output {
        Some(path) => {
            if let Err(e) = write_new(path, &t.toml, args.force) {
                return super::fail(2, &e);
            }
            eprintln!("wrote {}", path.display());
        }
        None => {
            let _ = std::io::stdout().write_all(t.toml.as_bytes());
        }
    }
    for note in &t.notes {
        eprintln!("note: {note}");
    }
    list("needs nothing in kmirror", &t.not_needed);
    list("NOT TRANSLATED", &t.untranslated);
    if t.untranslated.is_empty() {
        eprintln!("every key translated; next: kmirror plan --config <the file>");
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "{} key(s) not translated (listed above, and at the end of the file)",
            t.untranslated.len()
        );
        ExitCode::from(1)
    }
}

fn list(title: &str, keys: &[Untranslated]) {
    if keys.is_empty() {
        return;
    }
    eprintln!("{title}:");
    for u in keys {
        eprintln!("  {}: {}", u.key, u.reason);
    }
}

/// Writes `text` to `path`, refusing an existing file unless `force`; only the owner may
/// read it (it may hold credentials copied from MM2's file).
fn write_new(path: &Path, text: &str, force: bool) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut open = std::fs::OpenOptions::new();
    open.write(true).mode(0o600);
    if force {
        open.create(true).truncate(true);
    } else {
        open.create_new(true);
    }
    let mut file = open.open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => {
            format!("{} exists (--force overwrites it)", path.display())
        }
        _ => format!("write {}: {e}", path.display()),
    })?;
    // An existing file keeps its mode when opened: narrowed before anything is written.
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("restrict {} to its owner: {e}", path.display()))?;
    file.write_all(text.as_bytes())
        .map_err(|e| format!("write {}: {e}", path.display()))
}
