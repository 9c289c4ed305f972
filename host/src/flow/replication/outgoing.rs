//! A fetched record on its way to the target: what the record-transform chain's [`Fate`]
//! makes of it, as the record to produce (shared by both delivery modes).

use super::chain::Fate;
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::BaseRecord;

/// What a fetched record becomes on its way to the target, as the chain left it.
pub enum Outgoing<'a> {
    /// The record to produce, and its key and value bytes.
    Record(BaseRecord<'a, [u8], [u8], usize>, usize),
    /// A transform dropped it.
    Drop,
    /// A transform failed on it: why.
    Failed(&'a str),
    /// Not asked about: it is read again later, never produced untransformed.
    Unasked,
}

/// `msg` as `fate` leaves it, bound for `partition` of `target` with `opaque` (key, value,
/// headers and timestamp preserved unless rewritten).
pub fn outgoing<'a>(
    msg: &'a BorrowedMessage<'_>,
    fate: &'a Fate,
    target: &'a str,
    partition: i32,
    opaque: usize,
) -> Outgoing<'a> {
    let mut record: BaseRecord<'a, [u8], [u8], usize> =
        BaseRecord::with_opaque_to(target, opaque).partition(partition);
    let size = match fate {
        Fate::Keep => {
            if let Some(k) = msg.key() {
                record = record.key(k);
            }
            if let Some(v) = msg.payload() {
                record = record.payload(v);
            }
            if let Some(h) = msg.headers()
                && h.count() > 0
            {
                record = record.headers(h.detach());
            }
            msg.payload_len() + msg.key().map_or(0, <[u8]>::len)
        }
        Fate::Rewrite(r) => {
            if let Some(k) = &r.key {
                record = record.key(k.as_slice());
            }
            if let Some(v) = &r.value {
                record = record.payload(v.as_slice());
            }
            if !r.headers.is_empty() {
                let mut headers = OwnedHeaders::new_with_capacity(r.headers.len());
                for (name, value) in &r.headers {
                    headers = headers.insert(Header {
                        key: name,
                        value: value.as_deref(),
                    });
                }
                record = record.headers(headers);
            }
            r.key.as_ref().map_or(0, Vec::len) + r.value.as_ref().map_or(0, Vec::len)
        }
        Fate::Drop => return Outgoing::Drop,
        Fate::Failed(reason) => return Outgoing::Failed(reason),
        Fate::Unasked => return Outgoing::Unasked,
    };
    if let Some(ts) = msg.timestamp().to_millis() {
        record = record.timestamp(ts);
    }
    Outgoing::Record(record, size)
}
