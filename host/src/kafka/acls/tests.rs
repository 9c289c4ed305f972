//! The ACL types through librdkafka's own binding objects (no broker needed: bindings are
//! built and read back in process), and the errors that mean "ACLs are not served". The
//! requests themselves cannot be tested against this project's broker (see the module
//! docs); the sync loop is tested against a scripted fake (`flow::acls::task::tests`).

use super::*;

fn binding(operation: AclOperation, permission: AclPermission, pattern: PatternType) -> AclBinding {
    AclBinding {
        resource_name: "primary.orders".into(),
        pattern,
        principal: "User:alice".into(),
        host: "10.0.0.7".into(),
        operation,
        permission,
    }
}

#[test]
fn every_binding_kmirror_writes_reads_back_the_same_from_librdkafka() {
    for operation in AclOperation::ALL {
        for permission in [AclPermission::Allow, AclPermission::Deny] {
            for pattern in [PatternType::Literal, PatternType::Prefixed] {
                let b = binding(operation, permission, pattern);
                let made = new_binding(&b, false).expect("a valid binding");
                // SAFETY: `made` was just built and is destroyed right after reading it.
                let read = unsafe {
                    let read = binding_of(made);
                    sys::rd_kafka_AclBinding_destroy(made);
                    read
                };
                assert_eq!(read.as_ref(), Some(&b), "{b}");
            }
        }
    }
}

#[test]
fn exact_filters_are_built_and_bad_names_are_refused_per_binding() {
    let b = binding(
        AclOperation::Read,
        AclPermission::Allow,
        PatternType::Literal,
    );
    let filter = new_binding(&b, true).expect("an exact filter");
    // SAFETY: `filter` was just built and is destroyed right after reading it.
    let read = unsafe {
        let read = binding_of(filter);
        sys::rd_kafka_AclBinding_destroy(filter);
        read
    };
    assert_eq!(read, Some(b.clone()));
    let nul = AclBinding {
        principal: "User:a\0b".into(),
        ..b
    };
    let refused = new_binding(&nul, false).expect_err("a NUL byte is refused");
    assert!(refused.message.contains("NUL"), "{refused:?}");
}

#[tokio::test]
async fn empty_lists_send_nothing() {
    // No broker listens on port 1: anything sent would fail (after a timeout), so an
    // immediate empty answer shows nothing was sent.
    let cluster = Cluster::new(&super::super::ClusterSettings {
        alias: "backup".into(),
        bootstrap_servers: "127.0.0.1:1".into(),
        librdkafka: Default::default(),
    })
    .expect("cluster");
    let started = std::time::Instant::now();
    assert!(cluster.create_acls(&[]).await.is_empty());
    assert!(cluster.delete_acls(&[]).await.is_empty());
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[test]
fn security_disabled_and_missing_apis_mean_acls_are_not_served() {
    for name in [
        "SECURITY_DISABLED",
        "UNSUPPORTED_VERSION",
        "_UNSUPPORTED_FEATURE",
    ] {
        assert!(means_not_served(name), "{name}");
    }
    for name in [
        "",
        "CLUSTER_AUTHORIZATION_FAILED",
        "_TIMED_OUT",
        "INVALID_REQUEST",
    ] {
        assert!(!means_not_served(name), "{name}");
    }
    let cluster = Cluster::new(&super::super::ClusterSettings {
        alias: "backup".into(),
        bootstrap_servers: "127.0.0.1:1".into(),
        librdkafka: Default::default(),
    })
    .expect("cluster");
    let e = cluster.acl_error(
        "describe topic ACLs",
        Failure {
            name: "SECURITY_DISABLED".into(),
            message: "No Authorizer is configured on the broker".into(),
        },
    );
    assert!(e.is_not_served());
    let text = e.to_string();
    assert!(
        text.contains("cluster backup")
            && text.contains("describe topic ACLs")
            && text.contains("SECURITY_DISABLED"),
        "{text}"
    );
    let e = cluster.acl_error(
        "create ACL x",
        Failure {
            name: "CLUSTER_AUTHORIZATION_FAILED".into(),
            message: "not authorized".into(),
        },
    );
    assert!(!e.is_not_served() && e.kind() == "kafka", "{e}");
}

#[test]
fn a_binding_reads_as_kafka_names_it() {
    let b = binding(
        AclOperation::DescribeConfigs,
        AclPermission::Deny,
        PatternType::Prefixed,
    );
    assert_eq!(
        b.to_string(),
        "DENY DESCRIBE_CONFIGS on topic primary.orders (PREFIXED) to User:alice from 10.0.0.7"
    );
    assert_eq!(
        serde_json::to_value(&b).unwrap()["operation"],
        "DESCRIBE_CONFIGS"
    );
}
