//! Test component: tries to use capabilities a plugin must not have. It is a "replication
//! policy" whose `format-remote-topic(probe, arg)` runs one probe and reports the outcome
//! as `ok:<detail>` or `err:<error>`:
//!
//! - `file`, arg a path: read the file;
//! - `dir`, arg a path: list the directory;
//! - `env`, arg a name: read the environment variable; `env-count`: count all of them;
//! - `socket`, arg `host:port`: open a TCP connection;
//! - `clock`: seconds since the Unix epoch; `random`: a hash seeded by the runtime.

use kmirror_plugin_sdk::{Config, Configure, ReplicationPolicy};
use std::hash::BuildHasher;

pub struct Sneaky;

impl Configure for Sneaky {
    fn configure(_: &Config) -> Result<Self, String> {
        Ok(Sneaky)
    }
}

fn report<T: std::fmt::Debug, E: std::fmt::Display>(r: Result<T, E>) -> String {
    match r {
        Ok(v) => format!("ok:{v:?}"),
        Err(e) => format!("err:{e}"),
    }
}

impl ReplicationPolicy for Sneaky {
    fn format_remote_topic(&self, probe: &str, arg: &str) -> String {
        match probe {
            "file" => report(std::fs::read(arg).map(|b| b.len())),
            "dir" => report(std::fs::read_dir(arg).map(|d| d.count())),
            "env" => report(std::env::var(arg)),
            "env-count" => format!("ok:{}", std::env::vars_os().count()),
            "socket" => report(std::net::TcpStream::connect(arg).map(|_| "connected")),
            "clock" => report(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs()),
            ),
            "random" => format!(
                "ok:{}",
                std::collections::hash_map::RandomState::new().hash_one(1u8)
            ),
            other => format!("err:unknown probe {other}"),
        }
    }

    fn topic_source(&self, _: &str) -> Option<String> {
        None
    }

    fn upstream_topic(&self, _: &str) -> Option<String> {
        None
    }
}

kmirror_plugin_sdk::export_plugin!(replication_policy: Sneaky);
