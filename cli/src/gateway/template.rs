//! Key templates over a tool's JSON arguments: read from the configuration,
//! checked against the upstream's input schema at start (the attribute's
//! compile-time checks, moved to run time), and rendered per call.
//!
//! A placeholder is `<run>` or a dotted path into the arguments
//! (`<order_id>`, `<customer.id>`). A path may name a string, an integer
//! or a boolean that every call carries (required, or with a default);
//! never the model's free text, a call id, a float, an object or an array.

use std::collections::BTreeSet;
use std::sync::Arc;

use idempotent_tools::Run;
use idempotent_tools::call::names;
use idempotent_tools::call::{Key, KeyError};
use serde_json::{Map, Value};

/// A template, read.
#[derive(Debug)]
pub struct Template {
    text: String,
    segments: Vec<Segment>,
}

#[derive(Debug)]
enum Segment {
    Literal(String),
    Run,
    Field(Field),
}

/// How the builder names an argument's part; the errors it could say it in
/// are told by [`RenderError`] with the placeholder instead.
const ARGUMENT: &str = "argument";

/// A placeholder that names an argument.
#[derive(Debug)]
pub struct Field {
    /// As written: `customer.id`.
    shown: Arc<str>,
    path: Vec<String>,
    /// Each step's default from the schema, filled in by the check.
    defaults: Vec<Option<Value>>,
}

impl Template {
    /// Reads `text`, refusing what no call could render.
    pub fn parse(text: &str) -> Result<Template, String> {
        let example = "as in `key = \"<run>:refund:<order_id>\"`";
        if text.is_empty() {
            return Err(format!(
                "the key template is empty: every call would be one action, so the second ask \
                 for anything would replay the first. Key on the run and the object acted on, \
                 {example}"
            ));
        }
        let mut segments = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            match rest.find(['<', '>']) {
                None => {
                    segments.push(Segment::Literal(rest.to_owned()));
                    rest = "";
                }
                Some(at) if rest.as_bytes()[at] == b'>' => {
                    return Err(format!(
                        "the key template `{text}` has a `>` that closes no placeholder: write \
                         placeholders as `<name>`, {example}"
                    ));
                }
                Some(at) => {
                    if at > 0 {
                        segments.push(Segment::Literal(rest[..at].to_owned()));
                    }
                    let after = &rest[at + 1..];
                    let Some(end) = after.find('>') else {
                        return Err(format!(
                            "the key template `{text}` has a `<` that is never closed: write \
                             placeholders as `<name>`, {example}"
                        ));
                    };
                    segments.push(placeholder(text, &after[..end])?);
                    rest = &after[end + 1..];
                }
            }
        }
        let template = Template {
            text: text.to_owned(),
            segments,
        };
        template.check_structure()?;
        Ok(template)
    }

    fn fields_mut(&mut self) -> impl Iterator<Item = &mut Field> {
        self.segments
            .iter_mut()
            .filter_map(|segment| match segment {
                Segment::Field(field) => Some(field),
                _ => None,
            })
    }

    /// The runtime's rules, which every rendered key must keep: a separator
    /// between two placeholders, no reserved character, at least one
    /// placeholder. Checked by rendering it with stand-in values.
    fn check_structure(&self) -> Result<(), String> {
        let mut builder = Key::builder();
        for segment in &self.segments {
            builder = match segment {
                Segment::Literal(text) => builder.literal(text),
                Segment::Run | Segment::Field(_) => builder.part("placeholder", "x"),
            }
            .map_err(|err| self.structure_error(&err))?;
        }
        builder
            .finish()
            .map(drop)
            .map_err(|err| self.structure_error(&err))
    }

    fn structure_error(&self, err: &KeyError) -> String {
        match err {
            KeyError::NoParts => format!(
                "the key template `{}` has no placeholder: every call would be one action, so \
                 the second ask for anything would replay the first. Key on the run and the \
                 object acted on, as in `key = \"<run>:refund:<order_id>\"`",
                self.text
            ),
            KeyError::AdjacentParts { .. } | KeyError::NoSeparator { .. } => format!(
                "the key template `{}` puts two placeholders together without a separator \
                 between them, so two different asks could render the same key (`1` `23` and \
                 `12` `3`): put a character such as `:` between them",
                self.text
            ),
            other => format!("the key template `{}`: {other}", self.text),
        }
    }

    /// Renders the key of one call: the run and the arguments' values,
    /// with the schema's defaults for arguments left out.
    pub fn render(&self, run: &Run, arguments: &Map<String, Value>) -> Result<Key, RenderError> {
        let mut builder = Key::builder();
        for segment in &self.segments {
            builder = match segment {
                Segment::Literal(text) => builder.literal(text).map_err(RenderError::Key),
                Segment::Run => builder.part("run", run).map_err(RenderError::Key),
                Segment::Field(field) => {
                    let value = field.value(arguments)?;
                    let kind = |kind| RenderError::Kind {
                        field: field.shown.clone(),
                        kind,
                    };
                    // The builder names a part by static text; an empty
                    // value is told by the placeholder below.
                    let part = match value {
                        Value::String(text) => builder.part(ARGUMENT, text.as_str()),
                        Value::Bool(flag) => builder.part(ARGUMENT, &flag),
                        Value::Number(number) => match (number.as_i64(), number.as_u64()) {
                            (Some(n), _) => builder.part(ARGUMENT, &n),
                            (None, Some(n)) => builder.part(ARGUMENT, &n),
                            (None, None) => return Err(kind("a number with a fraction")),
                        },
                        other => return Err(kind(kind_of(other))),
                    };
                    part.map_err(|err| match err {
                        KeyError::EmptyPart { .. } => RenderError::Empty {
                            field: field.shown.clone(),
                        },
                        other => RenderError::Key(other),
                    })
                }
            }?;
        }
        builder.finish().map_err(RenderError::Key)
    }
}

