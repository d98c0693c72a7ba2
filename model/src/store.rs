//! One key in one store: the protocol's four steps on plain data.
//!
//! This is what every store in `idempotent-tools` promises for a single key
//! (see `Store` in `idempotent_tools::store`), written as a value that the
//! model checker copies at every state and that the agreement test asks
//! beside a real store. Time is a logical clock of ticks; a lease runs out
//! when the clock reaches its end.

/// Who holds a claim: a new owner for every claim a store grants.
pub type Owner = u32;

/// A claim's fence: 1 for a first claim, one more at each takeover.
pub type Fence = u32;

/// The logical clock, in ticks.
pub type Tick = u32;

/// A request's arguments, as a small number: two claims with the same
/// number are the same request, two with different numbers conflict.
pub type Args = u8;

/// A recorded result, as a small number: in the checked system, the owner
/// whose action produced it.
pub type Value = u32;

/// How a finished action ended: the three completed states of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ending {
    /// The action succeeded; its result is replayed.
    Done,
    /// The action failed with an error its tool records; the error is
    /// replayed.
    Failed,
    /// The action's outcome is not known (a takeover under the
    /// report-unknown policy, or an action that failed in a way that may
    /// have taken effect, when nobody could tell whether it did); repeats
    /// are told so.
    Unknown,
}

/// Whether leases run out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Leases {
    /// A lease runs out when the clock reaches its end, and a claim whose
    /// lease ran out is taken over (the durable stores).
    Expire,
    /// A lease never runs out: the holder lives in the store's process, and
    /// a crash takes the store with it (the memory store).
    Never,
}

/// A mistake planted in the protocol, to show that the properties catch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flaw {
    /// A completion is accepted from any holder of the key, whatever its
    /// owner and fence: a stale holder's result overwrites the current one.
    CompletionIgnoresFence,
    /// A claim reads the key, and writes the claim in a second step: two
    /// callers both see it free, and both act.
    CheckThenAct,
    /// A holder that goes away without completing leaves its claim behind
    /// (no release on drop or failure).
    NoReleaseOnDrop,
    /// A verification trusts the provider's "not applied" at once, before
    /// the settle time has passed: a lookup that lags reads as the action
    /// not having happened.
    UnsettledNotApplied,
    /// A call dropped while the provider is asked (after its action failed
    /// in a way that may have taken effect, or on a takeover) releases its
    /// claim, as a call dropped while its action runs does: the next claim
    /// acts, though the provider never said the action was not applied.
    ReleaseOnUnknown,
}

/// A claim held: who, at which fence, for which request, until when.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Held {
    /// The holder.
    pub owner: Owner,
    /// Its fence.
    pub fence: Fence,
    /// The request it holds the key for.
    pub args: Args,
    /// The tick at which its lease runs out.
    pub lease_until: Tick,
}

/// A completed record: who wrote it, for which request, and what.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Recorded {
    /// The holder that completed it.
    pub owner: Owner,
    /// That holder's fence.
    pub fence: Fence,
    /// The request it answers.
    pub args: Args,
    /// How the action ended.
    pub ending: Ending,
    /// The result (or recorded error).
    pub value: Value,
}

/// What the store holds under the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Slot {
    /// Nothing: the key was never claimed, or its claim was released.
    Absent,
    /// A claim.
    Held(Held),
    /// A completed record.
    Completed(Recorded),
}

/// A held claim as its holder knows it: what completion, release and renew
/// present to the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClaimRef {
    /// The holder.
    pub owner: Owner,
    /// Its fence.
    pub fence: Fence,
}

/// The store's answer to a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// The caller holds the claim and must act.
    Claimed {
        /// The claim's fence.
        fence: Fence,
        /// Whether it took over a claim whose lease ran out.
        taken_over: bool,
    },
    /// Another caller holds a live claim for the same request.
    InFlight,
    /// The key's record, for the same request.
    Completed {
        /// How the action ended.
        ending: Ending,
        /// Its result.
        value: Value,
    },
    /// The key was used for other arguments.
    Conflict {
        /// The first request's result, if it is done.
        first: Option<Value>,
    },
}

/// A completion, release or renew from a holder whose claim is no longer
/// current: nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeaseLost;

/// One key of one store, and the clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyStore {
    /// What the key holds.
    pub slot: Slot,
    /// The clock.
    pub now: Tick,
    /// Whether leases run out.
    pub leases: Leases,
    /// A planted mistake, if any.
    pub flaw: Option<Flaw>,
}

impl KeyStore {
    /// An empty key at tick 0.
    pub fn new(leases: Leases) -> KeyStore {
        KeyStore {
            slot: Slot::Absent,
            now: 0,
            leases,
            flaw: None,
        }
    }

    /// The same store with a planted mistake.
    pub fn with_flaw(self, flaw: Option<Flaw>) -> KeyStore {
        KeyStore { flaw, ..self }
    }

    /// Whether a held claim's lease has run out.
    pub fn lease_passed(&self, held: &Held) -> bool {
        self.leases == Leases::Expire && held.lease_until <= self.now
    }

    fn lease_end(&self, lease: Tick) -> Tick {
        self.now.saturating_add(lease)
    }

