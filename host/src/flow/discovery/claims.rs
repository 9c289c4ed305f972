//! Which target topics the flows of one daemon mirror into. Two flows into one target that
//! write the same target topic (A->C and B->C with the identity policy, or any policy that
//! maps both sources' topics to one name) would interleave two sources' records in one
//! topic and share its offset syncs and checkpoints: every such topic is refused by both
//! flows, as a name collision within one flow refuses every source topic involved.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// The target topics each flow wants, shared by a daemon's flows.
#[derive(Debug, Clone, Default)]
pub struct TargetClaims {
    claims: Arc<Mutex<HashMap<String, (String, BTreeSet<String>)>>>,
}

impl TargetClaims {
    /// Records that `flow` wants `topics` on cluster `target` (replacing what it wanted
    /// before); returns, for each of them another flow also wants, those flows.
    pub fn claim(
        &self,
        flow: &str,
        target: &str,
        topics: BTreeSet<String>,
    ) -> BTreeMap<String, Vec<String>> {
        let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        let mut conflicts: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (other, (cluster, theirs)) in claims.iter() {
            if other == flow || cluster != target {
                continue;
            }
            for t in topics.intersection(theirs) {
                conflicts.entry(t.clone()).or_default().push(other.clone());
            }
        }
        claims.insert(flow.to_string(), (target.to_string(), topics));
        conflicts
    }

    /// `flow` stopped: it wants nothing any more.
    pub fn release(&self, flow: &str) {
        self.claims
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(flow);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn two_flows_into_one_target_topic_both_see_the_conflict() {
        let claims = TargetClaims::default();
        assert!(
            claims
                .claim("A->C", "C", set(&["orders", "a-only"]))
                .is_empty()
        );
        let b = claims.claim("B->C", "C", set(&["orders", "b-only"]));
        assert_eq!(b, [("orders".to_string(), vec!["A->C".to_string()])].into());
        let a = claims.claim("A->C", "C", set(&["orders", "a-only"]));
        assert_eq!(a, [("orders".to_string(), vec!["B->C".to_string()])].into());
        assert!(
            claims.claim("A->D", "D", set(&["orders"])).is_empty(),
            "another target cluster"
        );
        claims.release("B->C");
        assert!(claims.claim("A->C", "C", set(&["orders"])).is_empty());
    }
}
