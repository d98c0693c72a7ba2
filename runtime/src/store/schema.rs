//! Schema versions of the durable stores.
//!
//! Each store keeps its schema as a list of scripts, one per version, each
//! idempotent. A database records the versions applied in the
//! `idempotent_schema` table (version 1 predates it: a claims table without
//! it is version 1). Opening or migrating applies the scripts a database
//! lacks, in order, in one transaction; a database newer than the code is
//! refused, since this code could break records it does not understand.

use super::{StoreError, StoreResult};

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 3;

/// The scripts to run on a database at version `found` to bring it to
/// [`SCHEMA_VERSION`]: none if it is current, an error if it is newer, or
/// if it has no schema and `create` is false.
pub(crate) fn upgrades<'a>(
    scripts: &'a [&'a str],
    found: u32,
    create: bool,
) -> StoreResult<&'a [&'a str]> {
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found == 0 && !create {
        return Err(StoreError::MissingSchema);
    }
    let from = usize::try_from(found).unwrap_or(usize::MAX);
    Ok(scripts.get(from..).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPTS: [&str; 3] = ["v1", "v2", "v3"];

    #[test]
    fn every_earlier_version_gets_the_scripts_after_it() {
        assert_eq!(
            upgrades(&SCRIPTS, 0, true).expect("new"),
            ["v1", "v2", "v3"]
        );
        assert_eq!(upgrades(&SCRIPTS, 1, true).expect("v1"), ["v2", "v3"]);
        assert_eq!(upgrades(&SCRIPTS, 2, true).expect("v2"), ["v3"]);
        assert!(upgrades(&SCRIPTS, 3, false).expect("current").is_empty());
    }

    #[test]
    fn a_newer_schema_is_refused_and_a_missing_one_is_created_only_when_asked() {
        assert!(matches!(
            upgrades(&SCRIPTS, 4, true),
            Err(StoreError::SchemaTooNew {
                found: 4,
                supported: 3
            })
        ));
        assert!(matches!(
            upgrades(&SCRIPTS, 0, false),
            Err(StoreError::MissingSchema)
        ));
    }
}
