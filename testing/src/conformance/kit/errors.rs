//! An error as an operator reads it: the chain of its causes, each printed
//! once.

use std::error::Error;

/// The messages of an error and its sources, outermost first: what an
/// error chain (`{:#}` in anyhow) prints, joined with `: `.
pub fn error_chain(err: &(dyn Error + 'static)) -> Vec<String> {
    let mut messages = vec![err.to_string()];
    let mut source = err.source();
    while let Some(cause) = source {
        messages.push(cause.to_string());
        source = cause.source();
    }
    messages
}

/// Fails unless each cause in `messages` (an [`error_chain`]) is printed
/// once: a message that repeats the one below it would print it twice in
/// the chain.
pub fn assert_each_cause_once(messages: &[String]) {
    for pair in messages.windows(2) {
        assert!(
            !pair[0].contains(&pair[1]),
            "`{}` repeats its cause `{}`",
            pair[0],
            pair[1]
        );
    }
}
