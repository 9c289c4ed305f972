//! Discovery (MM2's `MirrorSourceConnector` topic refresh): at start and every
//! `refresh_topics_interval`, list the source topics, decide which are mirrored under which
//! names, create and grow target topics, and hand the routes to the data plane and the
//! checkpoint task.
//!
//! - [`rules`]: the decisions and the plan, as pure functions.
//! - [`task`]: the loop that lists both clusters, applies the plan (creating, growing and
//!   configuring target topics) and publishes routes; [`clusters`]: what it needs of the
//!   clusters, as a trait; [`claims`]: the target topics the daemon's flows mirror into.

pub mod claims;
pub mod clusters;
pub mod rules;
pub mod task;

pub use rules::{
    Action, Decision, Plan, Problem, SkipReason, Snapshot, decide, decide_all, degrades, describe,
    is_cycle, plan,
};
