//! What ACL sync needs of the two clusters, as a trait: the real clusters in production,
//! a scripted fake in the tests of the loop (this project's broker lists no ACLs and
//! cannot take a CreateAcls, so the loop's handling of bindings and failures is tested
//! against the fake).

use crate::flow::discovery::clusters::Live;
use crate::kafka::acls::{AclBinding, AclError};
use std::future::Future;

/// The source and target of a flow, as ACL sync uses them.
pub trait AclClusters: Send + Sync + 'static {
    /// The source cluster's alias.
    fn source_alias(&self) -> &str;
    /// The target cluster's alias.
    fn target_alias(&self) -> &str;
    /// Every topic binding on the source.
    fn source_acls(&self) -> impl Future<Output = Result<Vec<AclBinding>, AclError>> + Send;
    /// Every topic binding on the target.
    fn target_acls(&self) -> impl Future<Output = Result<Vec<AclBinding>, AclError>> + Send;
    /// Creates `bindings` on the target (never called with none); one result each.
    fn create(
        &self,
        bindings: Vec<AclBinding>,
    ) -> impl Future<Output = Vec<Result<(), AclError>>> + Send;
    /// Deletes exactly `bindings` on the target (never called with none); one result each,
    /// with how many bindings were removed.
    fn delete(
        &self,
        bindings: Vec<AclBinding>,
    ) -> impl Future<Output = Vec<Result<usize, AclError>>> + Send;
}

impl AclClusters for Live {
    fn source_alias(&self) -> &str {
        &self.source.alias
    }
    fn target_alias(&self) -> &str {
        &self.target.alias
    }
    async fn source_acls(&self) -> Result<Vec<AclBinding>, AclError> {
        self.source.topic_acls().await
    }
    async fn target_acls(&self) -> Result<Vec<AclBinding>, AclError> {
        self.target.topic_acls().await
    }
    async fn create(&self, bindings: Vec<AclBinding>) -> Vec<Result<(), AclError>> {
        self.target.create_acls(&bindings).await
    }
    async fn delete(&self, bindings: Vec<AclBinding>) -> Vec<Result<usize, AclError>> {
        self.target.delete_acls(&bindings).await
    }
}
