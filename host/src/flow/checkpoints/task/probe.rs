//! The checks of target partitions a checkpoint pass makes before translating: their end
//! offsets, and whether their logs still hold the records the offset syncs describe (a
//! topic recreated, or a broker whose end lags).

use super::Checkpointer;
use crate::flow::{OWN_GROUP_PREFIX, Routes};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// Target partitions probed at most per checkpoint pass (the others wait for the next).
const MAX_PROBES_PER_PASS: usize = 64;

impl Checkpointer {
    /// The target partitions' end offsets; `None` (no pass) when they cannot be read.
    pub(super) async fn target_ends(
        &mut self,
        routes: &Routes,
        partitions: &[(String, i32)],
    ) -> Option<HashMap<(String, i32), i64>> {
        let targets: Vec<(String, i32)> = partitions
            .iter()
            .filter_map(|(t, p)| routes.get(t).map(|r| (r.target.clone(), *p)))
            .collect();
        let client = self.client(true, OWN_GROUP_PREFIX)?;
        match self.ctx.target.end_offsets(&client, &targets).await {
            Ok(ends) => Some(ends.into_iter().collect()),
            Err(e) => {
                self.ctx
                    .telemetry
                    .note_error("read target end offsets", e.kind(), &e);
                None
            }
        }
    }

    /// The target partitions whose syncs describe records their log does not hold: it ends
    /// before the newest record the syncs describe — either the broker reports an end that
    /// lags (some report the last batch's base offset + 1) or the topic was recreated and
    /// the syncs are the old topic's, e.g. right after a restart, before a new sync came. A
    /// fetch at that record tells which; answers are kept while the newest sync is the same.
    pub(super) async fn stale_partitions(
        &mut self,
        newest: &HashMap<(String, i32), i64>,
        ends: &HashMap<(String, i32), i64>,
    ) -> HashSet<(String, i32)> {
        // Target partition -> the newest record its syncs describe, where the end is not
        // past it.
        let behind: HashMap<(String, i32), i64> = newest
            .iter()
            .filter(|(target, n)| ends.get(*target).is_some_and(|e| e <= *n))
            .map(|(t, n)| (t.clone(), *n))
            .collect();
        self.probed.retain(|target, _| behind.contains_key(target));
        let suspects: Vec<(String, i32, i64)> = behind
            .iter()
            .filter(|(target, newest)| self.probed.get(*target).is_none_or(|(at, _)| at != *newest))
            .map(|((t, p), n)| (t.clone(), *p, *n))
            .take(MAX_PROBES_PER_PASS)
            .collect();
        if !suspects.is_empty() {
            match self
                .ctx
                .target
                .logs_reach(suspects, Duration::from_secs(2))
                .await
            {
                Ok(answers) => {
                    for (target, reaches) in answers {
                        let (Some(reaches), Some(at)) = (reaches, behind.get(&target)) else {
                            continue;
                        };
                        if !reaches {
                            tracing::info!(flow = %self.ctx.telemetry.flow, topic = %target.0, partition = target.1, newest_synced = at, "the target partition ends before the records its offset syncs describe (recreated?): no checkpoints from them until new syncs come");
                        }
                        self.probed.insert(target, (*at, !reaches));
                    }
                }
                Err(e) => self
                    .ctx
                    .telemetry
                    .note_error("probe target partitions", e.kind(), &e),
            }
        }
        // Stale, or not answered yet (this pass makes no checkpoint from them).
        behind
            .into_iter()
            .filter(|(target, newest)| {
                self.probed
                    .get(target)
                    .is_none_or(|(at, stale)| at != newest || *stale)
            })
            .map(|(target, _)| target)
            .collect()
    }

    /// Checkpoints of target partition `target` are no longer synced to target groups until
    /// derived again (its syncs do not describe it as it is now).
    pub(super) fn unconfirm(&mut self, target: &(String, i32)) {
        self.confirmed
            .retain(|k| !(k.1 == target.0 && k.2 == target.1));
    }
}
