//! Topic ACL bindings through librdkafka's DescribeAcls, CreateAcls and DeleteAcls (not in
//! the safe rdkafka crate), on the cluster's one admin client: each call runs on the
//! blocking pool with its own result queue, and frees every librdkafka object it made
//! before it returns. Only TOPIC resources are read or written.
//!
//! Two things librdkafka 2.12.1 does (`rdkafka_admin.c`) shape how these are called:
//!
//! - DescribeAcls drops the response's top-level error code: a Kafka broker without an
//!   authorizer answers SECURITY_DISABLED there, and librdkafka hands back an empty list
//!   and no error. CreateAcls and DeleteAcls carry errors per binding, so SECURITY_DISABLED
//!   arrives there ([`AclError::NotServed`]). An error on the whole request (a broker that
//!   lacks the API, a future librdkafka that reports the code) is mapped the same way.
//! - The three ACL response parsers report success when a response does not parse (their
//!   `err_parse` path returns a local still set to NO_ERROR), and the caller then asserts
//!   (`rd_kafka_admin_response_parse: Assertion 'rko_result' failed`) and aborts the whole
//!   process. Tansu 0.6.0 answers CreateAcls that way. So [`Cluster::create_acls`] and
//!   [`Cluster::delete_acls`] send nothing for an empty list, and the ACL sync only calls
//!   them with something to do — never against a broker that lists no ACLs, as Tansu does.

use super::{Cluster, REQUEST_TIMEOUT};
use rdkafka_sys as sys;
use std::ffi::{CStr, CString, c_char};
use std::fmt;
use std::time::Duration;

mod kinds;
pub use kinds::{AclOperation, AclPermission, PatternType};

/// One ACL binding on a topic resource, as kmirror reads and writes it.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct AclBinding {
    /// The topic name, or the prefix of a PREFIXED pattern (`*`: every topic).
    pub resource_name: String,
    /// How the name matches topics.
    pub pattern: PatternType,
    /// Who (`User:alice`).
    pub principal: String,
    /// From where (`*`: any host).
    pub host: String,
    /// What.
    pub operation: AclOperation,
    /// Allowed or denied.
    pub permission: AclPermission,
}

impl fmt::Display for AclBinding {
    /// `ALLOW READ on topic orders (LITERAL) to User:alice from *`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} on topic {} ({}) to {} from {}",
            self.permission.name(),
            self.operation.name(),
            self.resource_name,
            self.pattern.name(),
            self.principal,
            self.host
        )
    }
}

/// An ACL operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum AclError {
    /// The cluster does not serve ACLs: it has no authorizer (SECURITY_DISABLED) or does not
    /// support the request.
    #[error("{0} (the cluster does not serve ACLs)")]
    NotServed(super::KafkaError),
    /// Any other failure: unreachable, not authorized, a timeout, a binding refused.
    #[error("{0}")]
    Failed(super::KafkaError),
}

impl AclError {
    /// The error, naming the cluster and the operation.
    pub fn kafka(&self) -> &super::KafkaError {
        match self {
            AclError::NotServed(e) | AclError::Failed(e) => e,
        }
    }

    /// Whether the cluster does not serve ACLs at all.
    pub fn is_not_served(&self) -> bool {
        matches!(self, AclError::NotServed(_))
    }

    /// A short, stable name of the error's kind (for rate-limited logging).
    pub fn kind(&self) -> &'static str {
        match self {
            AclError::NotServed(_) => "acls not served",
            AclError::Failed(_) => "kafka",
        }
    }
}

/// Whether librdkafka's error name means the cluster does not serve ACLs: no authorizer
/// (`SECURITY_DISABLED`), or a broker without the request (`UNSUPPORTED_VERSION`, and
/// librdkafka's local `_UNSUPPORTED_FEATURE`).
pub fn means_not_served(name: &str) -> bool {
    matches!(
        name,
        "SECURITY_DISABLED" | "UNSUPPORTED_VERSION" | "_UNSUPPORTED_FEATURE"
    )
}

/// Why one request or binding failed, as librdkafka names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Failure {
    /// librdkafka's error name (`SECURITY_DISABLED`), empty when it has none.
    pub(super) name: String,
    /// Its text.
    pub(super) message: String,
}

impl Failure {
    pub(super) fn local(message: impl Into<String>) -> Self {
        Failure {
            name: String::new(),
            message: message.into(),
        }
    }
}

pub(super) fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: librdkafka returns NUL-terminated strings that live as long as their owner.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The failure an `rd_kafka_error_t` describes, or `None` for no error.
///
/// SAFETY: `error` must be null or a valid error object for the call.
unsafe fn failure_of(error: *const sys::rd_kafka_error_t) -> Option<Failure> {
    if error.is_null() {
        return None;
    }
    // SAFETY: per the caller, `error` is valid.
    unsafe {
        Some(Failure {
            name: text(sys::rd_kafka_error_name(error)),
            message: text(sys::rd_kafka_error_string(error)),
        })
    }
}

