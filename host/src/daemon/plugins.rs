//! Hot reload of the plugin directory. After each debounced batch of changes, every
//! component file a flow runs is read again; one whose content changed is loaded through
//! the hardened loader (size cap, compile in a child process within `compile_timeout`,
//! authenticated cache), role-checked, run through the conformance suite (`plugin check`)
//! with each slot's configuration, and reviewed against what the flow mirrors
//! ([`crate::flow::reload`]) before it replaces the running version atomically. A file that
//! fails any step is rejected (logged, counted) and the running version keeps serving; a
//! removed file keeps the last loaded version, with a warning.
//!
//! It runs on the blocking pool (a compile takes seconds): the daemon hands it a snapshot
//! of its flows and gets back what was accepted.

use crate::authoring::conformance;
use crate::config::ResolvedFlow;
use crate::flow::Routes;
use crate::flow::plugins::FlowPlugins;
use crate::flow::reload::review;
use crate::flow::telemetry::FlowTelemetry;
use crate::plugin::cache::hex;
use crate::plugin::{Plugin, PluginHost, PluginSource};
use crate::policy::{FlowRoles, PluginError, Role};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A running flow, as a reload sees it.
pub struct Target {
    /// The flow's name.
    pub name: String,
    /// Its configuration (slots and their configs).
    pub flow: Arc<ResolvedFlow>,
    /// Its live roles.
    pub plugins: FlowPlugins,
    /// The content hash of each component file it runs.
    pub hashes: BTreeMap<PathBuf, String>,
    /// Its telemetry (what it mirrors now).
    pub telemetry: Arc<FlowTelemetry>,
}

/// A replacement that took effect.
pub struct Accepted {
    /// The flow.
    pub flow: String,
    /// The component file.
    pub path: PathBuf,
    /// Its content hash.
    pub sha256: String,
}

/// What earlier rescans found, so each bad version or missing file is reported once.
#[derive(Default)]
pub struct Seen {
    rejected: BTreeMap<PathBuf, String>,
    missing: BTreeSet<PathBuf>,
    unused: BTreeMap<PathBuf, String>,
}

fn sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Re-reads every component file the targets run (and the `changed` files no flow uses,
/// to report whether they would load); replaces what changed and passes every check.
pub fn rescan(
    host: &PluginHost,
    targets: &[Target],
    changed: &[PathBuf],
    seen: &mut Seen,
) -> Vec<Accepted> {
    let used: BTreeSet<PathBuf> = targets
        .iter()
        .flat_map(|t| t.hashes.keys().cloned())
        .collect();
    let mut accepted = Vec::new();
    for path in &used {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                if seen.missing.insert(path.clone()) {
                    tracing::warn!(plugin = %path.display(), error = %e, "a plugin file in use is gone or unreadable; its flows keep the last loaded version");
                }
                continue;
            }
        };
        seen.missing.remove(path);
        let sha = sha256(&bytes);
        let stale: Vec<&Target> = targets
            .iter()
            .filter(|t| t.hashes.get(path).is_some_and(|h| *h != sha))
            .collect();
        if stale.is_empty() || seen.rejected.get(path) == Some(&sha) {
            continue;
        }
        let stats = host.registry().entry(&path.display().to_string());
        let candidate = match Plugin::open(host, &PluginSource::File(path.clone())) {
            Ok(c) => c,
            Err(e) => {
                reject(&stats, path, None, &e.to_string());
                seen.rejected.insert(path.clone(), sha);
                continue;
            }
        };
        let Plugin::Component(component) = &candidate else {
            continue;
        };
        let sha = component.sha256().to_string();
        let mut any_rejected = false;
        for target in stale {
            match replace(target, path, &candidate) {
                Ok(()) => {
                    stats.reload_accepted();
                    stats.loaded(&sha, component.roles());
                    accepted.push(Accepted {
                        flow: target.name.clone(),
                        path: path.clone(),
                        sha256: sha.clone(),
                    });
                }
                Err(why) => {
                    reject(&stats, path, Some(&target.name), &why);
                    any_rejected = true;
                }
            }
        }
        if any_rejected {
            seen.rejected.insert(path.clone(), sha);
        } else {
            seen.rejected.remove(path);
        }
    }
    for path in changed.iter().filter(|p| !used.contains(*p)) {
        check_unused(host, path, seen);
    }
    accepted
}

fn reject(stats: &crate::plugin::stats::PluginStats, path: &Path, flow: Option<&str>, why: &str) {
    stats.reload_rejected(why);
    tracing::error!(plugin = %path.display(), flow = flow.unwrap_or("(all)"), reason = %why,
        "plugin reload rejected; the running version keeps serving");
}

