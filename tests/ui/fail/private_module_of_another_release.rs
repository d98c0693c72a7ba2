// A facade of another release has the public API, but the private module
// of its own release (`__private0_2`), not the `__private0_1` this
// release's macro expands into: the pair fails to compile, naming the
// missing module, instead of calling functions whose meaning has changed.
//
// This crate stands in for that facade, under the name the macro looks up.
extern crate idempotent_tools as released;
extern crate self as idempotent_tools;

pub use released::{Error, KeyPart, Outcome, Run, call, idempotent};

#[doc(hidden)]
pub mod __private0_2 {
    pub use released::__private0_1::*;
}

#[derive(Debug)]
enum PayError {
    Idempotency(Error),
}

impl From<Error> for PayError {
    fn from(error: Error) -> PayError {
        PayError::Idempotency(error)
    }
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_order(run: Run, order_id: u64) -> Result<Outcome<u64>, PayError> {
    Ok(order_id)
}

fn main() {}
