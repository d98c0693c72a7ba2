// A variant is definite or unknown: any other marker, or a second one, is
// refused, and the derive is for enums.
use idempotent_tools::Classify;

#[derive(Debug, Classify)]
enum RefundError {
    #[classify(maybe)]
    Declined,
    #[classify(definite, unknown)]
    TimedOut,
}

#[derive(Debug, Classify)]
struct Timeout;

fn main() {}
