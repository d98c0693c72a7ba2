//! Reading a key back from its text: the form every rendered key has.
//!
//! A key is a template's literals (any character but `%`, `<` and `>`) and
//! its values' escaped text (unreserved bytes as they are, every other byte
//! as `%XX` in upper-case hex, each value UTF-8). Two values are never side
//! by side, so each run of escapes belongs to one value and spells whole
//! characters.

use super::KeyTextProblem;
use super::part::is_unreserved;

/// Checks that `text` is a key a template renders, or says what is first
/// wrong with it.
pub(super) fn check(text: &str) -> Result<(), KeyTextProblem> {
    if text.is_empty() {
        return Err(KeyTextProblem::Empty);
    }
    let bytes = text.as_bytes();
    // The bytes of the run of escapes being read, and where it started.
    let mut escaped: Vec<u8> = Vec::new();
    let mut run_start = 0;
    let mut at = 0;
    let mut any_value = false;
    while let Some(&b) = bytes.get(at) {
        any_value |= b == b'%' || is_unreserved(b);
        if b == b'%' {
            let byte = escape(bytes, at)?;
            if escaped.is_empty() {
                run_start = at;
            }
            escaped.push(byte);
            at += 3;
            continue;
        }
        end_of_run(&mut escaped, run_start)?;
        if matches!(b, b'<' | b'>') {
            return Err(KeyTextProblem::Reserved {
                at,
                ch: char::from(b),
            });
        }
        at += 1;
    }
    end_of_run(&mut escaped, run_start)?;
    if !any_value {
        return Err(KeyTextProblem::NoValue);
    }
    Ok(())
}

/// The byte the escape at `at` spells.
fn escape(bytes: &[u8], at: usize) -> Result<u8, KeyTextProblem> {
    let digits = bytes
        .get(at + 1..at + 3)
        .filter(|d| d.iter().all(u8::is_ascii_hexdigit))
        .ok_or(KeyTextProblem::BrokenEscape { at })?;
    if digits.iter().any(u8::is_ascii_lowercase) {
        return Err(KeyTextProblem::LowerCaseEscape { at });
    }
    let value = |d: u8| match d {
        b'0'..=b'9' => d - b'0',
        _ => d - b'A' + 10,
    };
    let byte = value(digits[0]) << 4 | value(digits[1]);
    if is_unreserved(byte) {
        return Err(KeyTextProblem::NeedlessEscape {
            at,
            ch: char::from(byte),
        });
    }
    Ok(byte)
}

/// Checks that a run of escapes spells UTF-8, and starts the next one.
fn end_of_run(escaped: &mut Vec<u8>, run_start: usize) -> Result<(), KeyTextProblem> {
    if std::str::from_utf8(escaped).is_err() {
        return Err(KeyTextProblem::NotUtf8 { at: run_start });
    }
    escaped.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendered_keys_are_read_as_they_are() {
        for text in [
            "run-7:refund:1182",
            "run-7:refund:1182%3Arefund%3A7",
            "run:caf%C3%A9",
            "refund/1182 for café",
            "x",
        ] {
            assert_eq!(check(text), Ok(()), "{text:?}");
        }
    }

    #[test]
    fn text_no_template_renders_is_refused_with_its_first_problem() {
        use KeyTextProblem::*;
        for (text, problem) in [
            ("", Empty),
            (":/:", NoValue),
            ("é", NoValue),
            ("run:<order_id>", Reserved { at: 4, ch: '<' }),
            ("run>", Reserved { at: 3, ch: '>' }),
            ("50%", BrokenEscape { at: 2 }),
            ("50%zz", BrokenEscape { at: 2 }),
            ("a%3a", LowerCaseEscape { at: 1 }),
            ("a%41", NeedlessEscape { at: 1, ch: 'A' }),
            ("a%7E", NeedlessEscape { at: 1, ch: '~' }),
            ("caf%C3", NotUtf8 { at: 3 }),
            ("x:%C3:%A9", NotUtf8 { at: 2 }),
            ("x%FF", NotUtf8 { at: 1 }),
        ] {
            assert_eq!(check(text), Err(problem), "{text:?}");
        }
    }
}
