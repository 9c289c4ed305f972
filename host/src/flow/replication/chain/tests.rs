use super::*;
use crate::policy::{PluginError, RecordTransform};
use std::sync::{Arc, Mutex};

/// A scripted transform: `rule` per record, failing (as a trap would) on any batch holding
/// a record whose value is `poison`; it records the batch sizes it was called with.
struct Scripted {
    rule: fn(&RecordIn<'_>) -> Outcome,
    calls: Mutex<Vec<usize>>,
}

impl RecordTransform for Scripted {
    fn transform(&self, records: &[RecordIn<'_>]) -> Result<Vec<Outcome>, PluginError> {
        self.calls.lock().unwrap().push(records.len());
        if records.iter().any(|r| r.value == Some(b"poison")) {
            return Err(PluginError::Trap {
                plugin: "scripted".into(),
                function: "transform",
                kind: crate::policy::TrapKind::Unreachable,
                message: "poison".into(),
                output: String::new(),
            });
        }
        Ok(records.iter().map(|r| (self.rule)(r)).collect())
    }
}

/// A deadline far away.
fn later() -> std::time::Instant {
    std::time::Instant::now() + std::time::Duration::from_secs(600)
}

fn link(name: &str, rule: fn(&RecordIn<'_>) -> Outcome) -> (ChainLink, Arc<Scripted>) {
    let t = Arc::new(Scripted {
        rule,
        calls: Mutex::default(),
    });
    (
        ChainLink {
            name: name.into(),
            transform: t.clone(),
        },
        t,
    )
}

fn record<'a>(partition: i32, offset: i64, value: &'a [u8]) -> RecordIn<'a> {
    RecordIn {
        topic: "orders",
        partition,
        offset,
        timestamp: 0,
        key: None,
        value: Some(value),
        headers: vec![],
    }
}

fn upper(r: &RecordIn<'_>) -> Outcome {
    Outcome::Rewrite(Rewritten {
        key: r.key.map(<[u8]>::to_vec),
        value: r.value.map(<[u8]>::to_ascii_uppercase),
        headers: vec![("seen".into(), None)],
    })
}

#[test]
fn each_link_is_called_once_per_batch_and_sees_what_the_previous_made() {
    let (drop_b, first) = link("drop-b", |r| {
        if r.value == Some(b"b") {
            Outcome::Drop
        } else {
            Outcome::Keep
        }
    });
    let (up, second) = link("upper", upper);
    let (check, third) = link("check", |r| {
        // Sees the rewritten value and header of the link before.
        assert_eq!(r.headers, vec![("seen", None)]);
        assert!(r.value.is_some_and(|v| v == v.to_ascii_uppercase()));
        if r.value == Some(b"C") {
            Outcome::Keep
        } else {
            Outcome::Drop
        }
    });
    let records = [record(0, 0, b"a"), record(0, 1, b"b"), record(1, 5, b"c")];
    let (fates, tallies) = apply(&[drop_b, up, check], &records, true, later());
    assert_eq!(fates[0], Fate::Drop, "dropped by the third");
    assert_eq!(fates[1], Fate::Drop, "dropped by the first");
    match &fates[2] {
        Fate::Rewrite(r) => assert_eq!(r.value.as_deref(), Some(&b"C"[..])),
        other => panic!("{other:?}"),
    }
    assert_eq!(*first.calls.lock().unwrap(), vec![3]);
    assert_eq!(
        *second.calls.lock().unwrap(),
        vec![2],
        "only what the first kept"
    );
    assert_eq!(*third.calls.lock().unwrap(), vec![2]);
    assert_eq!((tallies[0].kept, tallies[0].dropped), (2, 1));
    assert_eq!(tallies[1].rewritten, 2);
    assert_eq!((tallies[2].kept, tallies[2].dropped), (1, 1));
}

#[test]
fn a_failed_batch_is_asked_again_record_by_record() {
    let (up, t) = link("upper", upper);
    let records = [
        record(0, 0, b"a"),
        record(0, 1, b"poison"),
        record(0, 2, b"b"),
        record(1, 0, b"c"),
    ];
    // Skip: only the poison record fails; every other record is transformed.
    let (fates, tallies) = apply(std::slice::from_ref(&up), &records, false, later());
    assert!(
        matches!(&fates[1], Fate::Failed(why) if why.starts_with("upper: ")),
        "{fates:?}"
    );
    for i in [0, 2, 3] {
        assert!(matches!(fates[i], Fate::Rewrite(_)), "{i}: {fates:?}");
    }
    assert_eq!(*t.calls.lock().unwrap(), vec![4, 1, 1, 1, 1]);
    assert!(tallies[0].batch_failed);
    assert_eq!((tallies[0].rewritten, tallies[0].failed), (3, 1));

    // Pause: the poison record's partition stops there, so its later records are not
    // asked about; other partitions go on.
    let (up, t) = link("upper", upper);
    let (fates, _) = apply(std::slice::from_ref(&up), &records, true, later());
    assert!(matches!(fates[0], Fate::Rewrite(_)));
    assert!(matches!(fates[1], Fate::Failed(_)));
    assert_eq!(fates[2], Fate::Unasked, "after the failed one");
    assert!(matches!(fates[3], Fate::Rewrite(_)), "another partition");
    assert_eq!(*t.calls.lock().unwrap(), vec![4, 1, 1, 1]);
}

#[test]
fn no_chain_keeps_everything_and_a_fully_dropped_batch_stops_early() {
    let records = [record(0, 0, b"a")];
    let (fates, tallies) = apply(&[], &records, true, later());
    assert_eq!(fates, vec![Fate::Keep]);
    assert!(tallies.is_empty());
    let (all, _) = link("all", |_| Outcome::Drop);
    let (after, t) = link("after", |_| Outcome::Keep);
    let (fates, _) = apply(&[all, after], &records, true, later());
    assert_eq!(fates, vec![Fate::Drop]);
    assert!(
        t.calls.lock().unwrap().is_empty(),
        "nothing left to ask about"
    );
}

#[test]
fn a_short_answer_is_not_trusted_and_past_the_deadline_nothing_is_asked() {
    /// Answers one outcome too few for a batch (a native transform the host cannot check).
    struct Short;
    impl RecordTransform for Short {
        fn transform(&self, records: &[RecordIn<'_>]) -> Result<Vec<Outcome>, PluginError> {
            Ok(vec![
                Outcome::Drop;
                records
                    .len()
                    .saturating_sub(1)
                    .max(usize::from(records.len() == 1))
            ])
        }
    }
    let short = ChainLink {
        name: "short".into(),
        transform: Arc::new(Short),
    };
    let records = [record(0, 0, b"a"), record(0, 1, b"b")];
    let (fates, tallies) = apply(std::slice::from_ref(&short), &records, true, later());
    assert_eq!(fates, vec![Fate::Drop, Fate::Drop], "asked one by one");
    assert!(tallies[0].batch_failed);

    let (up, t) = link("upper", upper);
    let records = [record(0, 0, b"poison"), record(1, 0, b"b")];
    let (fates, _) = apply(
        std::slice::from_ref(&up),
        &records,
        false,
        std::time::Instant::now(),
    );
    assert_eq!(
        fates,
        vec![Fate::Unasked, Fate::Unasked],
        "read again later"
    );
    assert_eq!(*t.calls.lock().unwrap(), vec![2]);
}
