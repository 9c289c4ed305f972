//! Host-side bindings of the `kmirror:plugin` WIT package (the only `bindgen!`s).
//!
//! Only the per-interface `Guest`/`GuestIndices` types are used, so a component needs to
//! export just the roles it plays, not the whole `plugin` world. The record transform's
//! bindings borrow what they pass to the guest (a fetched batch's keys, values and headers
//! are lowered straight from the records, never copied first).

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
});

pub(crate) use exports::kmirror::plugin::{
    config_property_filter, group_filter, replication_policy, topic_filter,
};

/// The record-transform role, with borrowing parameters.
pub(crate) mod transform {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "record-transform-plugin",
        ownership: Borrowing {
            duplicate_if_necessary: true
        },
    });

    pub(crate) use exports::kmirror::plugin::record_transform;
}

pub(crate) use transform::record_transform;
