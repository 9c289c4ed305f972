//! The flow's plugin roles behind async, batched calls. A plugin call may block up to its
//! deadline (and a WASI-importing component must not run on a runtime worker), so every
//! call runs on tokio's blocking pool; this facade owns that, and the copying of names it
//! needs. Hot paths make one call per batch of names, not one per name.
//!
//! The roles are swappable while the flow runs (a hot reload): [`FlowPlugins::replace`]
//! installs a new set atomically and bumps the generation, which tells discovery to drop
//! its cached decisions. A call in flight finishes on the set it started with.

use crate::config::OnUnproducible;
use crate::config::{ResolvedFlow, SyncsLocation};
use crate::flow::replication::Chain;
use crate::kafka::{TopicConfigEntry, invalid_topic_name};
use crate::policy::{ChainLink, FlowRoles, PluginError};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use tokio_util::sync::CancellationToken;

/// The names of a flow's internal topics, as its replication policy gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InternalTopics {
    /// `mm2-offset-syncs.<other>.internal` (MM2's default), named after the cluster it does
    /// not live on: the target alias when it is on the source (the default), the source
    /// alias when it is on the target (MM2's `MirrorSourceConfig.offsetSyncsTopic`).
    pub offset_syncs: String,
    /// `heartbeats`.
    pub heartbeats: String,
    /// `<source>.checkpoints.internal`.
    pub checkpoints: String,
}

/// What plugin calls need to know of their flow.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FlowNames {
    /// The source cluster's alias.
    pub source: String,
    /// The target cluster's alias.
    pub target: String,
    /// The alias the offset-syncs topic is named after: the cluster it is not on.
    pub offset_syncs_alias: String,
    /// The flow's internal topics on the target, which no mirrored topic may be named.
    pub reserved: BTreeSet<String>,
}

/// A batch rule over the roles: one call for a whole list of names.
pub type BatchRule<T> = fn(&FlowRoles, &FlowNames, &[String]) -> Result<T, PluginError>;

/// The roles in force and how many times they were replaced.
struct Live {
    /// The roles in force and `on_transform_error` (a config reload changes both at once).
    roles: RwLock<(Arc<FlowRoles>, OnUnproducible)>,
    generation: AtomicU64,
    /// Held by discovery while it publishes a pass and by a reload while it reviews and
    /// installs new roles, so a review always sees what is mirrored.
    publishing: Mutex<()>,
}

/// A flow's plugin roles, called asynchronously. Clones share the roles in force.
#[derive(Clone)]
pub struct FlowPlugins {
    live: Arc<Live>,
    names: Arc<FlowNames>,
    stop: CancellationToken,
}

impl FlowPlugins {
    /// The roles of the flow `source_alias -> target_alias`, its offset syncs on `syncs`.
    pub fn new(
        roles: FlowRoles,
        source_alias: &str,
        target_alias: &str,
        syncs: SyncsLocation,
    ) -> Self {
        let offset_syncs_alias = match syncs {
            SyncsLocation::Source => target_alias,
            SyncsLocation::Target => source_alias,
        };
        FlowPlugins {
            live: Arc::new(Live {
                roles: RwLock::new((Arc::new(roles), OnUnproducible::default())),
                generation: AtomicU64::new(0),
                publishing: Mutex::new(()),
            }),
            names: Arc::new(FlowNames {
                source: source_alias.to_string(),
                target: target_alias.to_string(),
                offset_syncs_alias: offset_syncs_alias.to_string(),
                reserved: BTreeSet::new(),
            }),
            stop: CancellationToken::new(),
        }
    }

    /// The roles of a configured flow.
    pub fn for_flow(flow: &ResolvedFlow) -> Self {
        let plugins = Self::new(
            flow.roles.clone(),
            &flow.source.alias,
            &flow.target.alias,
            flow.settings.offset_syncs_topic_location,
        );
        plugins
            .live
            .roles
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .1 = flow.settings.on_transform_error;
        plugins
    }

    /// The record-transform chain in force and what becomes of a record it fails on.
    pub fn chain(&self) -> Chain {
        let live = self
            .live
            .roles
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        Chain {
            roles: live.0.clone(),
            on_error: live.1,
        }
    }

