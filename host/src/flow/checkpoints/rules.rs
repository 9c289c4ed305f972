//! Checkpoint decisions as pure functions: which checkpoint a committed offset becomes,
//! when it is emitted, and when target groups are synced.

use crate::flow::Routes;
use crate::formats::Checkpoint;
use crate::kafka::Committed;
use std::time::Duration;

/// (group, target topic, partition).
pub type CheckpointKey = (String, String, i32);

/// The key of a checkpoint.
pub fn key(c: &Checkpoint) -> CheckpointKey {
    (c.group.clone(), c.topic.clone(), c.partition)
}

/// Whether `next` is emitted after `last`: the first one, one that moves forward, or one
/// whose upstream group rewound (its committed offset went back).
pub fn should_emit(last: Option<&Checkpoint>, next: &Checkpoint) -> bool {
    match last {
        None => true,
        Some(l) => next.upstream < l.upstream || next.downstream > l.downstream,
    }
}

/// What becomes of a translated checkpoint `next`, given the `last` one of its key and
/// whether that one was `confirmed` by this process (emitted, or derived again from the
/// syncs as they are now). A checkpoint reloaded after a restart is not: it was made from
/// syncs that may no longer hold (the target topic recreated meanwhile, its epoch lost), so
/// any other translation replaces it, even a lower one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Emit `next`.
    Emit,
    /// `last` is confirmed as it is.
    Confirm,
    /// Nothing to do.
    Keep,
}

/// See [`Verdict`].
pub fn verdict(last: Option<&Checkpoint>, confirmed: bool, next: &Checkpoint) -> Verdict {
    match last {
        Some(l) if !confirmed => {
            if l.upstream == next.upstream && l.downstream == next.downstream {
                Verdict::Confirm
            } else {
                Verdict::Emit
            }
        }
        _ if should_emit(last, next) => Verdict::Emit,
        _ => Verdict::Keep,
    }
}

/// The end a checkpoint's target offset may not pass: the target partition's end as the
/// cluster reports it, or past the newest record the syncs describe if that is later (some
/// brokers report an end that lags by up to a batch). `None`: unknown.
pub fn checkpoint_bound(target_end: Option<i64>, newest_synced: Option<i64>) -> Option<i64> {
    match (target_end, newest_synced.map(|d| d + 1)) {
        (Some(e), Some(n)) => Some(e.max(n)),
        (e, n) => e.or(n),
    }
}

/// The checkpoint of `group`'s committed offset `c`, translated to `downstream`, named as
/// the topic's route names it on the target (MM2's `renameTopicPartition`: discovery never
/// mirrors a topic that came from the target, so the route's name is the formatted remote
/// name). `None` for a topic the flow does not mirror.
pub fn checkpoint(
    routes: &Routes,
    group: &str,
    c: Committed,
    downstream: i64,
) -> Option<Checkpoint> {
    let route = routes.get(&c.topic)?;
    Some(Checkpoint {
        group: group.to_string(),
        topic: route.target.clone(),
        partition: c.partition,
        upstream: c.offset,
        downstream,
        metadata: c.metadata,
    })
}

/// Whether the syncs that gave a translation describe the target partition as it is: not
/// when the partition ends (`target_end`) before the oldest target offset the syncs hold
/// (the topic was recreated, and its first new sync was not read yet).
pub fn syncs_match_target(target_end: Option<i64>, oldest_synced: Option<i64>) -> bool {
    target_end
        .zip(oldest_synced)
        .is_none_or(|(end, oldest)| end >= oldest)
}