/// Reads `<...>`: the run, or a dotted path of names.
fn placeholder(text: &str, inside: &str) -> Result<Segment, String> {
    if inside == "run" {
        return Ok(Segment::Run);
    }
    let path: Vec<String> = inside.split('.').map(str::to_owned).collect();
    if inside.is_empty() || path.iter().any(String::is_empty) || inside.contains('<') {
        return Err(format!(
            "the key template `{text}` has a placeholder `<{inside}>` that names nothing: a \
             placeholder is `<run>` or a property of the tool's arguments, with `.` between the \
             names of nested properties (`<order_id>`, `<customer.id>`)"
        ));
    }
    let defaults = vec![None; path.len()];
    Ok(Segment::Field(Field {
        shown: Arc::from(inside),
        path,
        defaults,
    }))
}

impl Field {
    fn value<'a>(&'a self, arguments: &'a Map<String, Value>) -> Result<&'a Value, RenderError> {
        let mut object = arguments;
        let mut value = None;
        for (step, (name, default)) in self.path.iter().zip(&self.defaults).enumerate() {
            let found = match object.get(name) {
                Some(Value::Null) | None => default.as_ref(),
                Some(found) => Some(found),
            };
            let Some(found) = found else {
                return Err(RenderError::Missing {
                    field: self.shown.clone(),
                });
            };
            if step + 1 < self.path.len() {
                let Value::Object(inner) = found else {
                    return Err(RenderError::Kind {
                        field: self.shown.clone(),
                        kind: kind_of(found),
                    });
                };
                object = inner;
            }
            value = Some(found);
        }
        value.ok_or(RenderError::Missing {
            field: self.shown.clone(),
        })
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Why a call's key could not be rendered. The call was refused: nothing
/// reached the upstream.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The arguments lack a value the key is made of.
    #[error(
        "the argument `{field}` is missing, and the tool's key is made of it; nothing was done"
    )]
    Missing {
        /// The placeholder.
        field: Arc<str>,
    },
    /// An empty string, which names nothing.
    #[error(
        "the argument `{field}` is empty, and the tool's key is made of it: an empty value \
         names no object; nothing was done"
    )]
    Empty {
        /// The placeholder.
        field: Arc<str>,
    },
    /// A value that cannot name an action.
    #[error(
        "the argument `{field}` is {kind}, and a key is made of strings, integers and booleans; \
         nothing was done"
    )]
    Kind {
        /// The placeholder.
        field: Arc<str>,
        /// What it is instead.
        kind: &'static str,
    },
    /// A key the runtime's rules refuse.
    #[error("{0}; nothing was done")]
    Key(#[source] KeyError),
}

