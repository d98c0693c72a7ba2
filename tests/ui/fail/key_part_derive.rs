// `#[derive(KeyPart)]` is for newtypes and fieldless enums; free text inside
// a newtype is still refused by the runtime's `KeyPart` bound.
use idempotent_tools::{FreeText, KeyPart};

#[derive(KeyPart)]
struct Pair(u64, u64);

#[derive(KeyPart)]
struct Nothing;

#[derive(KeyPart)]
enum Action {
    Refund {
        order_id: u64,
    },
    #[key_part(rename = "")]
    Cancel,
    #[key_part(name = "x")]
    Hold,
}

#[derive(KeyPart)]
struct Reason(FreeText<String>);

fn main() {}
