//! The built binary, run as an operator runs it.

use std::process::{Command, Stdio};

use serde_json::Value;

/// The binary Cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_idempotent-tools");

/// What a run of the binary left.
#[derive(Debug)]
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// Its stdout, read as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("JSON on stdout ({e}): {self:?}"))
    }

    /// Itself, once its exit code is `code`.
    pub fn expect(self, code: i32) -> Ran {
        assert_eq!(self.code, code, "exit code: {self:?}");
        self
    }
}

/// Runs the binary against `store`, with no terminal on stdin.
pub fn cli(store: &str, args: &[&str]) -> Ran {
    let out = Command::new(BIN)
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("IDEMPOTENT_STORE")
        .stdin(Stdio::null())
        .output()
        .expect("run the binary");
    Ran {
        code: out.status.code().expect("an exit code"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
