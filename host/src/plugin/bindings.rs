//! The only `bindgen!`: host-side bindings of the `kmirror:plugin` WIT package.
//!
//! Only the per-interface `Guest`/`GuestIndices` types are used, so a component needs to
//! export just the roles it plays, not the whole `plugin` world.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
});

pub(crate) use exports::kmirror::plugin::{
    config_property_filter, group_filter, replication_policy, topic_filter,
};
