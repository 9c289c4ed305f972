//! Setting some of a topic's configs and leaving the others alone: Kafka's
//! IncrementalAlterConfigs (KIP-339, what MM2 uses since 3.5), which the rdkafka crate
//! lacks, through librdkafka directly. (AlterConfigs would reset every config not named —
//! a target-only retention or a throttle set during a reassignment.)

use super::{Cluster, KafkaError, REQUEST_TIMEOUT};
use rdkafka_sys as sys;
use std::ffi::{CStr, CString};
use std::time::Duration;

fn text(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: librdkafka returns NUL-terminated strings that live as long as their owner.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Sets `configs` on `topic`; `Err(message)` with the broker's or librdkafka's error.
///
/// SAFETY: `rk` must be a valid client for the duration of the call.
unsafe fn set_configs(
    rk: *mut sys::rd_kafka_t,
    topic: &CStr,
    configs: &[(CString, CString)],
    timeout: Duration,
) -> Result<(), String> {
    // SAFETY: every object created here is destroyed before returning; the arguments are
    // valid NUL-terminated strings owned by the caller.
    unsafe {
        let resource = sys::rd_kafka_ConfigResource_new(
            sys::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC,
            topic.as_ptr(),
        );
        for (name, value) in configs {
            let error = sys::rd_kafka_ConfigResource_add_incremental_config(
                resource,
                name.as_ptr(),
                sys::rd_kafka_AlterConfigOpType_t::RD_KAFKA_ALTER_CONFIG_OP_TYPE_SET,
                value.as_ptr(),
            );
            if !error.is_null() {
                let message = text(sys::rd_kafka_error_string(error));
                sys::rd_kafka_error_destroy(error);
                sys::rd_kafka_ConfigResource_destroy(resource);
                return Err(message);
            }
        }
        let options = sys::rd_kafka_AdminOptions_new(
            rk,
            sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_INCREMENTALALTERCONFIGS,
        );
        let mut errstr = [0 as std::ffi::c_char; 256];
        sys::rd_kafka_AdminOptions_set_request_timeout(
            options,
            timeout.as_millis() as i32,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        let queue = sys::rd_kafka_queue_new(rk);
        let mut resources = [resource];
        sys::rd_kafka_IncrementalAlterConfigs(rk, resources.as_mut_ptr(), 1, options, queue);
        sys::rd_kafka_ConfigResource_destroy(resource);
        sys::rd_kafka_AdminOptions_destroy(options);
        let wait = (timeout + Duration::from_secs(1)).as_millis() as i32;
        let event = sys::rd_kafka_queue_poll(queue, wait);
        let outcome = if event.is_null() {
            Err(format!("no answer within {timeout:?}"))
        } else if sys::rd_kafka_event_error(event)
            != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        {
            Err(text(sys::rd_kafka_event_error_string(event)))
        } else {
            let result = sys::rd_kafka_event_IncrementalAlterConfigs_result(event);
            let mut count = 0usize;
            let results =
                sys::rd_kafka_IncrementalAlterConfigs_result_resources(result, &mut count);
            let mut outcome = Ok(());
            for i in 0..count {
                let r = *results.add(i);
                if sys::rd_kafka_ConfigResource_error(r)
                    != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
                {
                    outcome = Err(text(sys::rd_kafka_ConfigResource_error_string(r)));
                }
            }
            outcome
        };
        if !event.is_null() {
            sys::rd_kafka_event_destroy(event);
        }
        sys::rd_kafka_queue_destroy(queue);
        outcome
    }
}

impl Cluster {
    /// Sets `configs` on `topic`, leaving its other configs as they are.
    pub async fn set_topic_configs(
        &self,
        topic: &str,
        configs: &[(String, String)],
    ) -> Result<(), KafkaError> {
        let op = format!("alter configs of {topic}");
        let name = CString::new(topic).map_err(|e| self.error(&op, e))?;
        let configs: Vec<(CString, CString)> = configs
            .iter()
            .map(|(k, v)| Ok((CString::new(k.as_str())?, CString::new(v.as_str())?)))
            .collect::<Result<_, std::ffi::NulError>>()
            .map_err(|e| self.error(&op, e))?;
        if configs.is_empty() {
            return Ok(());
        }
        let admin = self.admin().clone();
        let set = tokio::task::spawn_blocking(move || {
            let rk = admin.inner().native_ptr();
            // SAFETY: `rk` is valid while `admin` lives (moved into this closure).
            unsafe { set_configs(rk, &name, &configs, REQUEST_TIMEOUT) }
        });
        set.await
            .map_err(|e| self.error(&op, e))?
            .map_err(|e| self.error(&op, crate::kafka::secrets::scrub(&e, &self.hidden)))
    }
}