    /// Replaces the record-transform chain and `on_transform_error` (a config reload that
    /// changes only them): the running tasks apply them from their next batch, without a
    /// restart. The other roles stay as they are (hot-reloaded versions included), and
    /// discovery keeps its decisions (a transform decides no topic).
    pub fn replace_chain(&self, transforms: Vec<ChainLink>, on_error: OnUnproducible) {
        let mut current = self
            .live
            .roles
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let mut next = (*current.0).clone();
        next.record_transforms = transforms;
        *current = (Arc::new(next), on_error);
    }

    /// The same roles, with calls abandoned when `stop` is cancelled (a call that blocks
    /// until its deadline does not hold up a shutdown).
    pub fn until(mut self, stop: CancellationToken) -> Self {
        self.stop = stop;
        self
    }

    /// The same roles, refusing to name a mirrored topic as one of `internal`.
    pub fn reserving(mut self, internal: &InternalTopics) -> Self {
        let mut names = (*self.names).clone();
        names.reserved = [
            &internal.offset_syncs,
            &internal.heartbeats,
            &internal.checkpoints,
        ]
        .into_iter()
        .cloned()
        .collect();
        self.names = Arc::new(names);
        self
    }

    /// The roles in force.
    pub fn roles(&self) -> Arc<FlowRoles> {
        self.live
            .roles
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .clone()
    }

    /// Excludes discovery's publishing of a pass and a reload's review and replacement of
    /// the roles from each other (never held across an await).
    pub fn publishing(&self) -> MutexGuard<'_, ()> {
        self.live
            .publishing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// How many times the roles were replaced; discovery drops its cached decisions when
    /// this changes.
    pub fn generation(&self) -> u64 {
        self.live.generation.load(Ordering::Acquire)
    }

    /// Installs `roles` for every later call (calls in flight finish on the old ones);
    /// returns the new generation.
    pub fn replace(&self, roles: FlowRoles) -> u64 {
        let mut current = self
            .live
            .roles
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        current.0 = Arc::new(roles);
        self.live.generation.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The flow's aliases and reserved names.
    pub fn names(&self) -> &FlowNames {
        &self.names
    }

    /// Runs `f` on the blocking pool, with the roles in force when it is called.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&FlowRoles, &FlowNames) -> Result<T, PluginError> + Send + 'static,
    ) -> Result<T, PluginError> {
        let (roles, names) = (self.roles(), self.names.clone());
        let call = tokio::task::spawn_blocking(move || f(&roles, &names));
        tokio::select! {
            _ = self.stop.cancelled() => Err(PluginError::Cancelled {
                plugin: "(flow)".into(),
                function: "plugin call",
            }),
            done = call => done.unwrap_or_else(|e| {
                Err(PluginError::Call {
                    plugin: "(host)".into(),
                    function: "spawn_blocking",
                    message: e.to_string(),
                })
            }),
        }
    }

    /// The internal topic names, each checked to be a valid topic name.
    pub async fn internal_topics(&self) -> Result<InternalTopics, PluginError> {
        self.blocking(internal_topics_of).await
    }

    /// `rule` applied to `names` in one call off the runtime (e.g. discovery's decisions
    /// for a pass's new topics).
    pub async fn batch<T: Send + 'static>(
        &self,
        names: &[String],
        rule: BatchRule<T>,
    ) -> Result<T, PluginError> {
        let names = names.to_vec();
        self.blocking(move |r, a| rule(r, a, &names)).await
    }

    /// The groups of `groups` the group filter accepts, in order, with one batched call.
    pub async fn accept_groups(&self, groups: Vec<String>) -> Result<Vec<String>, PluginError> {
        self.blocking(move |r, _| {
            let answers = r.group_filter.should_replicate_groups(&groups)?;
            Ok(groups
                .into_iter()
                .zip(answers)
                .filter_map(|(g, ok)| ok.then_some(g))
                .collect())
        })
        .await
    }

    /// The entries the config-property filter copies: every accepted property, and a
    /// source default only where the filter also accepts defaults.
    pub async fn filter_configs(
        &self,
        entries: Vec<TopicConfigEntry>,
    ) -> Result<Vec<(String, String)>, PluginError> {
        self.blocking(move |r, _| {
            let filter = &r.config_property_filter;
            let mut kept = Vec::new();
            for e in entries {
                if filter.should_replicate_config_property(&e.name)?
                    && (!e.is_default || filter.should_replicate_source_default(&e.name)?)
                {
                    kept.push((e.name, e.value));
                }
            }
            Ok(kept)
        })
        .await
    }
}

