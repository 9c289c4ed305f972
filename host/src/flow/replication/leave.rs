//! The order in which an instance's replication tasks leave the group at a graceful stop:
//! one at a time, each once the group has re-formed after the previous one left (it is in
//! a newer generation), within a bound. Two members leaving together can strand a group
//! whose coordinator keeps a departed member as the leader of a forming group (Tansu does:
//! `docs/scaling.md`), and a rebalance per leave is what a group needs anyway; meanwhile
//! the remaining tasks keep mirroring, including the partitions the leaver handed over.

use std::sync::Mutex;
use std::time::Duration;

/// The leaving order of one instance's tasks of a flow.
#[derive(Debug)]
pub struct LeaveOrder {
    /// (the next task to leave, the group generation the previous one left in).
    state: Mutex<(u32, Option<i32>)>,
    /// How long a task waits for its turn and for the re-formed group at most.
    bound: Duration,
}

impl LeaveOrder {
    /// An order in which no task waits longer than `bound` in all.
    pub fn new(bound: Duration) -> Self {
        LeaveOrder {
            state: Mutex::new((0, None)),
            bound,
        }
    }

    /// Whether task `member`, in group generation `generation` and stopping for `waited`,
    /// may leave now: it is its turn and the group has re-formed since the previous task
    /// left (or the bound has passed).
    pub fn may_leave(&self, member: u32, generation: Option<i32>, waited: Duration) -> bool {
        if waited >= self.bound {
            return true;
        }
        let (next, previous) = *self.state.lock().unwrap_or_else(|e| e.into_inner());
        if member < next || member == 0 {
            return true;
        }
        member == next
            && match (previous, generation) {
                (Some(left_in), Some(now)) => now > left_in,
                // The previous task was not in the group (restarting): nothing to wait for.
                (None, _) => true,
                (Some(_), None) => false,
            }
    }

    /// Task `member` left the group, last in `generation` (`None`: it was not in one).
    pub fn left(&self, member: u32, generation: Option<i32>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if member >= state.0 {
            *state = (member + 1, generation);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_leave_one_at_a_time_each_after_the_group_reformed() {
        let order = LeaveOrder::new(Duration::from_secs(20));
        let zero = Duration::ZERO;
        assert!(order.may_leave(0, Some(5), zero), "the first goes at once");
        assert!(
            !order.may_leave(1, Some(5), zero),
            "not before the first left"
        );
        order.left(0, Some(5));
        assert!(
            !order.may_leave(1, Some(5), zero),
            "the group has not re-formed yet"
        );
        assert!(!order.may_leave(2, Some(6), zero), "not its turn");
        assert!(
            order.may_leave(1, Some(6), zero),
            "a newer generation: its turn"
        );
        order.left(1, Some(6));
        assert!(order.may_leave(2, Some(7), zero));
    }

    #[test]
    fn waiting_is_bounded_and_a_task_outside_the_group_holds_nobody_up() {
        let order = LeaveOrder::new(Duration::from_secs(20));
        assert!(
            order.may_leave(1, Some(5), Duration::from_secs(20)),
            "bounded"
        );
        order.left(0, None);
        assert!(
            order.may_leave(1, Some(5), Duration::ZERO),
            "the first was not in a group"
        );
        let late = LeaveOrder::new(Duration::from_secs(20));
        late.left(1, Some(3));
        late.left(0, Some(2));
        assert!(
            late.may_leave(1, Some(3), Duration::ZERO),
            "already past its turn"
        );
    }
}
