//! A flow's record-transform chain applied to a fetched batch: one call per transform per
//! batch, each transform seeing what the previous ones made of the records they kept. A
//! batch call that fails (a trap, a timeout, a malformed answer) is retried one record at a
//! time, so only the records it fails on are failed; under `on_transform_error = "pause"` a
//! partition's records after its first failed one are not asked about (its partition stops
//! at that record anyway), and past a time budget none is: those records are read again
//! later, never produced untransformed.

pub use crate::flow::telemetry::LinkTally;
use crate::policy::{ChainLink, Outcome, RecordIn, Rewritten};
use std::borrow::Cow;
use std::time::Instant;

/// What becomes of one fetched record after the whole chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Mirrored as fetched.
    Keep,
    /// Not mirrored.
    Drop,
    /// Mirrored with other contents.
    Rewrite(Rewritten),
    /// A transform failed on it: why (the transform named).
    Failed(String),
    /// Not asked about: an earlier record of its partition failed (under `pause` the
    /// partition stops there). It is never produced, only read again later.
    Unasked,
}

/// A link's answer for one record.
enum Answer {
    Outcome(Outcome),
    Failed(String),
    Unasked,
}

/// Applies `chain` to `records` (a fetched batch, each partition's records in offset order):
/// the fate of each record, in order, and what each link did. `pause`: a partition stops at
/// its first failed record, so its later records are not asked about.
pub fn apply(
    chain: &[ChainLink],
    records: &[RecordIn<'_>],
    pause: bool,
    deadline: Instant,
) -> (Vec<Fate>, Vec<LinkTally>) {
    let mut fates = vec![Fate::Keep; records.len()];
    let mut tallies = vec![LinkTally::default(); chain.len()];
    for (link, tally) in chain.iter().zip(tallies.iter_mut()) {
        let live: Vec<usize> = (0..records.len())
            .filter(|i| matches!(fates[*i], Fate::Keep | Fate::Rewrite(_)))
            .collect();
        if live.is_empty() {
            break;
        }
        let answers = ask(link, records, &fates, &live, pause, deadline, tally);
        for (i, answer) in live.into_iter().zip(answers) {
            match answer {
                Answer::Outcome(Outcome::Keep) => tally.kept += 1,
                Answer::Outcome(Outcome::Drop) => {
                    tally.dropped += 1;
                    fates[i] = Fate::Drop;
                }
                Answer::Outcome(Outcome::Rewrite(r)) => {
                    tally.rewritten += 1;
                    fates[i] = Fate::Rewrite(r);
                }
                Answer::Failed(why) => {
                    tally.failed += 1;
                    fates[i] = Fate::Failed(why);
                }
                Answer::Unasked => fates[i] = Fate::Unasked,
            }
        }
    }
    (fates, tallies)
}

/// `link`'s answer for each record of `live` as the chain so far left it.
fn ask(
    link: &ChainLink,
    records: &[RecordIn<'_>],
    fates: &[Fate],
    live: &[usize],
    pause: bool,
    deadline: Instant,
    tally: &mut LinkTally,
) -> Vec<Answer> {
    // Each record as the chain so far left it; the whole batch untouched (the first link,
    // or none before it dropped or rewrote anything) is handed over as it is.
    let untouched =
        live.len() == records.len() && !fates.iter().any(|f| matches!(f, Fate::Rewrite(_)));
    let inputs: Cow<'_, [RecordIn<'_>]> = if untouched {
        Cow::Borrowed(records)
    } else {
        live.iter()
            .map(|i| match &fates[*i] {
                Fate::Rewrite(r) => r.over(&records[*i]),
                _ => records[*i].clone(),
            })
            .collect()
    };
    match link.transform.transform(&inputs) {
        // Whatever the transform, one outcome per record or none is trusted.
        Ok(outcomes) if outcomes.len() == inputs.len() => {
            return outcomes.into_iter().map(Answer::Outcome).collect();
        }
        Ok(_) | Err(_) => tally.batch_failed = true,
    }
    // One by one: only the records it fails on are failed. Past the deadline the rest is
    // read again later.
    let mut stopped: Vec<(&str, i32)> = Vec::new();
    inputs
        .iter()
        .map(|input| {
            if stopped.contains(&(input.topic, input.partition)) || Instant::now() >= deadline {
                return Answer::Unasked;
            }
            let failed = match link.transform.transform(std::slice::from_ref(input)) {
                Ok(mut one) if one.len() == 1 => return Answer::Outcome(one.remove(0)),
                Ok(_) => format!("{}: not one outcome for one record", link.name),
                Err(e) => format!("{}: {e}", link.name),
            };
            if pause {
                stopped.push((input.topic, input.partition));
            }
            Answer::Failed(failed)
        })
        .collect()
}

#[cfg(test)]
mod tests;