/// What the configuration says of a tool's arguments, beyond its key.
pub struct Marks<'a> {
    /// The tool, as messages name it.
    pub tool: &'a str,
    /// Paths that are the model's wording.
    pub free_text: &'a [String],
    /// Paths whose names read as free text but are ids.
    pub identifiers: &'a [String],
}

impl Marks<'_> {
    fn vouched(&self, path: &str) -> bool {
        self.identifiers.iter().any(|id| id == path)
    }
}

/// Checks every placeholder of `template` against the tool's input schema,
/// filling in the schema's defaults; returns every refusal, each a message
/// that names the tool, the placeholder, why, and what to write.
pub fn check(
    template: &mut Template,
    schema: &Map<String, Value>,
    marks: &Marks<'_>,
) -> Vec<String> {
    let root = Value::Object(schema.clone());
    let text = template.text.clone();
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for field in template.fields_mut() {
        if !seen.insert(field.shown.clone()) {
            continue;
        }
        if let Err(problem) = check_field(&root, field, marks) {
            problems.push(format!("tool `{}`, key `{text}`: {problem}", marks.tool));
        }
    }
    problems
}

fn check_field(root: &Value, field: &mut Field, marks: &Marks<'_>) -> Result<(), String> {
    let shown = field.shown.clone();
    let table = format!("[tools.{}]", marks.tool);
    // Names first: they are wrong whatever the schema says.
    for name in &field.path {
        if let Some(id) = names::call_id(name) {
            return Err(format!(
                "`<{shown}>` is {}: {}, new on every call, so a retry would get a new key and \
                 act again. Key on the run and the object acted on, such as \
                 `<run>:refund:<order_id>`",
                id.what, id.source
            ));
        }
    }
    if marks.free_text.iter().any(|path| **path == *shown) {
        return Err(format!(
            "`<{shown}>` is the model's free text (`free_text` in {table} lists it): worded anew \
             on each ask, so two asks for one action would get two keys and the action would \
             run twice. Key on ids instead, such as `<run>:refund:<order_id>`"
        ));
    }
    if !marks.vouched(&shown)
        && let Some(word) = field.path.iter().find(|name| names::is_free_text(name))
    {
        return Err(format!(
            "`<{shown}>` reads like model-authored free text: `{word}` is a name that almost \
             always carries the model's own wording, which it words anew on each ask, so two \
             asks for one action would get two keys and the action would run twice. Key on ids \
             instead, such as `<run>:refund:<order_id>`; if `{shown}` really is an id, add \
             `identifiers = [\"{shown}\"]` to {table}"
        ));
    }
    let mut object = resolve(root, root);
    let last = field.path.len() - 1;
    for step in 0..field.path.len() {
        let name = &field.path[step];
        let walked = field.path[..=step].join(".");
        let properties = object.get("properties").and_then(Value::as_object);
        let Some(property) = properties.and_then(|properties| properties.get(name)) else {
            let known: Vec<&str> = properties
                .map(|properties| properties.keys().map(String::as_str).collect())
                .unwrap_or_default();
            let hint = match closest(&known, name) {
                Some(candidate) => {
                    let mut path = field.path[..step].to_vec();
                    path.push(candidate.to_owned());
                    format!("; did you mean `<{}>`?", path.join("."))
                }
                None if known.is_empty() => String::new(),
                None => format!(" (it has {})", quoted(&known)),
            };
            return Err(format!(
                "`<{shown}>` names no property of the tool's input schema: `{walked}` is not \
                 there{hint}"
            ));
        };
        let property = resolve(root, property);
        let required = object
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|required| required.iter().any(|r| r.as_str() == Some(name)));
        let default = property.get("default").filter(|d| !d.is_null()).cloned();
        if !required && default.is_none() {
            return Err(format!(
                "`<{shown}>` is optional in the tool's input schema and has no default: a call \
                 that leaves `{walked}` out has nothing to key on, and one that sends it gets \
                 another key for the same ask. Key on a required property, or on one whose \
                 schema gives a `default`"
            ));
        }
        field.defaults[step] = default;
        let kinds = types(root, property);
        if step < last {
            if !kinds.is_empty() && !kinds.contains("object") {
                return Err(format!(
                    "`<{shown}>` goes into `{walked}`, which is {} in the tool's input schema, \
                     not an object",
                    kinds_text(&kinds)
                ));
            }
            object = property;
            continue;
        }
        if kinds.contains("number") {
            return Err(format!(
                "`<{shown}>` is a JSON number, which may be a float: one amount can be written \
                 several ways (`0.1 + 0.2` is not `0.3`), so one ask could get two keys and the \
                 action would run twice. Key on integer minor units such as cents (`\"type\": \
                 \"integer\"`), or leave the amount out of the key: the fingerprint covers it"
            ));
        }
        if let Some(kind) = ["object", "array", "null"]
            .into_iter()
            .find(|kind| kinds.contains(kind))
        {
            return Err(format!(
                "`<{shown}>` may be {} ({kind} in the tool's input schema), and a key is made \
                 of strings, integers and booleans: key on an id inside it, such as \
                 `<{shown}.id>`",
                if kind == "array" {
                    "an array"
                } else if kind == "object" {
                    "an object"
                } else {
                    "null"
                }
            ));
        }
    }
    Ok(())
}

