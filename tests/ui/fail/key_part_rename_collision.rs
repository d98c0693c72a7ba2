// Two variants that write one key part: a rename equal to another variant's
// name, and two renames to one text. A CAD refund would then render the USD
// refund's key and get its result back.
use idempotent_tools::KeyPart;

#[derive(KeyPart)]
enum Currency {
    Usd,
    #[key_part(rename = "Usd")]
    Cad,
}

#[derive(KeyPart)]
enum Action {
    #[key_part(rename = "hold")]
    Pause,
    #[key_part(rename = "hold")]
    Freeze,
    Refund,
}

fn main() {}