/// The internal topic names `roles` give the flow `names`, each checked to be a valid
/// topic name.
pub fn internal_topics_of(
    roles: &FlowRoles,
    names: &FlowNames,
) -> Result<InternalTopics, PluginError> {
    let p = &roles.replication_policy;
    let topics = InternalTopics {
        offset_syncs: p.offset_syncs_topic(&names.offset_syncs_alias)?,
        heartbeats: p.heartbeats_topic()?,
        checkpoints: p.checkpoints_topic(&names.source)?,
    };
    for (function, name) in [
        ("offset-syncs-topic", &topics.offset_syncs),
        ("heartbeats-topic", &topics.heartbeats),
        ("checkpoints-topic", &topics.checkpoints),
    ] {
        if let Some(why) = invalid_topic_name(name) {
            return Err(PluginError::Output {
                plugin: "replication policy".into(),
                function,
                message: format!("`{name}`: {why}"),
            });
        }
    }
    Ok(topics)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_replaced_in_place_keeps_the_other_roles_and_discoverys_decisions() {
        let plugins = FlowPlugins::new(
            crate::flow::testing::roles("default-policy", ".*"),
            "A",
            "C",
            SyncsLocation::Source,
        );
        let before = plugins.roles();
        let generation = plugins.generation();
        assert_eq!(plugins.chain().on_error, OnUnproducible::Pause);
        let keep_all = crate::plugin::builtin::record_transform("keep-all", &Default::default())
            .expect("a built-in")
            .expect("configured");
        let link = ChainLink {
            name: "keep-all".into(),
            transform: keep_all,
        };
        plugins.replace_chain(vec![link], OnUnproducible::Skip);
        let chain = plugins.chain();
        assert_eq!(chain.on_error, OnUnproducible::Skip, "the policy in force");
        assert_eq!(chain.roles.record_transforms.len(), 1, "the link added");
        assert!(
            Arc::ptr_eq(&chain.roles.topic_filter, &before.topic_filter),
            "the other roles are the same instances"
        );
        assert_eq!(
            plugins.generation(),
            generation,
            "discovery keeps its decisions"
        );
        plugins.replace_chain(Vec::new(), OnUnproducible::Pause);
        let chain = plugins.chain();
        assert_eq!(chain.on_error, OnUnproducible::Pause);
        assert!(chain.roles.record_transforms.is_empty(), "and removed");
    }

    #[tokio::test]
    async fn the_offset_syncs_topic_is_named_after_the_cluster_it_is_not_on() {
        let roles = || crate::flow::testing::roles("default-policy", ".*");
        let on_source = FlowPlugins::new(roles(), "A", "C", SyncsLocation::Source);
        let on_target = FlowPlugins::new(roles(), "A", "C", SyncsLocation::Target);
        let on_target_b = FlowPlugins::new(roles(), "B", "C", SyncsLocation::Target);
        async fn names(p: &FlowPlugins) -> InternalTopics {
            p.internal_topics().await.unwrap()
        }
        assert_eq!(
            names(&on_source).await.offset_syncs,
            "mm2-offset-syncs.C.internal"
        );
        assert_eq!(
            names(&on_target).await.offset_syncs,
            "mm2-offset-syncs.A.internal",
            "on the target, named after the source (MM2's offsetSyncsTopic)"
        );
        assert_ne!(
            names(&on_target).await.offset_syncs,
            names(&on_target_b).await.offset_syncs,
            "flows A->C and B->C never share a syncs topic"
        );
        assert_eq!(
            names(&on_target).await.checkpoints,
            "A.checkpoints.internal"
        );
    }
}