    /// Claims the key for `owner`, atomically, with a lease of `lease`
    /// ticks: the key is free, taken over, in flight, completed, or used
    /// for other arguments.
    pub fn claim(&mut self, owner: Owner, args: Args, lease: Tick) -> Answer {
        let lease_until = self.lease_end(lease);
        match self.slot {
            Slot::Absent => {
                self.slot = Slot::Held(Held {
                    owner,
                    fence: 1,
                    args,
                    lease_until,
                });
                Answer::Claimed {
                    fence: 1,
                    taken_over: false,
                }
            }
            Slot::Held(held) if held.args != args => Answer::Conflict { first: None },
            Slot::Held(held) if self.lease_passed(&held) => {
                let fence = held.fence + 1;
                self.slot = Slot::Held(Held {
                    owner,
                    fence,
                    args,
                    lease_until,
                });
                Answer::Claimed {
                    fence,
                    taken_over: true,
                }
            }
            Slot::Held(_) => Answer::InFlight,
            Slot::Completed(record) if record.args != args => Answer::Conflict {
                first: (record.ending == Ending::Done).then_some(record.value),
            },
            Slot::Completed(record) => Answer::Completed {
                ending: record.ending,
                value: record.value,
            },
        }
    }

    /// Whether the key is free to claim, as the first half of a claim that
    /// checks, then acts (the planted [`Flaw::CheckThenAct`]).
    pub fn looks_free(&self) -> bool {
        matches!(self.slot, Slot::Absent)
    }

    /// The second half of a claim that checks, then acts: the claim is
    /// written whatever the key holds now.
    pub fn write_claim(&mut self, owner: Owner, args: Args, lease: Tick) -> Answer {
        self.slot = Slot::Held(Held {
            owner,
            fence: 1,
            args,
            lease_until: self.lease_end(lease),
        });
        Answer::Claimed {
            fence: 1,
            taken_over: false,
        }
    }

    fn holds(&self, claim: ClaimRef) -> Option<Held> {
        match self.slot {
            Slot::Held(held) if held.owner == claim.owner && held.fence == claim.fence => {
                Some(held)
            }
            _ => None,
        }
    }

    /// Records the action's end under a claim: only its current holder may,
    /// and the same holder again (a completion whose reply was lost).
    ///
    /// # Errors
    ///
    /// [`LeaseLost`] if the claim is no longer the key's current one.
    pub fn complete(
        &mut self,
        claim: ClaimRef,
        ending: Ending,
        value: Value,
    ) -> Result<(), LeaseLost> {
        let args = match self.slot {
            Slot::Held(held) if self.holds(claim).is_some() => held.args,
            Slot::Completed(record)
                if record.owner == claim.owner && record.fence == claim.fence =>
            {
                return Ok(());
            }
            Slot::Held(held) if self.flaw == Some(Flaw::CompletionIgnoresFence) => held.args,
            Slot::Completed(record) if self.flaw == Some(Flaw::CompletionIgnoresFence) => {
                record.args
            }
            _ => return Err(LeaseLost),
        };
        self.slot = Slot::Completed(Recorded {
            owner: claim.owner,
            fence: claim.fence,
            args,
            ending,
            value,
        });
        Ok(())
    }

    /// Gives the claim up, so that the next claim acts.
    ///
    /// # Errors
    ///
    /// [`LeaseLost`] if the claim is no longer the key's current one.
    pub fn release(&mut self, claim: ClaimRef) -> Result<(), LeaseLost> {
        self.holds(claim).ok_or(LeaseLost)?;
        self.slot = Slot::Absent;
        Ok(())
    }

    /// Renews the claim's lease to `lease` ticks from now. A claim whose
    /// lease ran out, but that nobody took over, is still its holder's.
    ///
    /// # Errors
    ///
    /// [`LeaseLost`] if the claim is no longer the key's current one.
    pub fn renew(&mut self, claim: ClaimRef, lease: Tick) -> Result<(), LeaseLost> {
        let held = self.holds(claim).ok_or(LeaseLost)?;
        self.slot = Slot::Held(Held {
            lease_until: self.lease_end(lease),
            ..held
        });
        Ok(())
    }

    /// Moves the clock one tick on.
    pub fn tick(&mut self) {
        self.now += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_past_its_lease_is_taken_over_and_its_holder_is_fenced_out() {
        let mut store = KeyStore::new(Leases::Expire);
        assert_eq!(
            store.claim(1, 0, 1),
            Answer::Claimed {
                fence: 1,
                taken_over: false
            }
        );
        assert_eq!(store.claim(2, 0, 1), Answer::InFlight);
        store.tick();
        assert_eq!(
            store.claim(2, 0, 1),
            Answer::Claimed {
                fence: 2,
                taken_over: true
            }
        );
        let stale = ClaimRef { owner: 1, fence: 1 };
        assert_eq!(store.complete(stale, Ending::Done, 1), Err(LeaseLost));
        assert_eq!(store.release(stale), Err(LeaseLost));
        assert_eq!(store.renew(stale, 5), Err(LeaseLost));
        let current = ClaimRef { owner: 2, fence: 2 };
        assert_eq!(store.complete(current, Ending::Done, 2), Ok(()));
        assert_eq!(store.complete(current, Ending::Done, 2), Ok(()));
        assert_eq!(
            store.claim(3, 0, 1),
            Answer::Completed {
                ending: Ending::Done,
                value: 2
            }
        );
        assert_eq!(store.claim(4, 1, 1), Answer::Conflict { first: Some(2) });
    }

    #[test]
    fn a_lease_never_runs_out_where_leases_do_not_expire() {
        let mut store = KeyStore::new(Leases::Never);
        store.claim(1, 0, 0);
        store.tick();
        assert_eq!(store.claim(2, 0, 0), Answer::InFlight);
    }
}
