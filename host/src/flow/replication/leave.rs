//! The order in which an instance's replication tasks leave the group at a graceful stop:
//! one at a time, each once the group has re-formed after the previous one left (it is in
//! a newer generation), within a bound. Two members leaving together can strand a group
//! whose coordinator keeps a departed member as the leader of a forming group (Tansu does:
//! `docs/scaling.md`), and a rebalance per leave is what a group needs anyway; meanwhile
//! the remaining tasks keep mirroring what they own, and take no partition the leaver
//! handed over (it would be mirrored with the configuration they stop with: a reload that
//! restarts the flow); such a partition waits, paused, for its next owner.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The leaving order of one instance's tasks of a flow.
#[derive(Debug)]
pub struct LeaveOrder {
    /// (the next task to leave, the group generation the previous one left in, when it
    /// left).
    state: Mutex<(u32, Option<i32>, Option<Instant>)>,
    /// How long a task waits for the re-formed group at most, once it is its turn.
    bound: Duration,
}

impl LeaveOrder {
    /// An order in which no task waits longer than `bound` once it is its turn.
    pub fn new(bound: Duration) -> Self {
        LeaveOrder {
            state: Mutex::new((0, None, None)),
            bound,
        }
    }

    /// Whether task `member`, in group generation `generation`, stopping since `since`,
    /// may leave at `now`: it is its turn and the group has re-formed since the previous
    /// task left — or its turn came `bound` ago, or (should earlier tasks hang) the stop
    /// began a bound per task before it ago.
    pub fn may_leave(
        &self,
        member: u32,
        generation: Option<i32>,
        since: Instant,
        now: Instant,
    ) -> bool {
        if now.saturating_duration_since(since) >= self.bound * (member + 1) {
            return true;
        }
        let (next, previous, left_at) = *self.state.lock().unwrap_or_else(|e| e.into_inner());
        if member < next || member == 0 {
            return true;
        }
        if member != next {
            return false;
        }
        let turn = left_at.map_or(since, |t| t.max(since));
        now.saturating_duration_since(turn) >= self.bound
            || match (previous, generation) {
                (Some(left_in), Some(g)) => g > left_in,
                // The previous task was not in the group (restarting): nothing to wait for.
                (None, _) => true,
                (Some(_), None) => false,
            }
    }

    /// Task `member` left the group at `now`, last in `generation` (`None`: it was not in
    /// one).
    pub fn left(&self, member: u32, generation: Option<i32>, now: Instant) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if member >= state.0 {
            *state = (member + 1, generation, Some(now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn tasks_leave_one_at_a_time_each_after_the_group_reformed() {
        let order = LeaveOrder::new(Duration::from_secs(20));
        let t0 = Instant::now();
        assert!(
            order.may_leave(0, Some(5), t0, t0),
            "the first goes at once"
        );
        assert!(
            !order.may_leave(1, Some(5), t0, t0),
            "not before the first left"
        );
        order.left(0, Some(5), t0 + S);
        assert!(
            !order.may_leave(1, Some(5), t0, t0 + 2 * S),
            "the group has not re-formed yet"
        );
        assert!(!order.may_leave(2, Some(6), t0, t0 + 2 * S), "not its turn");
        assert!(
            order.may_leave(1, Some(6), t0, t0 + 2 * S),
            "a newer generation: its turn"
        );
        order.left(1, Some(6), t0 + 3 * S);
        assert!(order.may_leave(2, Some(7), t0, t0 + 3 * S));
    }

    #[test]
    fn each_turn_is_bounded_and_a_task_outside_the_group_holds_nobody_up() {
        let order = LeaveOrder::new(Duration::from_secs(10));
        let t0 = Instant::now();
        order.left(0, Some(5), t0 + 8 * S);
        assert!(
            !order.may_leave(1, Some(5), t0, t0 + 12 * S),
            "its turn came 4 s ago: it still waits for the re-formed group"
        );
        assert!(
            order.may_leave(1, Some(5), t0, t0 + 18 * S),
            "10 s into its turn"
        );
        assert!(
            !order.may_leave(2, Some(5), t0, t0 + 18 * S),
            "the next still waits its own turn"
        );
        assert!(
            order.may_leave(2, Some(5), t0, t0 + 30 * S),
            "bounded even if the one before never leaves"
        );
        let outside = LeaveOrder::new(Duration::from_secs(10));
        outside.left(0, None, t0);
        assert!(
            outside.may_leave(1, Some(5), t0, t0),
            "the first was not in a group"
        );
        let late = LeaveOrder::new(Duration::from_secs(10));
        late.left(1, Some(3), t0);
        late.left(0, Some(2), t0);
        assert!(late.may_leave(1, Some(3), t0, t0), "already past its turn");
    }
}
