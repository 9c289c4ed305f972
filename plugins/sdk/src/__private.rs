//! Glue used by the code `export_plugin!` generates. Not a public API.

pub use wit_bindgen;

/// One configured instance of a role per component instance.
macro_rules! role_slot {
    ($role:ident, $trait:ident) => {
        pub mod $role {
            use crate::{Config, Configure, $trait};
            use std::cell::RefCell;

            thread_local! {
                static SLOT: RefCell<Option<Box<dyn $trait>>> = RefCell::new(None);
            }

            /// Builds the role from `config` and keeps it for the calls that follow.
            pub fn configure<T: $trait + Configure + 'static>(
                config: Vec<(String, String)>,
            ) -> Result<(), String> {
                let value = T::configure(&Config::from(config))?;
                SLOT.with(|slot| *slot.borrow_mut() = Some(Box::new(value)));
                Ok(())
            }

            /// Runs `f` on the configured role; a host that skipped `configure` gets the
            /// role built from an empty configuration.
            pub fn with<T: $trait + Configure + 'static, R>(f: impl FnOnce(&dyn $trait) -> R) -> R {
                SLOT.with(|slot| {
                    let mut slot = slot.borrow_mut();
                    let value = slot.get_or_insert_with(|| match T::configure(&Config::new()) {
                        Ok(value) => Box::new(value),
                        Err(e) => panic!("not configured, and the empty configuration fails: {e}"),
                    });
                    f(&**value)
                })
            }
        }
    };
}

role_slot!(topic_filter, TopicFilter);
role_slot!(group_filter, GroupFilter);
role_slot!(replication_policy, ReplicationPolicy);
role_slot!(config_property_filter, ConfigPropertyFilter);
role_slot!(record_transform, RecordTransform);