/// The name among `candidates` that `name` most likely misspells, if one is
/// close enough to suggest.
pub fn closest<'a>(candidates: &[&'a str], name: &str) -> Option<&'a str> {
    candidates
        .iter()
        .map(|candidate| (strsim::jaro_winkler(candidate, name), *candidate))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

/// Follows a local `$ref` (`#/$defs/Name`, `#/definitions/Name`).
fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    let mut schema = schema;
    for _ in 0..16 {
        let Some(reference) = schema.get("$ref").and_then(Value::as_str) else {
            return schema;
        };
        let Some(pointer) = reference.strip_prefix('#') else {
            return schema;
        };
        match root.pointer(pointer) {
            Some(target) => schema = target,
            None => return schema,
        }
    }
    schema
}

/// The JSON types a schema allows: its `type`, or its variants' (`anyOf`,
/// `oneOf`). Empty when it says nothing.
fn types<'a>(root: &'a Value, schema: &'a Value) -> BTreeSet<&'a str> {
    let mut kinds = BTreeSet::new();
    match schema.get("type") {
        Some(Value::String(kind)) => {
            kinds.insert(kind.as_str());
        }
        Some(Value::Array(list)) => kinds.extend(list.iter().filter_map(Value::as_str)),
        _ => {}
    }
    for union in ["anyOf", "oneOf"] {
        if let Some(variants) = schema.get(union).and_then(Value::as_array) {
            for variant in variants {
                kinds.extend(types(root, resolve(root, variant)));
            }
        }
    }
    kinds
}

