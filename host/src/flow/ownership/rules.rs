//! Which mirrored partitions have no owner, as a pure state machine over what the
//! instances report (stamped with the time the leader received them, so clocks need not
//! agree) and what the group coordinator says it assigned. A partition without an owner
//! for longer than two session timeouts plus the members' metadata refresh (a grown
//! topic's new partitions are assigned only once the members see them) is stuck: the
//! leader reports it and makes the group rebalance, backing off (doubling up to ten
//! minutes) while it stays stuck.

use crate::flow::Routes;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A topic partition.
pub type Tp = (String, i32);

/// What one instance says it owns, and when it said so.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Report {
    /// The instance (unique per process start).
    pub instance: String,
    /// Its host, for messages.
    #[serde(default)]
    pub host: String,
    /// Topic -> the partitions its replication tasks own.
    pub owned: BTreeMap<String, Vec<i32>>,
    /// When it was made (ms since the epoch).
    pub at_ms: i64,
    /// Whether the instance led the flow when it reported.
    #[serde(default)]
    pub leader: bool,
}

/// The leader's view of the group.
#[derive(Debug, Default)]
pub struct Ownership {
    reports: HashMap<String, Report>,
    /// Partitions without an owner, since when (ms).
    since: BTreeMap<Tp, i64>,
    /// When the group was last made to rebalance, and the wait before the next time.
    healed: Option<(i64, i64)>,
}

/// The leader's conclusions at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Mirrored partitions nobody owns now.
    pub unowned: Vec<Tp>,
    /// Those unowned for longer than the stuck threshold.
    pub stuck: Vec<Tp>,
    /// Whether to ask the members to rejoin now.
    pub rejoin: bool,
}

/// The limits of the judgement, all in ms.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A report older than this is ignored (its instance is gone or cut off).
    pub fresh_for: i64,
    /// A partition unowned longer than this is stuck.
    pub stuck_after: i64,
    /// The first wait between two rebalances for stuck partitions (doubling after each,
    /// up to [`MAX_REJOIN_EVERY_MS`]).
    pub rejoin_every: i64,
}

/// The longest wait between two rebalances for partitions that stay stuck.
pub const MAX_REJOIN_EVERY_MS: i64 = 10 * 60 * 1000;

/// How long a replication task may take to see a grown topic's new partitions (its
/// `topic.metadata.refresh.interval.ms`).
pub const MEMBER_METADATA_REFRESH_MS: i64 = 30_000;

impl Limits {
    /// The limits for a group with `session_timeout_ms`, whose instances report every
    /// `report_every_ms`: stuck after two session timeouts and the members' metadata
    /// refresh, reports fresh for three periods, a rebalance at first every two session
    /// timeouts.
    pub fn for_session(session_timeout_ms: i64, report_every_ms: i64) -> Limits {
        Limits {
            fresh_for: 3 * report_every_ms,
            stuck_after: 2 * session_timeout_ms + MEMBER_METADATA_REFRESH_MS,
            rejoin_every: 2 * session_timeout_ms,
        }
    }
}

impl Ownership {
    /// Takes an instance's report (a newer one replaces the older).
    pub fn report(&mut self, report: Report) {
        let newer = self
            .reports
            .get(&report.instance)
            .is_none_or(|r| r.at_ms <= report.at_ms);
        if newer {
            self.reports.insert(report.instance.clone(), report);
        }
    }

    /// The instances with a report fresh at `now_ms`: (instance, host, partitions owned,
    /// leading, ms since the report was made), by name.
    pub fn instances(
        &self,
        now_ms: i64,
        limits: Limits,
    ) -> Vec<(String, String, usize, bool, i64)> {
        let mut out: Vec<_> = self
            .reports
            .values()
            .filter(|r| now_ms - r.at_ms <= limits.fresh_for)
            .map(|r| {
                let owned = r.owned.values().map(Vec::len).sum();
                (
                    r.instance.clone(),
                    r.host.clone(),
                    owned,
                    r.leader,
                    now_ms - r.at_ms,
                )
            })
            .collect();
        out.sort();
        out
    }

    /// Forgets `instance`'s report (it stopped gracefully).
    pub fn forget(&mut self, instance: &str) {
        self.reports.remove(instance);
    }

