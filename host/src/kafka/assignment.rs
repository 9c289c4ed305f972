//! What the group coordinator says a consumer group assigned: DescribeGroups gives each
//! member's assignment as bytes of the consumer protocol (`ConsumerProtocolAssignment`:
//! version INT16, then an array of (topic STRING, partitions ARRAY of INT32), then user
//! data). Some brokers send no assignment bytes at all (Tansu); then nothing is known.

use super::{Cluster, KafkaError, REQUEST_TIMEOUT};
use std::collections::BTreeSet;

/// Decodes a member's assignment: its (topic, partition) pairs; `None` if the bytes are
/// empty or not a consumer-protocol assignment.
pub fn decode_assignment(bytes: &[u8]) -> Option<Vec<(String, i32)>> {
    struct Reader<'a>(&'a [u8]);
    impl Reader<'_> {
        fn take(&mut self, n: usize) -> Option<&[u8]> {
            if self.0.len() < n {
                return None;
            }
            let (head, rest) = self.0.split_at(n);
            self.0 = rest;
            Some(head)
        }
        fn i16(&mut self) -> Option<i16> {
            Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
        }
        fn i32(&mut self) -> Option<i32> {
            Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
        }
    }
    let mut r = Reader(bytes);
    let version = r.i16()?;
    if !(0..=3).contains(&version) {
        return None;
    }
    let topics = usize::try_from(r.i32()?).ok()?;
    let mut out = Vec::new();
    for _ in 0..topics {
        let len = usize::try_from(r.i16()?).ok()?;
        let topic = std::str::from_utf8(r.take(len)?).ok()?.to_string();
        let partitions = usize::try_from(r.i32()?).ok()?;
        if partitions > bytes.len() {
            return None;
        }
        for _ in 0..partitions {
            out.push((topic.clone(), r.i32()?));
        }
    }
    Some(out)
}

/// Why a group described with no state is not read as one without members.
const UNDESCRIBED: &str = "the coordinator did not describe the group (it answered with an error, e.g. moving or loading)";

impl Cluster {
    /// The partitions the coordinator says `group`'s members are assigned (empty when the
    /// broker does not report assignments). A group the coordinator answered with an error
    /// (moving, loading: no state, no members) is an error, not a group without members.
    pub async fn group_assignment(
        &self,
        group: &str,
    ) -> Result<BTreeSet<(String, i32)>, KafkaError> {
        let admin = self.admin().clone();
        let name = group.to_string();
        let op = || format!("describe consumer group {group}");
        let listed = tokio::task::spawn_blocking(move || {
            admin
                .inner()
                .fetch_group_list(Some(&name), REQUEST_TIMEOUT)
                .map(|l| {
                    let found = l.groups().iter().find(|g| g.name() == name);
                    if found.is_some_and(|g| g.state().is_empty()) {
                        return Err(UNDESCRIBED);
                    }
                    Ok(found
                        .into_iter()
                        .flat_map(|g| g.members().iter())
                        .filter_map(|m| m.assignment().and_then(decode_assignment))
                        .flatten()
                        .collect::<BTreeSet<_>>())
                })
        })
        .await
        .map_err(|e| self.error(op(), e))?;
        listed
            .map_err(|e| self.error(op(), e))?
            .map_err(|e| self.error(op(), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(version: i16, topics: &[(&str, &[i32])]) -> Vec<u8> {
        let mut b = version.to_be_bytes().to_vec();
        b.extend((topics.len() as i32).to_be_bytes());
        for (t, ps) in topics {
            b.extend((t.len() as i16).to_be_bytes());
            b.extend(t.as_bytes());
            b.extend((ps.len() as i32).to_be_bytes());
            for p in *ps {
                b.extend(p.to_be_bytes());
            }
        }
        b.extend((-1i32).to_be_bytes()); // no user data
        b
    }

    #[test]
    fn a_consumer_protocol_assignment_decodes() {
        let bytes = encode(1, &[("orders", &[0, 2]), ("payments", &[1])]);
        assert_eq!(
            decode_assignment(&bytes),
            Some(vec![
                ("orders".to_string(), 0),
                ("orders".to_string(), 2),
                ("payments".to_string(), 1)
            ])
        );
        assert_eq!(decode_assignment(&encode(0, &[])), Some(vec![]));
    }

    #[test]
    fn missing_or_foreign_bytes_decode_to_nothing() {
        assert_eq!(decode_assignment(&[]), None, "a broker that sends none");
        assert_eq!(decode_assignment(&[0, 9]), None, "an unknown version");
        let mut truncated = encode(0, &[("orders", &[0, 1])]);
        truncated.truncate(12);
        assert_eq!(decode_assignment(&truncated), None);
        let huge = [0u8, 0, 0, 0, 0, 1, 0, 1, b'x', 0x7f, 0xff, 0xff, 0xff];
        assert_eq!(decode_assignment(&huge), None, "a count beyond the bytes");
    }
}
