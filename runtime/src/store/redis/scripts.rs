//! The store's steps as Lua scripts: each runs atomically on the server, so
//! no step is a check in one round trip followed by an act in another.
//!
//! The scripts are loaded once when the store connects and called by their
//! SHA-1 (`EVALSHA`). A server that forgot them (a restart, a failover, a
//! `SCRIPT FLUSH`) answers `NOSCRIPT`; the store then loads the script again
//! and repeats the call (up to [`MAX_RELOADS`] times).

use std::sync::LazyLock;

/// How many times one call loads its script again before giving up: more
/// than once only if the server keeps forgetting (flushes racing the call).
pub(super) const MAX_RELOADS: usize = 3;

/// One script: its name in errors, its text, and its hash.
pub(super) struct Script {
    /// The step it performs, as errors name it.
    pub(super) name: &'static str,
    /// The Lua text, for `SCRIPT LOAD`.
    pub(super) source: &'static str,
    /// Its SHA-1 in hex, for `EVALSHA`.
    pub(super) hash: String,
}

impl Script {
    fn new(name: &'static str, source: &'static str) -> Script {
        let hash = redis::Script::new(source).get_hash().to_owned();
        Script { name, source, hash }
    }
}

/// Every script the store runs.
pub(super) struct Scripts {
    pub(super) claim: Script,
    pub(super) complete: Script,
    pub(super) release: Script,
    pub(super) renew: Script,
    pub(super) forget: Script,
    pub(super) resolve: Script,
    pub(super) read: Script,
}

impl Scripts {
    /// Each script, for loading them all at once.
    pub(super) fn all(&self) -> [&Script; 7] {
        [
            &self.claim,
            &self.complete,
            &self.release,
            &self.renew,
            &self.forget,
            &self.resolve,
            &self.read,
        ]
    }
}

/// The scripts, hashed once per process.
pub(super) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    claim: Script::new("claim", include_str!("claim.lua")),
    complete: Script::new("complete", include_str!("complete.lua")),
    release: Script::new("release", include_str!("release.lua")),
    renew: Script::new("renew", include_str!("renew.lua")),
    forget: Script::new("forget", include_str!("forget.lua")),
    resolve: Script::new("resolve", include_str!("resolve.lua")),
    read: Script::new("read", include_str!("read.lua")),
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_has_a_distinct_hash() {
        let mut hashes: Vec<_> = SCRIPTS.all().iter().map(|s| s.hash.clone()).collect();
        hashes.sort();
        hashes.dedup();
        assert_eq!(hashes.len(), 7);
        assert!(hashes.iter().all(|h| h.len() == 40));
    }

    #[test]
    fn times_are_taken_from_the_server_clock() {
        for script in [&SCRIPTS.claim, &SCRIPTS.renew] {
            assert!(
                script.source.contains("redis.call('TIME')"),
                "{}",
                script.name
            );
        }
        // A completion's expiry counts from the server's now.
        assert!(SCRIPTS.complete.source.contains("redis.call('PEXPIRE', "));
    }
}
