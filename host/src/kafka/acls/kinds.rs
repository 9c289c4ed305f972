//! The kinds an ACL binding is made of — pattern type, operation, permission — with
//! Kafka's names and librdkafka's values.

use rdkafka_sys as sys;

/// How a binding's resource name matches topics. (DescribeAcls only ever answers these
/// two; ANY and MATCH exist only in filters.)
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PatternType {
    /// The topic with exactly this name (or every topic, for the name `*`).
    Literal,
    /// Every topic whose name starts with it.
    Prefixed,
}

/// What a binding allows or denies.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AclOperation {
    /// Every operation.
    All,
    /// Consume.
    Read,
    /// Produce.
    Write,
    /// Create the topic.
    Create,
    /// Delete the topic (or its records).
    Delete,
    /// Alter the topic (partitions).
    Alter,
    /// Describe the topic (metadata, offsets).
    Describe,
    /// Inter-broker actions.
    ClusterAction,
    /// Describe the topic's configs.
    DescribeConfigs,
    /// Alter the topic's configs.
    AlterConfigs,
    /// Idempotent produce.
    IdempotentWrite,
}

/// Whether a binding allows or denies.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AclPermission {
    /// Denies (wins over any ALLOW).
    Deny,
    /// Allows.
    Allow,
}

impl PatternType {
    /// Kafka's name (`LITERAL`).
    pub fn name(self) -> &'static str {
        match self {
            PatternType::Literal => "LITERAL",
            PatternType::Prefixed => "PREFIXED",
        }
    }

    pub(super) fn to_sys(self) -> sys::rd_kafka_ResourcePatternType_t {
        use sys::rd_kafka_ResourcePatternType_t as P;
        match self {
            PatternType::Literal => P::RD_KAFKA_RESOURCE_PATTERN_LITERAL,
            PatternType::Prefixed => P::RD_KAFKA_RESOURCE_PATTERN_PREFIXED,
        }
    }

    pub(super) fn from_sys(p: sys::rd_kafka_ResourcePatternType_t) -> Option<Self> {
        use sys::rd_kafka_ResourcePatternType_t as P;
        match p {
            P::RD_KAFKA_RESOURCE_PATTERN_LITERAL => Some(PatternType::Literal),
            P::RD_KAFKA_RESOURCE_PATTERN_PREFIXED => Some(PatternType::Prefixed),
            _ => None,
        }
    }
}

/// Each operation with librdkafka's value.
const OPERATIONS: [(AclOperation, sys::rd_kafka_AclOperation_t); 11] = {
    use sys::rd_kafka_AclOperation_t as O;
    [
        (AclOperation::All, O::RD_KAFKA_ACL_OPERATION_ALL),
        (AclOperation::Read, O::RD_KAFKA_ACL_OPERATION_READ),
        (AclOperation::Write, O::RD_KAFKA_ACL_OPERATION_WRITE),
        (AclOperation::Create, O::RD_KAFKA_ACL_OPERATION_CREATE),
        (AclOperation::Delete, O::RD_KAFKA_ACL_OPERATION_DELETE),
        (AclOperation::Alter, O::RD_KAFKA_ACL_OPERATION_ALTER),
        (AclOperation::Describe, O::RD_KAFKA_ACL_OPERATION_DESCRIBE),
        (
            AclOperation::ClusterAction,
            O::RD_KAFKA_ACL_OPERATION_CLUSTER_ACTION,
        ),
        (
            AclOperation::DescribeConfigs,
            O::RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS,
        ),
        (
            AclOperation::AlterConfigs,
            O::RD_KAFKA_ACL_OPERATION_ALTER_CONFIGS,
        ),
        (
            AclOperation::IdempotentWrite,
            O::RD_KAFKA_ACL_OPERATION_IDEMPOTENT_WRITE,
        ),
    ]
};

impl AclOperation {
    /// Every operation a binding can name.
    pub const ALL: [AclOperation; 11] = [
        AclOperation::All,
        AclOperation::Read,
        AclOperation::Write,
        AclOperation::Create,
        AclOperation::Delete,
        AclOperation::Alter,
        AclOperation::Describe,
        AclOperation::ClusterAction,
        AclOperation::DescribeConfigs,
        AclOperation::AlterConfigs,
        AclOperation::IdempotentWrite,
    ];

    /// Kafka's name (`READ`, `DESCRIBE_CONFIGS`).
    pub fn name(self) -> &'static str {
        match self {
            AclOperation::All => "ALL",
            AclOperation::Read => "READ",
            AclOperation::Write => "WRITE",
            AclOperation::Create => "CREATE",
            AclOperation::Delete => "DELETE",
            AclOperation::Alter => "ALTER",
            AclOperation::Describe => "DESCRIBE",
            AclOperation::ClusterAction => "CLUSTER_ACTION",
            AclOperation::DescribeConfigs => "DESCRIBE_CONFIGS",
            AclOperation::AlterConfigs => "ALTER_CONFIGS",
            AclOperation::IdempotentWrite => "IDEMPOTENT_WRITE",
        }
    }

    pub(super) fn to_sys(self) -> sys::rd_kafka_AclOperation_t {
        OPERATIONS.iter().find(|(o, _)| *o == self).map_or(
            sys::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_UNKNOWN,
            |(_, s)| *s,
        )
    }

    pub(super) fn from_sys(op: sys::rd_kafka_AclOperation_t) -> Option<Self> {
        OPERATIONS.iter().find(|(_, s)| *s == op).map(|(o, _)| *o)
    }
}

impl AclPermission {
    /// Kafka's name (`ALLOW`).
    pub fn name(self) -> &'static str {
        match self {
            AclPermission::Deny => "DENY",
            AclPermission::Allow => "ALLOW",
        }
    }

    pub(super) fn to_sys(self) -> sys::rd_kafka_AclPermissionType_t {
        use sys::rd_kafka_AclPermissionType_t as P;
        match self {
            AclPermission::Deny => P::RD_KAFKA_ACL_PERMISSION_TYPE_DENY,
            AclPermission::Allow => P::RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW,
        }
    }

    pub(super) fn from_sys(p: sys::rd_kafka_AclPermissionType_t) -> Option<Self> {
        use sys::rd_kafka_AclPermissionType_t as P;
        match p {
            P::RD_KAFKA_ACL_PERMISSION_TYPE_DENY => Some(AclPermission::Deny),
            P::RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW => Some(AclPermission::Allow),
            _ => None,
        }
    }
}
