//! What ACL sync needs of the two clusters, as a trait: the real clusters in production,
//! a scripted fake in the tests of the loop (this project's broker lists no ACLs and
//! cannot take a CreateAcls, so the loop's handling of bindings and failures is tested
//! against the fake).

use super::ledger::{self, Fold};
use crate::flow::discovery::clusters::Live;
use crate::kafka::KafkaError;
use crate::kafka::acls::{AclBinding, AclError};
use crate::kafka::internal::{InternalWriter, read_topic_to_end};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long reading the ledger, or writing one record of it, may take.
const LEDGER_TIMEOUT: Duration = Duration::from_secs(30);

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
    /// What the ledger on the target says this flow created and has not deleted since
    /// (empty when there is no ledger yet).
    fn synced(&self) -> impl Future<Output = Result<Fold, KafkaError>> + Send;
    /// Records in the ledger that `created` were created and `deleted` deleted by `flow`
    /// (creating the ledger topic first if needed, with `replication_factor`).
    fn record(
        &self,
        flow: &str,
        replication_factor: Option<i32>,
        created: Vec<AclBinding>,
        deleted: Vec<AclBinding>,
    ) -> impl Future<Output = Result<(), KafkaError>> + Send;
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
    async fn synced(&self) -> Result<Fold, KafkaError> {
        let topic = ledger::topic(&self.source.alias);
        if !self.target.topics().await?.contains_key(&topic) {
            return Ok(Fold::default());
        }
        let fold = Arc::new(Mutex::new(Fold::default()));
        let into = fold.clone();
        let complete = read_topic_to_end(&self.target, &topic, LEDGER_TIMEOUT, move |k, v| {
            into.lock().unwrap_or_else(|e| e.into_inner()).apply(k, v)
        })
        .await?;
        if !complete {
            return Err(self.target.error(
                format!("read {topic}"),
                format!("its end was not reached within {LEDGER_TIMEOUT:?}"),
            ));
        }
        Ok(std::mem::take(
            &mut *fold.lock().unwrap_or_else(|e| e.into_inner()),
        ))
    }
    async fn record(
        &self,
        flow: &str,
        replication_factor: Option<i32>,
        created: Vec<AclBinding>,
        deleted: Vec<AclBinding>,
    ) -> Result<(), KafkaError> {
        let topic = ledger::topic(&self.source.alias);
        self.target
            .ensure_internal_topic(&topic, replication_factor, None)
            .await?
            .map_err(|e| self.target.error(format!("create {topic}"), e))?;
        let writer = InternalWriter::new(&self.target, &topic)?;
        let value = ledger::value(flow, crate::flow::telemetry::now_ms());
        // Every record is tried, whatever happens to the others; the first failure is
        // the answer.
        let mut first = None;
        let sent: Vec<_> = created
            .iter()
            .map(|b| writer.send(&ledger::key(b), &value, None))
            .collect();
        for acked in sent {
            let acked = tokio::time::timeout(LEDGER_TIMEOUT, acked)
                .await
                .unwrap_or_else(|_| {
                    Err(self
                        .target
                        .error(format!("write to {topic}"), "not acked in time"))
                });
            if let Err(e) = acked {
                first.get_or_insert(e);
            }
        }
        for b in &deleted {
            if let Err(e) = writer.tombstone(&ledger::key(b), LEDGER_TIMEOUT).await {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}
