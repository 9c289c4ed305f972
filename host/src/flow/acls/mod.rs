//! Topic ACL sync (MM2's `MirrorSourceConnector.syncTopicAcls`, `sync.topic.acls.*`): a
//! leader-only duty that, at once when the instance becomes the leader and then every
//! `sync_topic_acls_interval`, lists the topic ACL bindings of both clusters, maps the
//! source's through MM2's rules and creates on the target what it lacks.
//!
//! MM2's rules ([`rules`]): a source binding is synced when its pattern is LITERAL (MM2
//! never syncs PREFIXED bindings), it is not ALLOW WRITE (only the mirror writes to a
//! mirrored topic), and its topic is one the flow mirrors (the flow's decision rules, as
//! discovery uses them: topic filter, heartbeats, internal topics, cycles — MM2's
//! `shouldReplicateTopic`). It is renamed through the replication policy; ALLOW ALL becomes
//! ALLOW READ; principal, host, DENY bindings and every other operation are kept. The
//! wildcard `*` is not synced (`primary.*` names no topic; with the identity policy it would
//! grant every target topic).
//!
//! kmirror compares with the target's bindings and creates only what is missing (MM2 sends
//! every binding again each time). Nothing is ever deleted unless `sync_topic_acls_delete`
//! is on. Then a target binding counts as **previously synced** when the rules could have
//! produced it for a topic the flow mirrors now — a LITERAL binding on the target name of a
//! mirrored topic (as discovery routes it and the plugins name it this pass), ALLOW, with
//! an operation other than WRITE and ALL — and it is deleted when no current source binding
//! maps to it. DENY bindings, PREFIXED bindings and bindings on other topics are never
//! deleted; neither is anything on a topic a plugin call failed for.
//!
//! librdkafka aborts the process on an ACL answer it cannot parse (see
//! [`crate::kafka::acls`]), which is what Tansu 0.6.0 gives to CreateAcls. So CreateAcls
//! and DeleteAcls are sent only with something to create or delete, and a target whose
//! DescribeAcls (or CreateAcls) says it does not serve ACLs — SECURITY_DISABLED, no such
//! API — turns the duty off for the rest of the run with one warning, as if
//! `sync_topic_acls_enabled` were false. A broker like Tansu lists no ACLs on the source,
//! so there is never anything to create and CreateAcls is never reached. (A source *with*
//! ACLs mirrored into such a broker would reach it: set `sync_topic_acls_enabled = false`
//! for that flow.) A source that does not serve ACLs has nothing to sync: said once, asked
//! again next pass (MM2's behaviour).
//!
//! - [`rules`]: the filtering, renaming and the plan, as pure functions.
//! - [`task`]: the loop; [`clusters`]: what it needs of the clusters, as a trait.

pub mod clusters;
pub mod ledger;
pub mod rules;
pub mod task;

#[cfg(test)]
mod tests {
    //! The three keys, as a flow's validated settings hand them to the duty.
    use crate::config::load_str;
    use crate::plugin::cache::CacheChoice;
    use std::path::Path;
    use std::time::Duration;

    fn flow(keys: &str) -> Result<crate::config::FlowSettings, String> {
        let text = format!(
            "[clusters.primary]\nbootstrap_servers = \"127.0.0.1:1\"\n\
             [clusters.backup]\nbootstrap_servers = \"127.0.0.1:2\"\n\
             [[flows]]\nsource = \"primary\"\ntarget = \"backup\"\n{keys}\n"
        );
        load_str(
            &text,
            Path::new("/tmp/kmirror.toml"),
            &CacheChoice::Disabled,
        )
        .map(|c| c.flows[0].settings.clone())
        .map_err(|e| e.to_string())
    }

    #[test]
    fn acl_sync_defaults_to_mm2s_and_deletion_needs_it_on() {
        let on = flow("")
            .unwrap()
            .sync_topic_acls
            .expect("on by default, as MM2");
        assert_eq!(on.interval, Duration::from_secs(600), "MM2's 10 minutes");
        assert!(!on.delete, "MM2 never deletes");
        let set = flow("sync_topic_acls_interval = \"30s\"\nsync_topic_acls_delete = true")
            .unwrap()
            .sync_topic_acls
            .unwrap();
        assert_eq!((set.interval, set.delete), (Duration::from_secs(30), true));
        assert_eq!(
            flow("sync_topic_acls_enabled = false")
                .unwrap()
                .sync_topic_acls,
            None
        );
        let e = flow("sync_topic_acls_enabled = false\nsync_topic_acls_delete = true").unwrap_err();
        assert!(
            e.contains("sync_topic_acls_delete") && e.contains("sync_topic_acls_enabled"),
            "{e}"
        );
        let e = flow("sync_topic_acls_interval = \"0s\"").unwrap_err();
        assert!(e.contains("sync_topic_acls_interval"), "{e}");
        assert!(flow("sync_topic_acls_interval = \"0s\"\nsync_topic_acls_enabled = false").is_ok());
    }
}
