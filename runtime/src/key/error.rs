//! Why a key could not be built or read.

/// Why a key could not be built. Each variant names the part at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// A part rendered as empty text. An empty value would merge with its
    /// neighbours (`run::refund:`), so two different asks could share a key.
    #[error(
        "key part `{part}` is empty; an empty value would make `a::b` keys that different asks share. \
         Check the value before the call, or key on a field that is always set"
    )]
    EmptyPart {
        /// The name of the part.
        part: &'static str,
    },
    /// Two parts with no separating literal between them: `<a><b>` cannot
    /// tell `("1", "23")` from `("12", "3")`.
    #[error(
        "key part `{part}` follows another part with no separator; `<a><b>` keys are ambiguous. \
         Put a literal such as `:` between them"
    )]
    AdjacentParts {
        /// The name of the second part.
        part: &'static str,
    },
    /// A literal between two parts has no separator character, so a value
    /// could imitate it.
    #[error(
        "literal `{literal}` between two key parts has no separator character \
         (anything other than letters, digits, `-`, `_`, `.` and `~`), so a value could imitate it. \
         Add one, as in `:refund:`"
    )]
    NoSeparator {
        /// The offending literal.
        literal: String,
    },
    /// A literal contains a character reserved by the key syntax.
    #[error(
        "literal `{literal}` contains `{ch}`, which keys reserve (`%` escapes values, `<` and `>` mark parts)"
    )]
    ReservedChar {
        /// The offending literal.
        literal: String,
        /// The reserved character.
        ch: char,
    },
    /// `<run>` outside any run scope: a key without its run would merge the
    /// same action from different runs. The guard reports it as
    /// [`Error::MissingRun`](crate::Error::MissingRun).
    #[error(
        "no run in scope for the key's run part; enter one with `Run::scope(..)` or pass the run \
         as an argument"
    )]
    NoRun,
    /// A key with no part at all would make every call the same action.
    #[error(
        "a key needs at least one part; a key of fixed text makes every call one action. \
         Key on the run and the object acted on, as in `<run>:refund:<order_id>`"
    )]
    NoParts,
    /// Text given to [`Key::parse`](crate::call::Key::parse) that no template
    /// renders.
    #[error("`{text}` is not a key that a template renders: {problem}")]
    Unrenderable {
        /// The text given.
        text: String,
        /// The first thing wrong with it.
        problem: KeyTextProblem,
    },
}

/// What makes a text no key a template renders. Positions are byte offsets
/// into the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyTextProblem {
    /// Every key holds at least one non-empty part.
    #[error("it is empty; a key holds at least one value")]
    Empty,
    /// Literal text alone: every key holds at least one value, written as
    /// letters, digits, `-_.~` or escapes.
    #[error(
        "it holds no value, only separators; a key holds at least one value, written as \
         letters, digits, `-`, `_`, `.`, `~` or `%` escapes"
    )]
    NoValue,
    /// `<` or `>`, which mark a template's placeholders and never stay in a key.
    #[error(
        "`{ch}` at byte {at} marks a placeholder, which a rendered key has filled in; \
         give the key as `list` or `Key::as_str` prints it"
    )]
    Reserved {
        /// Where.
        at: usize,
        /// Which.
        ch: char,
    },
    /// A `%` that does not start an escape (`%` and two hex digits).
    #[error(
        "the `%` at byte {at} is not followed by two hex digits; a key writes `%` only to \
         escape a byte of a value, as in `%3A`"
    )]
    BrokenEscape {
        /// Where the `%` is.
        at: usize,
    },
    /// An escape in lower-case hex: keys write upper case, so this is the
    /// spelling of no key.
    #[error(
        "the escape at byte {at} is in lower-case hex; keys write upper case (`%3A`, not `%3a`)"
    )]
    LowerCaseEscape {
        /// Where the `%` is.
        at: usize,
    },
    /// An escape of a character a value writes as it is: a second spelling
    /// of another key.
    #[error(
        "the escape at byte {at} spells `{ch}`, which keys write unescaped; \
         write `{ch}` in its place"
    )]
    NeedlessEscape {
        /// Where the `%` is.
        at: usize,
        /// The character escaped.
        ch: char,
    },
    /// Escapes whose bytes are not UTF-8, which no value's text is.
    #[error("the escapes from byte {at} do not spell UTF-8 text, which every value is")]
    NotUtf8 {
        /// Where the first `%` of the escapes is.
        at: usize,
    },
}