/// The roles `target` takes from `path`, each configured from `candidate` as its slot says.
fn configured(
    target: &Target,
    path: &Path,
    candidate: &Plugin,
) -> Result<(FlowRoles, Vec<Role>), String> {
    let slots = &target.flow.slots;
    let mut roles = slots.roles_from(path);
    let links = slots.transforms_from(path);
    if !links.is_empty() {
        roles.push(Role::RecordTransform);
    }
    let exported = candidate.roles();
    if let Some(missing) = roles.iter().find(|r| !exported.contains(r)) {
        let list: Vec<String> = exported.iter().map(Role::to_string).collect();
        return Err(format!(
            "the flow uses it as its {missing}, which it no longer exports (it exports: {})",
            list.join(", ")
        ));
    }
    let checks: Vec<_> = roles
        .iter()
        .filter(|r| **r != Role::RecordTransform)
        .map(|r| (*r, slots.config(*r)))
        .chain(
            links
                .iter()
                .map(|i| (Role::RecordTransform, slots.transforms[*i].1.clone())),
        )
        .collect();
    let report = conformance::check_roles(candidate, &checks).map_err(|e| e.to_string())?;
    if !report.passed() {
        let total = report.cases.len();
        let failed: Vec<String> = report
            .failures()
            .take(3)
            .map(|c| {
                format!(
                    "{} / {}: {}",
                    c.check,
                    c.input,
                    c.outcome.as_ref().err().map_or("", |s| s)
                )
            })
            .collect();
        return Err(format!(
            "it fails the conformance suite (`kmirror plugin check`): {} of {total} cases, e.g. {}",
            report.failures().count(),
            failed.join("; ")
        ));
    }
    let current = target.plugins.roles();
    let mut next = (*current).clone();
    let built = |e: PluginError| e.to_string();
    for role in &roles {
        let config = slots.config(*role);
        match role {
            Role::TopicFilter => {
                next.topic_filter = candidate.topic_filter(&config).map_err(built)?
            }
            Role::GroupFilter => {
                next.group_filter = candidate.group_filter(&config).map_err(built)?
            }
            Role::ReplicationPolicy => {
                next.replication_policy = candidate.replication_policy(&config).map_err(built)?
            }
            Role::ConfigPropertyFilter => {
                next.config_property_filter =
                    candidate.config_property_filter(&config).map_err(built)?
            }
            // A link of the chain: a batch in flight finishes on the old one.
            Role::RecordTransform => {
                for i in &links {
                    let (source, config) = &slots.transforms[*i];
                    if let Some(link) = next.record_transforms.get_mut(*i) {
                        link.transform = candidate.record_transform(config).map_err(built)?;
                        link.name = source.short_name();
                    }
                }
            }
        }
    }
    Ok((next, roles))
}

/// Replaces `target`'s roles from `path` with `candidate`'s, if every check passes.
fn replace(target: &Target, path: &Path, candidate: &Plugin) -> Result<(), String> {
    let (next, roles) = configured(target, path, candidate)?;
    // Reviewed and installed while discovery cannot publish: a pass decided by the old
    // roles is either in `mirrored` or dropped (it sees the new generation).
    let publishing = target.plugins.publishing();
    let mirrored: Routes = target.telemetry.status().mirrored;
    let allow = target.flow.settings.allow_policy_change;
    let current = target.plugins.roles();
    let found = review(&current, &next, target.plugins.names(), &mirrored, allow)
        .map_err(|r| r.to_string())?;
    let generation = target.plugins.replace(next);
    drop(publishing);
    let names: Vec<&str> = roles.iter().map(|r| r.wit_name()).collect();
    tracing::info!(flow = %target.name, plugin = %path.display(), roles = %names.join(", "), generation,
        "plugin reloaded; topics are decided again at the next discovery pass");
    for r in &found.renamed {
        tracing::warn!(flow = %target.name, source = %r.source, from = %r.from, to = %r.to,
            "allow_policy_change: the topic is mirrored under a new name from now on (the old target topic is kept)");
    }
    for (topic, why) in &found.dropped {
        tracing::info!(flow = %target.name, topic = %topic, why, "no longer mirrored after the reload (its target topic is kept)");
    }
    Ok(())
}

/// Reports whether a changed component no flow uses would load and pass the checks.
fn check_unused(host: &PluginHost, path: &Path, seen: &mut Seen) {
    let is_component = path.extension().is_some_and(|e| e == "wasm");
    let Ok(bytes) = std::fs::read(path) else {
        return;
    };
    if !is_component || !path.is_file() {
        return;
    }
    let sha = sha256(&bytes);
    if seen.unused.get(path) == Some(&sha) {
        return;
    }
    seen.unused.insert(path.to_path_buf(), sha);
    let verdict = Plugin::open(host, &PluginSource::File(path.to_path_buf()))
        .map_err(|e| e.to_string())
        .and_then(|p| {
            let report = conformance::check(&p, &Default::default()).map_err(|e| e.to_string())?;
            let roles: Vec<String> = p.roles().iter().map(Role::to_string).collect();
            if report.passed() {
                Ok(roles.join(", "))
            } else {
                Err(format!(
                    "it fails {} conformance case(s) with an empty configuration",
                    report.failures().count()
                ))
            }
        });
    match verdict {
        Ok(roles) => tracing::info!(plugin = %path.display(), roles = %roles,
            "a new plugin file loads and passes the checks; no flow uses it yet"),
        Err(why) => tracing::warn!(plugin = %path.display(), reason = %why,
            "a new plugin file no flow uses would be rejected"),
    }
}
