//! The key template's grammar: literal text and `<placeholder>`s.
//!
//! ```text
//! template    = { literal | "<" placeholder ">" }
//! placeholder = name { "." ( name | index ) }      e.g. order_id, args.order_id, self.tenant, run
//! ```
//!
//! Besides the grammar, this module enforces the rules that make rendered
//! keys injective, the same ones `idempotent_tools::call::KeyBuilder` enforces at run
//! time: at least one placeholder, a separator character in every literal
//! that follows a placeholder, and no `%` in literals.

use syn::LitStr;

use crate::errors::Errors;

/// A parsed template.
pub struct Template {
    pub segments: Vec<Segment>,
}

/// One piece of a template, in order.
pub enum Segment {
    Literal(String),
    Placeholder(Placeholder),
}

/// `<root.field.field>`.
pub struct Placeholder {
    /// The text between `<` and `>`, as written.
    pub text: String,
    /// The first name: an argument, `self` or `run`.
    pub root: String,
    /// The field path after the root, if any.
    pub fields: Vec<String>,
}

impl Placeholder {
    /// `<order_id>`, for messages.
    pub fn shown(&self) -> String {
        format!("<{}>", self.text)
    }
}

/// Whether a character separates: anything but what a key part writes
/// unescaped (ASCII letters and digits, `-`, `_`, `.`, `~`). The same rule as
/// the runtime's `KeyBuilder` (its `key::is_unreserved`); the tests below
/// check that the two agree.
fn is_separator(c: char) -> bool {
    !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~'))
}