/// A librdkafka binding (or, with `filter`, an exact binding filter) of `b`; the caller
/// destroys it with `rd_kafka_AclBinding_destroy`.
fn new_binding(b: &AclBinding, filter: bool) -> Result<*mut sys::rd_kafka_AclBinding_t, Failure> {
    let c =
        |s: &str| CString::new(s).map_err(|_| Failure::local(format!("{s:?} contains a NUL byte")));
    let (name, principal, host) = (c(&b.resource_name)?, c(&b.principal)?, c(&b.host)?);
    let mut errstr = [0 as c_char; 512];
    let new = if filter {
        sys::rd_kafka_AclBindingFilter_new
    } else {
        sys::rd_kafka_AclBinding_new
    };
    // SAFETY: every string is NUL-terminated and outlives the call, which copies them;
    // `errstr` is writable for its length.
    let made = unsafe {
        new(
            sys::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC,
            name.as_ptr(),
            b.pattern.to_sys(),
            principal.as_ptr(),
            host.as_ptr(),
            b.operation.to_sys(),
            b.permission.to_sys(),
            errstr.as_mut_ptr(),
            errstr.len(),
        )
    };
    if made.is_null() {
        return Err(Failure::local(text(errstr.as_ptr())));
    }
    Ok(made)
}

/// The binding librdkafka describes, or `None` when it is not a topic binding kmirror can
/// represent (an unknown operation or pattern type).
///
/// SAFETY: `acl` must be a valid binding for the call.
unsafe fn binding_of(acl: *const sys::rd_kafka_AclBinding_t) -> Option<AclBinding> {
    // SAFETY: per the caller, `acl` is valid; librdkafka maps every unknown enum value it
    // receives to the enum's UNKNOWN variant, so each getter returns a declared variant.
    unsafe {
        if sys::rd_kafka_AclBinding_restype(acl)
            != sys::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC
        {
            return None;
        }
        Some(AclBinding {
            resource_name: text(sys::rd_kafka_AclBinding_name(acl)),
            pattern: PatternType::from_sys(sys::rd_kafka_AclBinding_resource_pattern_type(acl))?,
            principal: text(sys::rd_kafka_AclBinding_principal(acl)),
            host: text(sys::rd_kafka_AclBinding_host(acl)),
            operation: AclOperation::from_sys(sys::rd_kafka_AclBinding_operation(acl))?,
            permission: AclPermission::from_sys(sys::rd_kafka_AclBinding_permission_type(acl))?,
        })
    }
}

/// Admin options for `op` with kmirror's request timeout; the caller destroys them.
///
/// SAFETY: `rk` must be a valid client.
pub(super) unsafe fn options(
    rk: *mut sys::rd_kafka_t,
    op: sys::rd_kafka_admin_op_t,
) -> *mut sys::rd_kafka_AdminOptions_t {
    // SAFETY: per the caller, `rk` is valid; `errstr` is writable for its length.
    unsafe {
        let options = sys::rd_kafka_AdminOptions_new(rk, op);
        let mut errstr = [0 as c_char; 256];
        sys::rd_kafka_AdminOptions_set_request_timeout(
            options,
            REQUEST_TIMEOUT.as_millis() as i32,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        options
    }
}

/// Waits for the one result event on `queue` and reads it with `read`, or gives the
/// request's error; the event is destroyed before it returns.
///
/// SAFETY: `queue` must be a valid queue with one admin request submitted on it; `read`
/// gets a valid event that it must not keep.
pub(super) unsafe fn answer<T>(
    queue: *mut sys::rd_kafka_queue_t,
    read: impl FnOnce(*mut sys::rd_kafka_event_t) -> T,
) -> Result<T, Failure> {
    let wait = REQUEST_TIMEOUT + Duration::from_secs(1);
    // SAFETY: per the caller, `queue` is valid; the event is destroyed below.
    unsafe {
        let event = sys::rd_kafka_queue_poll(queue, wait.as_millis() as i32);
        if event.is_null() {
            return Err(Failure::local(format!("no answer within {wait:?}")));
        }
        let err = sys::rd_kafka_event_error(event);
        let out = if err != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            Err(Failure {
                name: text(sys::rd_kafka_err2name(err)),
                message: text(sys::rd_kafka_event_error_string(event)),
            })
        } else {
            Ok(read(event))
        };
        sys::rd_kafka_event_destroy(event);
        out
    }
}

