//! Reads a topic as a `read_committed` consumer should see it, at the protocol level. This
//! Tansu build hands aborted records to `read_committed` readers (its Fetch responses carry
//! no aborted-transactions list, so librdkafka cannot drop them), so a test counting what
//! an exactly-once mirror wrote reads the raw record batches itself (with the
//! `kafka-protocol` crate, not librdkafka and not kmirror's code) and keeps a
//! transactional record only once a COMMIT marker of its producer follows it; records
//! followed by an ABORT marker are dropped (and counted), records of a transaction still
//! open are left out.

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kafka_protocol::records::RecordBatchDecoder;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const FETCH_VERSION: i16 = 11;

/// What a partition holds once aborted transactions are taken out.
#[derive(Debug, Default)]
pub struct Committed {
    /// Values of committed (or non-transactional) records, in offset order.
    pub values: Vec<Vec<u8>>,
    /// Their offsets.
    pub offsets: Vec<i64>,
    /// Records of aborted transactions.
    pub aborted_records: usize,
    /// Transactions aborted (ABORT markers).
    pub aborts: usize,
    /// Transactions committed (COMMIT markers).
    pub commits: usize,
    /// Records of transactions with no marker yet.
    pub open_records: usize,
    /// How many of `values` were written inside a (committed) transaction.
    pub transactional: usize,
}

fn fetch(
    stream: &mut TcpStream,
    topic: &str,
    partition: i32,
    offset: i64,
    id: i32,
) -> (i64, Vec<kafka_protocol::records::Record>) {
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Fetch as i16)
        .with_request_api_version(FETCH_VERSION)
        .with_correlation_id(id)
        .with_client_id(Some(StrBytes::from_static_str("kmirror-test-reader")));
    let request = FetchRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_max_wait_ms(100)
        .with_min_bytes(1)
        .with_max_bytes(8 << 20)
        .with_isolation_level(0)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(partition)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(4 << 20),
                ]),
        ]);
    let mut body = bytes::BytesMut::new();
    header
        .encode(&mut body, FetchRequest::header_version(FETCH_VERSION))
        .expect("encode header");
    request
        .encode(&mut body, FETCH_VERSION)
        .expect("encode fetch");
    stream
        .write_all(&(body.len() as i32).to_be_bytes())
        .and_then(|_| stream.write_all(&body))
        .expect("send fetch");
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).expect("response length");
    let mut buf = vec![0u8; i32::from_be_bytes(len) as usize];
    stream.read_exact(&mut buf).expect("response");
    let mut buf = bytes::Bytes::from(buf);
    ResponseHeader::decode(&mut buf, FetchResponse::header_version(FETCH_VERSION))
        .expect("response header");
    let response = FetchResponse::decode(&mut buf, FETCH_VERSION).expect("fetch response");
    let data = &response.responses[0].partitions[0];
    // UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER: a topic just
    // created, its leader not elected yet (the callers poll): nothing to read yet.
    if matches!(data.error_code, 3 | 5 | 6) {
        return (0, Vec::new());
    }
    assert_eq!(data.error_code, 0, "fetch {topic}[{partition}] at {offset}");
    let mut records = Vec::new();
    if let Some(mut raw) = data.records.clone() {
        for set in RecordBatchDecoder::decode_all(&mut raw).expect("record batches") {
            records.extend(set.records);
        }
    }
    (data.high_watermark, records)
}

/// Reads `topic`/`partition` on the broker at `addr` to its end.
pub fn read_committed(addr: &str, topic: &str, partition: i32) -> Committed {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut records = Vec::new();
    let mut offset = 0i64;
    for id in 0.. {
        let (high, batch) = fetch(&mut stream, topic, partition, offset, id);
        let before = offset;
        for r in batch {
            if r.offset >= offset {
                offset = r.offset + 1;
                records.push(r);
            }
        }
        if offset >= high || offset == before {
            break;
        }
    }
    let mut out = Committed::default();
    let mut pending: BTreeMap<i64, Vec<(i64, Vec<u8>)>> = BTreeMap::new();
    for r in records {
        if r.control {
            // A control record's key: version (i16), type (i16): 0 ABORT, 1 COMMIT.
            let kind = r
                .key
                .as_ref()
                .filter(|k| k.len() >= 4)
                .map(|k| i16::from_be_bytes([k[2], k[3]]));
            let held = pending.remove(&r.producer_id).unwrap_or_default();
            match kind {
                Some(1) => {
                    out.commits += 1;
                    out.transactional += held.len();
                    for (offset, value) in held {
                        out.offsets.push(offset);
                        out.values.push(value);
                    }
                }
                _ => {
                    out.aborts += 1;
                    out.aborted_records += held.len();
                }
            }
        } else if r.transactional {
            pending
                .entry(r.producer_id)
                .or_default()
                .push((r.offset, r.value.map(|v| v.to_vec()).unwrap_or_default()));
        } else {
            out.offsets.push(r.offset);
            out.values
                .push(r.value.map(|v| v.to_vec()).unwrap_or_default());
        }
    }
    out.open_records = pending.values().map(Vec::len).sum();
    out
}
