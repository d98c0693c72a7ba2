//! What an operator reads of a memory store.

use std::time::SystemTime;

use tokio::time::Instant;

use super::{Inner, Slot};
use crate::key::Key;
use crate::store::{Record, RecordCount, RecordPage, RecordQuery, RecordState};
use crate::tool::ToolId;

impl Inner {
    /// A slot as an operator reads it; `now` and `wall` are the same moment
    /// on the two clocks, to turn expiry instants into times.
    pub(super) fn record(key: &Key, slot: &Slot, now: Instant, wall: SystemTime) -> Record {
        let at = |instant: Instant| match instant.checked_duration_since(now) {
            Some(ahead) => wall.checked_add(ahead),
            None => wall.checked_sub(now.saturating_duration_since(instant)),
        };
        match slot {
            Slot::Held(held) => Record {
                key: key.clone(),
                tool: held.tool.clone(),
                state: RecordState::Held,
                fingerprint: held.fingerprint,
                fence: held.fence,
                taken_over: false,
                owner: Some(u128::from(held.owner)),
                lease_until: None,
                result: None,
                completed_at: None,
                expires_at: None,
            },
            Slot::Done(done) => Record {
                key: key.clone(),
                tool: done.tool.clone(),
                state: done.finished.state,
                fingerprint: done.fingerprint,
                fence: done.fence,
                taken_over: false,
                owner: None,
                lease_until: None,
                result: Some(done.finished.value.clone()),
                completed_at: Some(done.finished.completed_at),
                expires_at: at(done.expires_at),
            },
        }
    }

    pub(super) fn list_now(&self, query: &RecordQuery) -> RecordPage {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let page = query.page_size();
        // One shard at a time, never two locks at once; sorted afterwards.
        let mut found: Vec<Record> = self
            .slots
            .iter()
            .filter(|entry| {
                query
                    .after
                    .as_deref()
                    .is_none_or(|after| entry.key().0.as_str() > after)
            })
            .map(|entry| Inner::record(&entry.key().0, entry.value(), now, wall))
            .filter(|record| query.matches(record, wall))
            .collect();
        found.sort_by(|a, b| a.key.as_str().cmp(b.key.as_str()));
        found.truncate(page + 1);
        RecordPage::from_overfetch(found, page)
    }

    pub(super) fn count_now(&self) -> Vec<RecordCount> {
        let mut counts = std::collections::BTreeMap::<(ToolId, RecordState), u64>::new();
        for entry in self.slots.iter() {
            let (tool, state) = match entry.value() {
                Slot::Held(held) => (&held.tool, RecordState::Held),
                Slot::Done(done) => (&done.tool, done.finished.state),
            };
            *counts.entry((tool.clone(), state)).or_default() += 1;
        }
        counts
            .into_iter()
            .map(|((tool, state), count)| RecordCount::new(tool, state, count))
            .collect()
    }
}