/// The pointers of a librdkafka result array.
///
/// SAFETY: `items` must be null or point to `count` elements valid for `'a`.
pub(super) unsafe fn items<'a, T>(items: *mut *const T, count: usize) -> &'a [*const T] {
    if items.is_null() || count == 0 {
        return &[];
    }
    // SAFETY: per the caller.
    unsafe { std::slice::from_raw_parts(items, count) }
}

impl Cluster {
    /// Runs `f` on the blocking pool with the admin client and a new result queue, which
    /// is destroyed after it.
    pub(super) async fn on_admin<T: Send + 'static>(
        &self,
        f: impl FnOnce(*mut sys::rd_kafka_t, *mut sys::rd_kafka_queue_t) -> T + Send + 'static,
    ) -> Result<T, Failure> {
        let admin = self.admin().clone();
        let done = tokio::task::spawn_blocking(move || {
            let rk = admin.inner().native_ptr();
            // SAFETY: `rk` is valid while `admin` lives (moved into this closure); the queue
            // is created from it and destroyed after use.
            unsafe {
                let queue = sys::rd_kafka_queue_new(rk);
                let out = f(rk, queue);
                sys::rd_kafka_queue_destroy(queue);
                out
            }
        });
        done.await.map_err(|e| Failure::local(e.to_string()))
    }

    /// The error of `operation` on this cluster; `NotServed` when librdkafka's error name
    /// says the cluster does not serve ACLs.
    fn acl_error(&self, operation: impl Into<String>, f: Failure) -> AclError {
        let message = if f.name.is_empty() {
            f.message
        } else {
            format!("{} ({})", f.message, f.name)
        };
        let e = self.error(operation, message);
        if means_not_served(&f.name) {
            AclError::NotServed(e)
        } else {
            AclError::Failed(e)
        }
    }

    /// Every ACL binding on topics (any name, any pattern type): DescribeAcls with a
    /// TOPIC / ANY filter. Bindings kmirror cannot represent are left out.
    pub async fn topic_acls(&self) -> Result<Vec<AclBinding>, AclError> {
        let listed = self.on_admin(|rk, queue| {
            let mut errstr = [0 as c_char; 512];
            // SAFETY: `rk` and `queue` are valid for this call (on_admin); the filter and
            // options are copied by DescribeAcls and destroyed right after it; the result
            // is read while its event lives.
            unsafe {
                let filter = sys::rd_kafka_AclBindingFilter_new(
                    sys::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC,
                    std::ptr::null(),
                    sys::rd_kafka_ResourcePatternType_t::RD_KAFKA_RESOURCE_PATTERN_ANY,
                    std::ptr::null(),
                    std::ptr::null(),
                    sys::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_ANY,
                    sys::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_ANY,
                    errstr.as_mut_ptr(),
                    errstr.len(),
                );
                if filter.is_null() {
                    return Err(Failure::local(text(errstr.as_ptr())));
                }
                let opts = options(rk, sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBEACLS);
                sys::rd_kafka_DescribeAcls(rk, filter, opts, queue);
                sys::rd_kafka_AclBinding_destroy(filter);
                sys::rd_kafka_AdminOptions_destroy(opts);
                answer(queue, |event| {
                    let result = sys::rd_kafka_event_DescribeAcls_result(event);
                    if result.is_null() {
                        return Vec::new();
                    }
                    let mut count = 0usize;
                    let acls = sys::rd_kafka_DescribeAcls_result_acls(result, &mut count);
                    items(acls, count)
                        .iter()
                        .filter_map(|a| binding_of(*a))
                        .collect()
                })
            }
        });
        listed
            .await
            .and_then(|r| r)
            .map_err(|f| self.acl_error("describe topic ACLs", f))
    }

    /// Creates `bindings` with one CreateAcls; one result per binding, in order. An empty
    /// list sends nothing (see the module docs).
    pub async fn create_acls(&self, bindings: &[AclBinding]) -> Vec<Result<(), AclError>> {
        self.each_binding(bindings, false, read_created).await
    }

    /// Deletes exactly `bindings` (one exact filter each) with one DeleteAcls; one result
    /// per binding, in order, with how many bindings its filter removed. An empty list
    /// sends nothing.
    pub async fn delete_acls(&self, bindings: &[AclBinding]) -> Vec<Result<usize, AclError>> {
        self.each_binding(bindings, true, read_deleted).await
    }

    async fn each_binding<T: Clone + Send + 'static>(
        &self,
        bindings: &[AclBinding],
        delete: bool,
        read: Reader<T>,
    ) -> Vec<Result<T, AclError>> {
        if bindings.is_empty() {
            return Vec::new();
        }
        let list = bindings.to_vec();
        let done = self
            .on_admin(move |rk, queue| submit(rk, queue, &list, delete, read))
            .await;
        let verb = if delete { "delete" } else { "create" };
        match done {
            Ok(results) => results
                .into_iter()
                .zip(bindings)
                .map(|(r, b)| r.map_err(|f| self.acl_error(format!("{verb} ACL {b}"), f)))
                .collect(),
            Err(f) => bindings
                .iter()
                .map(|b| Err(self.acl_error(format!("{verb} ACL {b}"), f.clone())))
                .collect(),
        }
    }
}