/// Whether a checkpoint pass that starts `since_sync` after the last group sync's pass
/// (none yet: `None`) syncs the target groups, given `emit` (the checkpoint interval) and
/// `sync` (the group sync interval): on the first pass at least `sync` after the last
/// sync. Passes are `emit` apart give or take the scheduler's jitter, so a tenth of a pass
/// (at most 500 ms) of slack keeps a sync interval equal to the checkpoint interval from
/// syncing on every other pass only, and never syncs more often than `sync`, give or take
/// that jitter.
pub fn sync_due(since_sync: Option<Duration>, emit: Duration, sync: Duration) -> bool {
    let jitter = (emit / 10).min(Duration::from_millis(500));
    since_sync.is_none_or(|since| since + jitter >= sync)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(up: i64, down: i64) -> Checkpoint {
        Checkpoint {
            group: "g".into(),
            topic: "primary.t".into(),
            partition: 0,
            upstream: up,
            downstream: down,
            metadata: String::new(),
        }
    }

    #[test]
    fn groups_are_synced_on_the_pass_their_interval_falls_on() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        assert!(sync_due(None, s(5), s(5)), "the first pass syncs");
        assert!(
            sync_due(Some(ms(4_990)), s(5), s(5)),
            "the next pass, a little early, syncs again: every pass"
        );
        assert!(!sync_due(Some(s(5)), s(5), s(10)), "every other pass");
        assert!(sync_due(Some(ms(9_990)), s(5), s(10)));
        assert!(
            sync_due(Some(s(1)), s(1), ms(500)),
            "a sync interval below the checkpoint interval: every pass"
        );
        assert!(!sync_due(Some(s(1)), s(1), s(60)));
        assert!(sync_due(Some(ms(59_950)), s(1), s(60)));
        assert!(
            !sync_due(Some(s(5)), s(5), s(7)),
            "never more often than asked: 7 s is every other 5 s pass"
        );
        assert!(sync_due(Some(s(10)), s(5), s(7)));
        assert!(!sync_due(Some(s(60)), s(60), s(90)));
        assert!(sync_due(Some(s(120)), s(60), s(90)));
    }

    #[test]
    fn checkpoints_only_move_forward_unless_the_group_rewound() {
        assert!(should_emit(None, &cp(10, 5)));
        assert!(!should_emit(Some(&cp(10, 5)), &cp(10, 5)), "same");
        assert!(should_emit(Some(&cp(10, 5)), &cp(12, 7)), "forward");
        assert!(
            !should_emit(Some(&cp(10, 5)), &cp(12, 5)),
            "upstream moved, downstream did not"
        );
        assert!(
            !should_emit(Some(&cp(10, 5)), &cp(11, 4)),
            "would go backwards"
        );
        assert!(
            should_emit(Some(&cp(10, 5)), &cp(3, 2)),
            "the upstream group rewound"
        );
    }

    #[test]
    fn a_reloaded_checkpoint_is_replaced_by_any_other_translation() {
        let stale = cp(100, 5000);
        assert_eq!(
            verdict(Some(&stale), false, &cp(100, 40)),
            Verdict::Emit,
            "the target topic was recreated: the lower translation replaces it"
        );
        assert_eq!(
            verdict(Some(&stale), false, &cp(100, 5000)),
            Verdict::Confirm
        );
        assert_eq!(
            verdict(Some(&stale), true, &cp(100, 40)),
            Verdict::Keep,
            "confirmed: only forward (or a rewound group)"
        );
        assert_eq!(verdict(Some(&stale), true, &cp(120, 5010)), Verdict::Emit);
        assert_eq!(verdict(None, false, &cp(1, 1)), Verdict::Emit);
    }

    #[test]
    fn the_bound_is_the_later_of_the_end_and_the_newest_synced_record() {
        assert_eq!(
            checkpoint_bound(Some(101), Some(136)),
            Some(137),
            "an end lagging by a batch"
        );
        assert_eq!(checkpoint_bound(Some(30), Some(9)), Some(30));
        assert_eq!(checkpoint_bound(None, Some(9)), Some(10));
        assert_eq!(checkpoint_bound(Some(5), None), Some(5));
        assert_eq!(checkpoint_bound(None, None), None);
    }

    #[test]
    fn checkpoints_are_named_by_the_route() {
        let routes: Routes = [(
            "orders".to_string(),
            crate::flow::Route::new("prod-primary.orders", 3),
        )]
        .into();
        let committed = |topic: &str| Committed {
            topic: topic.into(),
            partition: 2,
            offset: 10,
            metadata: "m".into(),
        };
        let c = checkpoint(&routes, "g", committed("orders"), 7).expect("mirrored");
        assert_eq!(
            (
                c.group.as_str(),
                c.topic.as_str(),
                c.partition,
                c.upstream,
                c.downstream,
                c.metadata.as_str()
            ),
            ("g", "prod-primary.orders", 2, 10, 7, "m")
        );
        assert!(
            checkpoint(&routes, "g", committed("payments"), 7).is_none(),
            "not mirrored"
        );
    }

    #[test]
    fn syncs_of_a_recreated_target_topic_are_not_used() {
        assert!(syncs_match_target(Some(5000), Some(1000)), "the usual case");
        assert!(syncs_match_target(Some(1000), Some(1000)));
        assert!(
            !syncs_match_target(Some(3), Some(1000)),
            "recreated: the end is before every sync"
        );
        assert!(syncs_match_target(None, Some(1000)), "end unknown");
        assert!(syncs_match_target(Some(3), None));
    }
}
