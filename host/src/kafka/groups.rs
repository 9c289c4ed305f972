//! Committed offsets of many consumer groups at once, from the cluster's one admin client:
//! librdkafka's ListConsumerGroupOffsets (not in the safe rdkafka crate), one request per
//! group, all in flight together on one result queue. No client per group is created.

use super::{Cluster, Committed, KafkaError, REQUEST_TIMEOUT};
use rdkafka_sys as sys;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_void};
use std::time::{Duration, Instant};

/// Each group's committed offsets (all its partitions), or why they could not be read.
pub type GroupOffsets = HashMap<String, Result<Vec<Committed>, String>>;

fn text(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: librdkafka returns NUL-terminated strings that live as long as their result.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The partitions of a topic-partition list librdkafka owns.
///
/// SAFETY: `list` must be null or a valid list for the duration of the call.
unsafe fn committed_in(list: *const sys::rd_kafka_topic_partition_list_t) -> Vec<Committed> {
    if list.is_null() {
        return Vec::new();
    }
    // SAFETY: per the caller, `list` is valid; `elems` holds `cnt` elements.
    let list = unsafe { &*list };
    let elems = if list.cnt > 0 && !list.elems.is_null() {
        // SAFETY: `elems` points to `cnt` initialised elements.
        unsafe { std::slice::from_raw_parts(list.elems, list.cnt as usize) }
    } else {
        &[]
    };
    elems
        .iter()
        .filter(|e| e.offset >= 0 && e.err == sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR)
        .map(|e| {
            let metadata = if e.metadata.is_null() || e.metadata_size == 0 {
                String::new()
            } else {
                // SAFETY: `metadata` points to `metadata_size` bytes.
                let bytes =
                    unsafe { std::slice::from_raw_parts(e.metadata as *const u8, e.metadata_size) };
                String::from_utf8_lossy(bytes).into_owned()
            };
            Committed {
                topic: text(e.topic),
                partition: e.partition,
                offset: e.offset,
                metadata,
            }
        })
        .collect()
}

/// Submits one ListConsumerGroupOffsets per group on `queue` and collects the results.
///
/// SAFETY: `rk` must be a valid client and `queue` a queue of it, both alive for the call.
unsafe fn list_offsets(
    rk: *mut sys::rd_kafka_t,
    queue: *mut sys::rd_kafka_queue_t,
    groups: &[String],
    timeout: Duration,
) -> GroupOffsets {
    let mut out = GroupOffsets::new();
    let mut submitted = 0;
    for (i, g) in groups.iter().enumerate() {
        let Ok(name) = CString::new(g.as_str()) else {
            out.insert(g.clone(), Err("the group id contains a NUL byte".into()));
            continue;
        };
        // SAFETY: valid arguments; each object is destroyed after the call copied it.
        unsafe {
            let request =
                sys::rd_kafka_ListConsumerGroupOffsets_new(name.as_ptr(), std::ptr::null());
            let options = sys::rd_kafka_AdminOptions_new(
                rk,
                sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS,
            );
            let mut errstr = [0 as std::ffi::c_char; 256];
            sys::rd_kafka_AdminOptions_set_request_timeout(
                options,
                timeout.as_millis() as i32,
                errstr.as_mut_ptr(),
                errstr.len(),
            );
            sys::rd_kafka_AdminOptions_set_opaque(options, i as *mut c_void);
            let mut requests = [request];
            sys::rd_kafka_ListConsumerGroupOffsets(rk, requests.as_mut_ptr(), 1, options, queue);
            sys::rd_kafka_ListConsumerGroupOffsets_destroy(request);
            sys::rd_kafka_AdminOptions_destroy(options);
        }
        submitted += 1;
    }
    let deadline = Instant::now() + timeout + Duration::from_secs(1);
    let mut received = 0;
    while received < submitted {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        // SAFETY: `queue` is valid; the event is destroyed below.
        let event = unsafe { sys::rd_kafka_queue_poll(queue, left.as_millis() as i32) };
        if event.is_null() {
            continue;
        }
        received += 1;
        // SAFETY: `event` is a valid event until destroyed at the end of this block.
        unsafe {
            let index = sys::rd_kafka_event_opaque(event) as usize;
            let group = groups.get(index).cloned().unwrap_or_default();
            if sys::rd_kafka_event_error(event)
                != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
            {
                out.insert(group, Err(text(sys::rd_kafka_event_error_string(event))));
            } else {
                let result = sys::rd_kafka_event_ListConsumerGroupOffsets_result(event);
                let mut count = 0usize;
                let results =
                    sys::rd_kafka_ListConsumerGroupOffsets_result_groups(result, &mut count);
                for j in 0..count {
                    let r = *results.add(j);
                    let name = text(sys::rd_kafka_group_result_name(r));
                    let error = sys::rd_kafka_group_result_error(r);
                    if !error.is_null() {
                        out.insert(name, Err(text(sys::rd_kafka_error_string(error))));
                    } else {
                        out.insert(
                            name,
                            Ok(committed_in(sys::rd_kafka_group_result_partitions(r))),
                        );
                    }
                }
            }
            sys::rd_kafka_event_destroy(event);
        }
    }
    for g in groups {
        out.entry(g.clone())
            .or_insert_with(|| Err(format!("no answer within {timeout:?}")));
    }
    out
}

impl Cluster {
    /// The committed offsets of every group of `groups` (all their partitions), read
    /// through the cluster's admin client, all requests in flight together.
    pub async fn committed_of_groups(&self, groups: &[String]) -> Result<GroupOffsets, KafkaError> {
        if groups.is_empty() {
            return Ok(GroupOffsets::new());
        }
        let admin = self.admin().clone();
        let groups = groups.to_vec();
        let read = tokio::task::spawn_blocking(move || {
            let rk = admin.inner().native_ptr();
            // SAFETY: `rk` is valid while `admin` lives (moved into this closure); the queue
            // is created from it and destroyed after use.
            unsafe {
                let queue = sys::rd_kafka_queue_new(rk);
                let out = list_offsets(rk, queue, &groups, REQUEST_TIMEOUT);
                sys::rd_kafka_queue_destroy(queue);
                out
            }
        });
        read.await
            .map_err(|e| self.error("read committed offsets of groups", e))
            .map(|out| {
                out.into_iter()
                    .map(|(g, r)| {
                        (
                            g,
                            r.map_err(|e| crate::kafka::secrets::scrub(&e, &self.hidden)),
                        )
                    })
                    .collect()
            })
    }
}