/// Reads the per-binding results of a CreateAcls or DeleteAcls result event.
///
/// SAFETY (to call): the event must be a valid result event of the matching request.
type Reader<T> = unsafe fn(*mut sys::rd_kafka_event_t) -> Vec<Result<T, Failure>>;

/// SAFETY: `event` must be a valid CreateAcls result event.
unsafe fn read_created(event: *mut sys::rd_kafka_event_t) -> Vec<Result<(), Failure>> {
    // SAFETY: per the caller; the results live as long as the event.
    unsafe {
        let result = sys::rd_kafka_event_CreateAcls_result(event);
        if result.is_null() {
            return Vec::new();
        }
        let mut count = 0usize;
        let acls = sys::rd_kafka_CreateAcls_result_acls(result, &mut count);
        items(acls, count)
            .iter()
            .map(|r| match failure_of(sys::rd_kafka_acl_result_error(*r)) {
                None => Ok(()),
                Some(f) => Err(f),
            })
            .collect()
    }
}

/// SAFETY: `event` must be a valid DeleteAcls result event.
unsafe fn read_deleted(event: *mut sys::rd_kafka_event_t) -> Vec<Result<usize, Failure>> {
    // SAFETY: per the caller; the responses live as long as the event.
    unsafe {
        let result = sys::rd_kafka_event_DeleteAcls_result(event);
        if result.is_null() {
            return Vec::new();
        }
        let mut count = 0usize;
        let responses = sys::rd_kafka_DeleteAcls_result_responses(result, &mut count);
        items(responses, count)
            .iter()
            .map(
                |r| match failure_of(sys::rd_kafka_DeleteAcls_result_response_error(*r)) {
                    Some(f) => Err(f),
                    None => {
                        let mut matched = 0usize;
                        sys::rd_kafka_DeleteAcls_result_response_matching_acls(*r, &mut matched);
                        Ok(matched)
                    }
                },
            )
            .collect()
    }
}

/// Builds one librdkafka object per binding, sends them in one CreateAcls (or, with
/// `delete`, one DeleteAcls of exact filters) and reads the results with `read`, one per
/// binding.
fn submit<T: Clone>(
    rk: *mut sys::rd_kafka_t,
    queue: *mut sys::rd_kafka_queue_t,
    bindings: &[AclBinding],
    delete: bool,
    read: Reader<T>,
) -> Vec<Result<T, Failure>> {
    let mut out: Vec<Option<Result<T, Failure>>> = vec![None; bindings.len()];
    let mut made = Vec::new();
    let mut sent = Vec::new();
    for (i, b) in bindings.iter().enumerate() {
        match new_binding(b, delete) {
            Ok(p) => {
                made.push(p);
                sent.push(i);
            }
            Err(f) => out[i] = Some(Err(f)),
        }
    }
    if !made.is_empty() {
        // SAFETY: `rk` and `queue` are valid for this call (on_admin); every object in
        // `made` was built above, is copied by the request and destroyed right after it;
        // `read` matches the request and reads the results while their event lives.
        let answered = unsafe {
            let op = if delete {
                sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DELETEACLS
            } else {
                sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_CREATEACLS
            };
            let opts = options(rk, op);
            if delete {
                sys::rd_kafka_DeleteAcls(rk, made.as_mut_ptr(), made.len(), opts, queue);
            } else {
                sys::rd_kafka_CreateAcls(rk, made.as_mut_ptr(), made.len(), opts, queue);
            }
            for p in &made {
                sys::rd_kafka_AclBinding_destroy(*p);
            }
            sys::rd_kafka_AdminOptions_destroy(opts);
            answer(queue, |event| read(event))
        };
        match answered {
            Ok(results) => {
                for (k, i) in sent.iter().enumerate() {
                    out[*i] = Some(
                        results
                            .get(k)
                            .cloned()
                            .unwrap_or_else(|| Err(Failure::local("no result for this binding"))),
                    );
                }
            }
            Err(f) => {
                for i in sent {
                    out[i] = Some(Err(f.clone()));
                }
            }
        }
    }
    out.into_iter()
        .map(|r| r.unwrap_or_else(|| Err(Failure::local("not sent"))))
        .collect()
}

#[cfg(test)]
mod tests;