/// Reads the template. Every problem is reported at the key string.
pub fn parse(lit: &LitStr, errors: &mut Errors) -> Template {
    let span = lit.span();
    let text = lit.value();
    let mut segments = Vec::new();

    if text.is_empty() {
        errors.add(
            span,
            "the key template is empty: every call would be one action, so the second ask for \
             anything would replay the first. Key on the run and the object acted on, \
             as in `key = \"<run>:refund:<order_id>\"`",
        );
        return Template { segments };
    }

    let mut literal = String::new();
    let mut rest = text.as_str();
    while let Some(c) = rest.chars().next() {
        match c {
            '<' => {
                let inner = &rest[1..];
                let end = inner.find(['<', '>']);
                match end {
                    Some(end) if inner[end..].starts_with('>') => {
                        let content = &inner[..end];
                        if !literal.is_empty() {
                            segments.push(Segment::Literal(std::mem::take(&mut literal)));
                        }
                        match placeholder(content) {
                            Ok(p) => segments.push(Segment::Placeholder(p)),
                            Err(message) => errors.add(span, message),
                        }
                        rest = &inner[end + 1..];
                    }
                    _ => {
                        let (shown, next) = match end {
                            Some(end) => (&rest[..=end], &inner[end..]),
                            None => (rest, ""),
                        };
                        errors.add(
                            span,
                            format!(
                                "`{shown}` in the key template has no closing `>`: a placeholder \
                                 is written `<name>`, such as `<order_id>`"
                            ),
                        );
                        rest = next;
                    }
                }
            }
            '>' => {
                errors.add(
                    span,
                    "the key template has a `>` that closes no placeholder: keys reserve `<` and \
                     `>` to mark placeholders, so remove it or open one with `<`",
                );
                rest = &rest[1..];
            }
            _ => {
                literal.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    if !literal.is_empty() {
        segments.push(Segment::Literal(literal));
    }

    let template = Template { segments };
    check_structure(&template, lit, errors);
    template
}

/// Reads what is between `<` and `>`.
fn placeholder(content: &str) -> Result<Placeholder, String> {
    let allowed = "a placeholder names an argument (`<order_id>`), a field of one \
                   (`<args.order_id>`, `<self.tenant>`) or the run (`<run>`)";
    if content.is_empty() {
        return Err(format!("the key template has an empty `<>`: {allowed}"));
    }
    if content.trim() != content || content.contains(char::is_whitespace) {
        return Err(format!(
            "`<{content}>` has spaces in it: {allowed}, written without spaces"
        ));
    }
    let mut names = content.split('.');
    let root = names.next().unwrap_or_default();
    let fields: Vec<&str> = names.collect();
    let root_ok = is_ident(root);
    let fields_ok = fields
        .iter()
        .all(|f| is_ident(f) || (!f.is_empty() && f.bytes().all(|b| b.is_ascii_digit())));
    if !root_ok || !fields_ok {
        let why = if content.contains("::") {
            "globals and paths"
        } else if content.contains('(') {
            "calls"
        } else {
            "expressions"
        };
        return Err(format!(
            "`<{content}>` is not a placeholder: {allowed}. {} are not allowed, \
             so that the key is a function of the call's arguments alone",
            capitalise(why)
        ));
    }
    Ok(Placeholder {
        text: content.to_owned(),
        root: root.to_owned(),
        fields: fields.into_iter().map(str::to_owned).collect(),
    })
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn is_ident(text: &str) -> bool {
    let text = text.strip_prefix("r#").unwrap_or(text);
    let mut chars = text.chars();
    match chars.next() {
        Some(c) if c == '_' || c.is_ascii_alphabetic() => {
            text != "_" && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        }
        _ => false,
    }
}

/// The rules that keep rendered keys injective.
fn check_structure(template: &Template, lit: &LitStr, errors: &mut Errors) {
    let span = lit.span();
    let placeholders: Vec<&Placeholder> = template
        .segments
        .iter()
        .filter_map(|s| match s {
            Segment::Placeholder(p) => Some(p),
            Segment::Literal(_) => None,
        })
        .collect();
    // A template whose placeholders were all malformed has been reported.
    let malformed = lit.value().contains('<');
    if placeholders.is_empty() && !malformed {
        errors.add(
            span,
            format!(
                "the key template `{}` has no placeholder: every call would be one action, so \
                 the second ask for anything would replay the first. Key on the run and the \
                 object acted on, as in `key = \"<run>:refund:<order_id>\"`",
                lit.value()
            ),
        );
    }

    for (i, p) in placeholders.iter().enumerate() {
        if placeholders[..i].iter().any(|q| q.text == p.text) {
            // Report each repeated placeholder once.
            if placeholders[..i]
                .iter()
                .filter(|q| q.text == p.text)
                .count()
                == 1
            {
                errors.add(
                    span,
                    format!(
                        "`{}` is used twice in the key template: a part said twice adds nothing \
                         to the key; name each placeholder once",
                        p.shown()
                    ),
                );
            }
        }
    }

    let mut previous: Option<&Placeholder> = None;
    for (i, segment) in template.segments.iter().enumerate() {
        match segment {
            Segment::Placeholder(p) => {
                if let Some(prev) = previous {
                    errors.add(
                        span,
                        format!(
                            "`{}{}` puts two placeholders side by side: values `(\"1\", \"23\")` \
                             and `(\"12\", \"3\")` would render the same key. Put a separator such \
                             as `:` between them, as in `{}:{}`",
                            prev.shown(),
                            p.shown(),
                            prev.shown(),
                            p.shown()
                        ),
                    );
                }
                previous = Some(p);
            }
            Segment::Literal(text) => {
                if let Some(ch) = text.chars().find(|c| *c == '%') {
                    errors.add(
                        span,
                        format!(
                            "the literal `{text}` in the key template contains `{ch}`, which keys \
                             reserve: values are escaped with `%`, so a literal `%` could imitate \
                             an escaped value. Use another character"
                        ),
                    );
                }
                if let Some(prev) = previous
                    && !text.chars().any(is_separator)
                {
                    let next = match template.segments.get(i + 1) {
                        Some(Segment::Placeholder(next)) => Some(next),
                        _ => None,
                    };
                    let example = match next {
                        Some(next) => format!(
                            ": `{a}` = \"1{text}\" with `{b}` = \"2\", and `{a}` = \"1\" with \
                             `{b}` = \"{text}2\", would both render `1{text}{text}2`",
                            a = prev.shown(),
                            b = next.shown(),
                        ),
                        None => String::new(),
                    };
                    errors.add(
                        span,
                        format!(
                            "the literal `{text}` after `{}` has no separator character, so a \
                             value could imitate it{example}. Start it with a separator such as \
                             `:`, as in `:{text}`; letters, digits, `-`, `_`, `.` and `~` do not \
                             separate, since values write them unescaped",
                            prev.shown(),
                        ),
                    );
                }
                previous = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proc_macro2::Span;

    fn parse_str(text: &str) -> (Template, bool) {
        let mut errors = Errors::default();
        let t = parse(&LitStr::new(text, Span::call_site()), &mut errors);
        (t, errors.is_empty())
    }

    fn texts(t: &Template) -> Vec<String> {
        t.segments
            .iter()
            .map(|s| match s {
                Segment::Literal(l) => format!("'{l}'"),
                Segment::Placeholder(p) => p.shown(),
            })
            .collect()
    }

    #[test]
    fn a_template_reads_as_literals_and_placeholders() {
        let (t, ok) = parse_str("<run>:refund:<args.order_id>");
        assert!(ok);
        assert_eq!(texts(&t), ["<run>", "':refund:'", "<args.order_id>"]);
    }

    #[test]
    fn the_separator_rule_is_the_runtimes_for_every_char() {
        for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
            let runtime = idempotent_tools::__private0_1::separates(c.encode_utf8(&mut [0; 4]));
            assert_eq!(is_separator(c), runtime, "{c:?}");
        }
    }

    /// What the runtime's builder makes of `<a>` `literal` `<b>`.
    fn runtime_accepts(literal: &str) -> bool {
        idempotent_tools::call::Key::builder()
            .part("a", "1")
            .and_then(|key| key.literal(literal))
            .and_then(|key| key.part("b", "2"))
            .and_then(|key| key.finish())
            .is_ok()
    }

    proptest::proptest! {
        /// A literal between two placeholders is accepted at compile time
        /// exactly when the runtime would accept it, so that the literals
        /// the expansion appends unchecked are the ones the builder takes.
        #[test]
        fn a_literal_between_parts_is_accepted_as_the_runtime_accepts_it(
            literal in "[^<>]{1,6}",
        ) {
            let (_, ok) = parse_str(&format!("<a>{literal}<b>"));
            proptest::prop_assert_eq!(ok, runtime_accepts(&literal));
        }
    }

    #[test]
    fn the_runtime_rules_are_enforced() {
        for bad in [
            "",
            "refund",
            "<run><order_id>",
            "<run>x<order_id>",
            "<run>:50%:<order_id>",
            "<run>:<run>",
            "<run",
            "<>",
            "<a.b()>",
            "run>",
            "<run>x",
        ] {
            assert!(!parse_str(bad).1, "{bad:?} should be refused");
        }
        for good in [
            "<run>:refund:<order_id>",
            "refund/<order_id>",
            "<a>-x:<b.0>",
        ] {
            assert!(parse_str(good).1, "{good:?} should be accepted");
        }
    }
}
