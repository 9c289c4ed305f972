//! The ledger of what ACL sync created: a compacted single-partition topic on the target,
//! `kmirror-acls.<source>.internal`, with one record per binding the flow created (key: the
//! binding as JSON; value: when and by which flow) and a tombstone once the flow deleted it.
//!
//! `sync_topic_acls_delete` deletes only bindings found here: a binding an operator (or
//! MirrorMaker 2, or a kmirror before the ledger) made on the target — even one the flow
//! would have made itself — is never deleted. Every creation is recorded, with deletion on
//! or off, so that turning deletion on later knows what was synced. The topic ends in
//! `.internal`, so no flow mirrors it (MM2's rule).

use crate::kafka::acls::AclBinding;
use std::collections::BTreeSet;

/// The ledger topic on the target of a flow from `source`.
pub fn topic(source: &str) -> String {
    format!("kmirror-acls.{source}.internal")
}

/// A binding's key in the ledger.
pub fn key(binding: &AclBinding) -> Vec<u8> {
    serde_json::to_vec(binding).expect("a binding serializes")
}

/// The value recorded with a created binding.
pub fn value(flow: &str, at_ms: i64) -> Vec<u8> {
    serde_json::json!({ "flow": flow, "created_at_ms": at_ms })
        .to_string()
        .into_bytes()
}

/// What the ledger says was synced, from its records in order (a value records a
/// creation, a tombstone a deletion). Keys that are not a binding are skipped and
/// counted: they are reported, never guessed at.
#[derive(Debug, Default)]
pub struct Fold {
    /// The bindings created and not deleted since.
    pub synced: BTreeSet<AclBinding>,
    /// Records whose key is not a binding.
    pub malformed: u64,
}

impl Fold {
    /// Applies one record.
    pub fn apply(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) {
        let Some(binding) = key.and_then(|k| serde_json::from_slice::<AclBinding>(k).ok()) else {
            self.malformed += 1;
            return;
        };
        if value.is_some() {
            self.synced.insert(binding);
        } else {
            self.synced.remove(&binding);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::acls::{AclOperation, AclPermission, PatternType};

    fn read(topic: &str, principal: &str) -> AclBinding {
        AclBinding {
            resource_name: topic.into(),
            pattern: PatternType::Literal,
            principal: principal.into(),
            host: "*".into(),
            operation: AclOperation::Read,
            permission: AclPermission::Allow,
        }
    }

    #[test]
    fn creations_and_tombstones_fold_to_what_is_synced_now() {
        let (a, b) = (
            read("primary.orders", "User:alice"),
            read("primary.orders", "User:bob"),
        );
        let mut f = Fold::default();
        let v = value("primary->backup", 1);
        f.apply(Some(&key(&a)), Some(&v));
        f.apply(Some(&key(&b)), Some(&v));
        f.apply(Some(&key(&a)), None);
        f.apply(Some(b"not a binding"), Some(&v));
        f.apply(None, Some(&v));
        assert_eq!(f.synced, BTreeSet::from([b.clone()]));
        assert_eq!(f.malformed, 2);
        // Created again after its deletion: synced again.
        f.apply(Some(&key(&a)), Some(&v));
        assert_eq!(f.synced, BTreeSet::from([a, b]));
    }

    #[test]
    fn a_key_names_the_whole_binding_and_reads_back() {
        let a = read("primary.orders", "User:alice");
        let text = String::from_utf8(key(&a)).unwrap();
        assert_eq!(
            text,
            r#"{"resource_name":"primary.orders","pattern":"LITERAL","principal":"User:alice","host":"*","operation":"READ","permission":"ALLOW"}"#
        );
        assert_eq!(serde_json::from_str::<AclBinding>(&text).unwrap(), a);
        assert_eq!(topic("primary"), "kmirror-acls.primary.internal");
    }
}
