//! Whether a running flow may take new plugin roles (a hot reload of its plugin files, or a
//! config reload that changes its slots), as pure rules over what it mirrors now.
//!
//! A replacement is refused when it would fail on a topic the flow mirrors, give one a name
//! that is not usable, move the flow's internal topics (they are fixed while it runs), or
//! give an already-mirrored topic a different target name — unless the flow allows policy
//! changes, in which case each rename is reported. A topic the new filter excludes is
//! dropped (its target topic stays); that needs no permission.

use super::Routes;
use super::discovery::rules::{Decision, SkipReason, decide_all};
use super::plugins::{FlowNames, InternalTopics, internal_topics_of};
use crate::policy::{FlowRoles, PluginError};

/// An already-mirrored topic the replacement names differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rename {
    /// The source topic.
    pub source: String,
    /// Its target name now.
    pub from: String,
    /// Its target name under the replacement.
    pub to: String,
}

/// What a replacement changes about a flow.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Review {
    /// Topics it renames (only when renames are allowed).
    pub renamed: Vec<Rename>,
    /// Mirrored topics it stops mirroring, and why.
    pub dropped: Vec<(String, &'static str)>,
}

/// Why a replacement is refused.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// It renames mirrored topics and the flow does not allow it.
    #[error(
        "it would rename {} mirrored topic(s): {}; set allow_policy_change = true on the flow to allow it",
        .0.len(), list_renames(.0)
    )]
    Renames(Vec<Rename>),
    /// It moves the flow's internal topics.
    #[error(
        "it would move the flow's internal topics ({from} -> {to}); they are fixed while the flow runs: restart kmirror to apply it"
    )]
    InternalTopics {
        /// Now.
        from: String,
        /// Under the replacement.
        to: String,
    },
    /// It fails on a topic the flow mirrors.
    #[error("it fails on the mirrored topic `{topic}`: {error}")]
    Fails {
        /// The topic.
        topic: String,
        /// The failure.
        error: PluginError,
    },
    /// It gives a mirrored topic a name that cannot be used.
    #[error("it gives the mirrored topic `{topic}` an unusable name: {why}")]
    BadName {
        /// The topic.
        topic: String,
        /// Why.
        why: String,
    },
    /// It fails naming the internal topics.
    #[error("it fails naming the internal topics: {0}")]
    Internal(PluginError),
}

fn list_renames(renames: &[Rename]) -> String {
    let mut shown: Vec<String> = renames
        .iter()
        .take(5)
        .map(|r| format!("{} ({} -> {})", r.source, r.from, r.to))
        .collect();
    if renames.len() > 5 {
        shown.push(format!("and {} more", renames.len() - 5));
    }
    shown.join(", ")
}

fn describe(t: &InternalTopics) -> String {
    format!("{}, {}, {}", t.offset_syncs, t.heartbeats, t.checkpoints)
}

/// Reviews `candidate` replacing `current` for the flow between `names`' clusters that
/// mirrors `mirrored` (no mirrored topic may be named as one of its internal topics).
pub fn review(
    current: &FlowRoles,
    candidate: &FlowRoles,
    names: &FlowNames,
    mirrored: &Routes,
    allow_renames: bool,
) -> Result<Review, Refusal> {
    let now = internal_topics_of(current, names).map_err(Refusal::Internal)?;
    let next = internal_topics_of(candidate, names).map_err(Refusal::Internal)?;
    if now != next {
        return Err(Refusal::InternalTopics {
            from: describe(&now),
            to: describe(&next),
        });
    }
    let reserved = [&now.offset_syncs, &now.heartbeats, &now.checkpoints]
        .into_iter()
        .cloned()
        .collect();
    let topics: Vec<String> = mirrored.keys().cloned().collect();
    let decided = decide_all(
        &topics,
        &*candidate.topic_filter,
        &*candidate.replication_policy,
        &names.source,
        &names.target,
        &reserved,
    );
    if let Some((topic, error)) = decided.failed.into_iter().next() {
        return Err(Refusal::Fails { topic, error });
    }
    let mut review = Review::default();
    for (topic, route) in mirrored {
        match decided.decisions.get(topic) {
            Some(Decision::Mirror(name)) if *name != route.target => review.renamed.push(Rename {
                source: topic.clone(),
                from: route.target.clone(),
                to: name.clone(),
            }),
            Some(Decision::Mirror(_)) | None => {}
            Some(Decision::Skip(SkipReason::InvalidName(why))) => {
                return Err(Refusal::BadName {
                    topic: topic.clone(),
                    why: why.clone(),
                });
            }
            Some(Decision::Skip(SkipReason::Filtered)) => {
                review.dropped.push((topic.clone(), "filtered"))
            }
            Some(Decision::Skip(SkipReason::Internal)) => {
                review.dropped.push((topic.clone(), "internal"))
            }
            Some(Decision::Skip(SkipReason::Cycle)) => {
                review.dropped.push((topic.clone(), "a cycle"))
            }
        }
    }
    if !review.renamed.is_empty() && !allow_renames {
        return Err(Refusal::Renames(review.renamed));
    }
    Ok(review)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::Route;

    fn roles(policy: &str, topics: &str) -> FlowRoles {
        crate::flow::testing::roles(policy, topics)
    }

    fn names() -> FlowNames {
        FlowNames {
            source: "primary".into(),
            target: "backup".into(),
            offset_syncs_alias: "backup".into(),
            reserved: Default::default(),
        }
    }

    fn mirrored() -> Routes {
        [
            ("orders".to_string(), Route::new("primary.orders", 3)),
            ("payments".to_string(), Route::new("primary.payments", 1)),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn a_filter_change_drops_topics_without_permission() {
        let now = roles("default-policy", ".*");
        let next = roles("default-policy", "orders");
        let r = review(&now, &next, &names(), &mirrored(), false).unwrap();
        assert!(r.renamed.is_empty());
        assert_eq!(r.dropped, vec![("payments".to_string(), "filtered")]);
    }

    #[test]
    fn renames_are_refused_unless_allowed() {
        let now = roles("default-policy", ".*");
        let next = roles("identity-policy", ".*");
        let renames = match review(&now, &next, &names(), &mirrored(), false) {
            Err(Refusal::Renames(r)) => r,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            renames[0],
            Rename {
                source: "orders".into(),
                from: "primary.orders".into(),
                to: "orders".into()
            }
        );
        assert_eq!(renames.len(), 2);
        let r = review(&now, &next, &names(), &mirrored(), true).unwrap();
        assert_eq!(r.renamed, renames);
    }

    #[test]
    fn the_same_policy_is_no_change() {
        let now = roles("default-policy", ".*");
        let next = roles("default-policy", ".*");
        let r = review(&now, &next, &names(), &mirrored(), false).unwrap();
        assert_eq!(r, Review::default());
    }
}