#[doc(hidden)]
#[macro_export]
macro_rules! __kmirror_impl_topic_filter {
    ($adapter:ident, $guest:path, $ty:ty) => {
        impl $guest for $adapter {
            fn configure(config: Vec<(String, String)>) -> Result<(), String> {
                ::kmirror_plugin_sdk::__private::topic_filter::configure::<$ty>(config)
            }
            fn should_replicate_topic(topic: String) -> bool {
                ::kmirror_plugin_sdk::__private::topic_filter::with::<$ty, _>(|f| {
                    f.should_replicate_topic(&topic)
                })
            }
            fn should_replicate_topics(topics: Vec<String>) -> Vec<bool> {
                ::kmirror_plugin_sdk::__private::topic_filter::with::<$ty, _>(|f| {
                    f.should_replicate_topics(&topics)
                })
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __kmirror_impl_group_filter {
    ($adapter:ident, $guest:path, $ty:ty) => {
        impl $guest for $adapter {
            fn configure(config: Vec<(String, String)>) -> Result<(), String> {
                ::kmirror_plugin_sdk::__private::group_filter::configure::<$ty>(config)
            }
            fn should_replicate_group(group: String) -> bool {
                ::kmirror_plugin_sdk::__private::group_filter::with::<$ty, _>(|f| {
                    f.should_replicate_group(&group)
                })
            }
            fn should_replicate_groups(groups: Vec<String>) -> Vec<bool> {
                ::kmirror_plugin_sdk::__private::group_filter::with::<$ty, _>(|f| {
                    f.should_replicate_groups(&groups)
                })
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __kmirror_impl_config_property_filter {
    ($adapter:ident, $guest:path, $ty:ty) => {
        impl $guest for $adapter {
            fn configure(config: Vec<(String, String)>) -> Result<(), String> {
                ::kmirror_plugin_sdk::__private::config_property_filter::configure::<$ty>(config)
            }
            fn should_replicate_config_property(name: String) -> bool {
                ::kmirror_plugin_sdk::__private::config_property_filter::with::<$ty, _>(|f| {
                    f.should_replicate_config_property(&name)
                })
            }
            fn should_replicate_source_default(name: String) -> bool {
                ::kmirror_plugin_sdk::__private::config_property_filter::with::<$ty, _>(|f| {
                    f.should_replicate_source_default(&name)
                })
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __kmirror_impl_replication_policy {
    ($adapter:ident, $guest:path, $ty:ty) => {
        impl $guest for $adapter {
            fn configure(config: Vec<(String, String)>) -> Result<(), String> {
                ::kmirror_plugin_sdk::__private::replication_policy::configure::<$ty>(config)
            }
            fn format_remote_topic(source_alias: String, topic: String) -> String {
                Self::with(|p| p.format_remote_topic(&source_alias, &topic))
            }
            fn topic_source(topic: String) -> Option<String> {
                Self::with(|p| p.topic_source(&topic))
            }
            fn upstream_topic(topic: String) -> Option<String> {
                Self::with(|p| p.upstream_topic(&topic))
            }
            fn original_topic(topic: String) -> String {
                Self::with(|p| p.original_topic(&topic))
            }
            fn heartbeats_topic() -> String {
                Self::with(|p| p.heartbeats_topic())
            }
            fn offset_syncs_topic(cluster_alias: String) -> String {
                Self::with(|p| p.offset_syncs_topic(&cluster_alias))
            }
            fn checkpoints_topic(cluster_alias: String) -> String {
                Self::with(|p| p.checkpoints_topic(&cluster_alias))
            }
            fn is_heartbeats_topic(topic: String) -> bool {
                Self::with(|p| p.is_heartbeats_topic(&topic))
            }
            fn is_checkpoints_topic(topic: String) -> bool {
                Self::with(|p| p.is_checkpoints_topic(&topic))
            }
            fn is_mm2_internal_topic(topic: String) -> bool {
                Self::with(|p| p.is_mm2_internal_topic(&topic))
            }
            fn is_internal_topic(topic: String) -> bool {
                Self::with(|p| p.is_internal_topic(&topic))
            }
            fn format_remote_topics(source_alias: String, topics: Vec<String>) -> Vec<String> {
                Self::with(|p| p.format_remote_topics(&source_alias, &topics))
            }
        }
        impl $adapter {
            fn with<R>(f: impl FnOnce(&dyn ::kmirror_plugin_sdk::ReplicationPolicy) -> R) -> R {
                ::kmirror_plugin_sdk::__private::replication_policy::with::<$ty, R>(f)
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __kmirror_impl_record_transform {
    ($adapter:ident, $guest:path, $ty:ty) => {
        impl $guest for $adapter {
            fn configure(config: Vec<(String, String)>) -> Result<(), String> {
                ::kmirror_plugin_sdk::__private::record_transform::configure::<$ty>(config)
            }
            fn transform(
                records: Vec<self::exports::kmirror::plugin::record_transform::SourceRecord>,
            ) -> Vec<self::exports::kmirror::plugin::record_transform::Outcome> {
                use self::exports::kmirror::plugin::record_transform as wit;
                let records: Vec<::kmirror_plugin_sdk::Record> = records
                    .into_iter()
                    .map(|r| ::kmirror_plugin_sdk::Record {
                        topic: r.topic,
                        partition: r.partition,
                        offset: r.offset,
                        timestamp: r.timestamp,
                        key: r.key,
                        value: r.value,
                        headers: r
                            .headers
                            .into_iter()
                            .map(|h| ::kmirror_plugin_sdk::Header {
                                key: h.key,
                                value: h.value,
                            })
                            .collect(),
                    })
                    .collect();
                ::kmirror_plugin_sdk::__private::record_transform::with::<$ty, _>(|t| {
                    t.transform_batch(records)
                })
                .into_iter()
                .map(|o| match o {
                    ::kmirror_plugin_sdk::Outcome::Keep => wit::Outcome::Keep,
                    ::kmirror_plugin_sdk::Outcome::Drop => wit::Outcome::Drop,
                    ::kmirror_plugin_sdk::Outcome::Rewrite {
                        key,
                        value,
                        headers,
                    } => wit::Outcome::Rewrite(wit::Rewritten {
                        key,
                        value,
                        headers: headers
                            .into_iter()
                            .map(|h| wit::Header {
                                key: h.key,
                                value: h.value,
                            })
                            .collect(),
                    }),
                })
                .collect()
            }
        }
    };
}

pub mod macros {
    //! The per-role adapters, addressed by role name from `export_plugin!`.
    pub use crate::__kmirror_impl_config_property_filter as config_property_filter;
    pub use crate::__kmirror_impl_group_filter as group_filter;
    pub use crate::__kmirror_impl_record_transform as record_transform;
    pub use crate::__kmirror_impl_replication_policy as replication_policy;
    pub use crate::__kmirror_impl_topic_filter as topic_filter;
}