    /// The partitions of `mirrored` nobody owns at `now_ms`, as far as the fresh reports
    /// and the coordinator's own `assigned` partitions tell.
    pub fn judge(
        &mut self,
        now_ms: i64,
        mirrored: &Routes,
        assigned: &BTreeSet<Tp>,
        limits: Limits,
    ) -> Verdict {
        self.reports
            .retain(|_, r| now_ms - r.at_ms <= limits.fresh_for.max(1) * 10);
        let mut owned: BTreeSet<Tp> = assigned.clone();
        for r in self.reports.values() {
            if now_ms - r.at_ms > limits.fresh_for {
                continue;
            }
            for (t, ps) in &r.owned {
                owned.extend(ps.iter().map(|p| (t.clone(), *p)));
            }
        }
        let wanted: BTreeSet<Tp> = mirrored
            .iter()
            .flat_map(|(t, r)| (0..r.partitions).map(move |p| (t.clone(), p)))
            .collect();
        self.since
            .retain(|tp, _| wanted.contains(tp) && !owned.contains(tp));
        let mut verdict = Verdict::default();
        for tp in wanted.difference(&owned) {
            let since = *self.since.entry(tp.clone()).or_insert(now_ms);
            verdict.unowned.push(tp.clone());
            if now_ms - since > limits.stuck_after {
                verdict.stuck.push(tp.clone());
            }
        }
        if verdict.stuck.is_empty() {
            self.healed = None;
        } else {
            match self.healed {
                Some((at, wait)) if now_ms - at < wait => {}
                Some((_, wait)) => {
                    verdict.rejoin = true;
                    self.healed = Some((now_ms, (wait * 2).min(MAX_REJOIN_EVERY_MS)));
                }
                None => {
                    verdict.rejoin = true;
                    self.healed = Some((now_ms, limits.rejoin_every));
                }
            }
        }
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::Route;

    fn routes(partitions: i32) -> Routes {
        [(
            "orders".to_string(),
            Route::new("primary.orders", partitions),
        )]
        .into()
    }

    fn report(instance: &str, partitions: &[i32], at_ms: i64) -> Report {
        Report {
            instance: instance.into(),
            host: "h".into(),
            owned: [("orders".to_string(), partitions.to_vec())].into(),
            at_ms,
            leader: false,
        }
    }

    const LIMITS: Limits = Limits {
        fresh_for: 15_000,
        stuck_after: 20_000,
        rejoin_every: 20_000,
    };

    #[test]
    fn a_partition_nobody_reports_is_stuck_after_two_session_timeouts() {
        let mut o = Ownership::default();
        o.report(report("a", &[0, 1], 0));
        let v = o.judge(1_000, &routes(3), &BTreeSet::new(), LIMITS);
        assert_eq!(v.unowned, vec![("orders".to_string(), 2)]);
        assert!(
            v.stuck.is_empty() && !v.rejoin,
            "a rebalance may be under way"
        );
        o.report(report("a", &[0, 1], 15_000));
        let v = o.judge(21_500, &routes(3), &BTreeSet::new(), LIMITS);
        assert_eq!(v.stuck, vec![("orders".to_string(), 2)]);
        assert!(v.rejoin, "the group is made to rebalance");
        o.report(report("a", &[0, 1], 30_000));
        let v = o.judge(31_000, &routes(3), &BTreeSet::new(), LIMITS);
        assert!(!v.rejoin, "not again before the rejoin interval");
        assert!(o.judge(42_000, &routes(3), &BTreeSet::new(), LIMITS).rejoin);
        o.report(report("a", &[0, 1], 50_000));
        assert!(
            !o.judge(62_000, &routes(3), &BTreeSet::new(), LIMITS).rejoin,
            "the wait doubled"
        );
        o.report(report("a", &[0, 1], 75_000));
        assert!(
            o.judge(82_500, &routes(3), &BTreeSet::new(), LIMITS).rejoin,
            "after 40 s"
        );
        // Owned again: nothing to report.
        o.report(report("b", &[2], 43_000));
        assert_eq!(
            o.judge(43_500, &routes(3), &BTreeSet::new(), LIMITS),
            Verdict::default()
        );
    }

    #[test]
    fn stale_reports_and_the_coordinators_assignment() {
        let mut o = Ownership::default();
        o.report(report("dead", &[0, 1, 2], 0));
        assert!(
            o.judge(10_000, &routes(3), &BTreeSet::new(), LIMITS)
                .unowned
                .is_empty()
        );
        let v = o.judge(16_000, &routes(3), &BTreeSet::new(), LIMITS);
        assert_eq!(v.unowned.len(), 3, "its report is no longer fresh");
        let assigned: BTreeSet<Tp> = [("orders".to_string(), 1)].into();
        let v = o.judge(17_000, &routes(3), &assigned, LIMITS);
        assert_eq!(
            v.unowned.len(),
            2,
            "the coordinator says partition 1 is assigned"
        );
        // An older report never replaces a newer one.
        o.report(report("x", &[0, 1, 2], 20_000));
        o.report(report("x", &[], 19_000));
        assert!(
            o.judge(20_500, &routes(3), &BTreeSet::new(), LIMITS)
                .unowned
                .is_empty()
        );
    }

    #[test]
    fn a_partition_no_longer_mirrored_is_forgotten() {
        let mut o = Ownership::default();
        let v = o.judge(0, &routes(2), &BTreeSet::new(), LIMITS);
        assert_eq!(v.unowned.len(), 2);
        assert!(
            o.judge(30_000, &Routes::new(), &BTreeSet::new(), LIMITS)
                .unowned
                .is_empty()
        );
        let v = o.judge(31_000, &routes(2), &BTreeSet::new(), LIMITS);
        assert!(v.stuck.is_empty(), "its clock started again");
    }
}