fn kinds_text(kinds: &BTreeSet<&str>) -> String {
    kinds.iter().copied().collect::<Vec<_>>().join(" or ")
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|name| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Map<String, Value> {
        json!({
            "type": "object",
            "properties": {
                "order_id": {"type": "string"},
                "amount_cents": {"type": "integer"},
                "amount": {"type": "number"},
                "reason": {"type": "string"},
                "memo": {"type": "string"},
                "currency": {"type": "string", "default": "usd"},
                "tool_call_id": {"type": "string"},
                "customer": {"$ref": "#/$defs/Customer"},
                "items": {"type": "array"}
            },
            "required": ["order_id", "amount_cents", "amount", "reason", "tool_call_id", "customer", "items"],
            "$defs": {"Customer": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}
        })
        .as_object()
        .unwrap()
        .clone()
    }

    fn problems(key: &str, free_text: &[&str], identifiers: &[&str]) -> Vec<String> {
        let mut template = Template::parse(key).unwrap();
        let free_text: Vec<String> = free_text.iter().map(|s| s.to_string()).collect();
        let identifiers: Vec<String> = identifiers.iter().map(|s| s.to_string()).collect();
        let marks = Marks {
            tool: "refund_order",
            free_text: &free_text,
            identifiers: &identifiers,
        };
        check(&mut template, &schema(), &marks)
    }

    #[test]
    fn good_templates_pass_and_render() {
        assert!(problems("<run>:refund:<order_id>:<currency>:<customer.id>", &[], &[]).is_empty());
        let mut template = Template::parse("<run>:refund:<order_id>:<currency>").unwrap();
        let marks = Marks {
            tool: "t",
            free_text: &[],
            identifiers: &[],
        };
        assert!(check(&mut template, &schema(), &marks).is_empty());
        let run = Run::new("r").unwrap();
        let args = json!({"order_id": "11 82"});
        let key = template.render(&run, args.as_object().unwrap()).unwrap();
        assert_eq!(key.as_str(), "r:refund:11%2082:usd");
        let refused = |args: Value| {
            template
                .render(&run, args.as_object().unwrap())
                .unwrap_err()
                .to_string()
        };
        assert!(refused(json!({"order_id": ""})).contains("`order_id` is empty"));
        assert!(refused(json!({})).contains("`order_id` is missing"));
        assert!(refused(json!({"order_id": 1.5})).contains("a number with a fraction"));
        assert!(refused(json!({"order_id": ["1"]})).contains("an array"));
        let key = template.render(
            &run,
            json!({"order_id": 7, "currency": "eur"})
                .as_object()
                .unwrap(),
        );
        assert_eq!(key.unwrap().as_str(), "r:refund:7:eur");
    }

    #[test]
    fn each_refusal_names_why() {
        let one = |key: &str, free: &[&str], ids: &[&str]| {
            let mut found = problems(key, free, ids);
            assert_eq!(found.len(), 1, "{found:?}");
            found.remove(0)
        };
        assert!(one("<run>:<order>", &[], &[]).contains("did you mean `<order_id>`?"));
        assert!(one("<run>:<reason>", &[], &[]).contains("reads like model-authored free text"));
        assert!(problems("<run>:<reason>", &[], &["reason"]).is_empty());
        assert!(one("<run>:<order_id>", &["order_id"], &[]).contains("`free_text`"));
        assert!(one("<run>:<tool_call_id>", &[], &[]).contains("a tool-call id"));
        assert!(one("<run>:<amount>", &[], &[]).contains("JSON number"));
        assert!(one("<run>:<memo>", &[], &["memo"]).contains("optional"));
        assert!(one("<run>:<items>", &[], &[]).contains("an array"));
    }

    #[test]
    fn malformed_templates_are_refused() {
        for (key, says) in [
            ("", "empty"),
            ("refund", "no placeholder"),
            ("<run><order_id>", "without a separator"),
            ("<run>:<order_id", "never closed"),
            ("<run>:<>", "names nothing"),
            ("<run>:a>b", "closes no placeholder"),
        ] {
            let err = Template::parse(key).unwrap_err();
            assert!(err.contains(says), "{key}: {err}");
        }
    }
}
