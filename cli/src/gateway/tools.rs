//! The guarded tools: each configured tool checked against the upstream's
//! listing, with its key template, fingerprint rules and policy.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use idempotent_tools::Run;
use idempotent_tools::call::names;
use idempotent_tools::call::{Fingerprint, FingerprintError, Key, Policy, Takeover, ToolId};
use rmcp::model::Tool;
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use super::config::{TakeoverName, ToolConfig, ToolErrors};
use super::template::{Marks, RenderError, Template, check, closest};

/// A tool the gateway guards.
pub struct GuardedTool {
    /// The tool's id in the store: its upstream name.
    pub id: ToolId,
    template: Template,
    /// Top-level properties left out of the fingerprint.
    free_text: Vec<String>,
    /// The schema's top-level defaults, so that leaving an argument out
    /// and sending its default are one ask.
    defaults: Map<String, Value>,
    /// The call's policy.
    pub policy: Policy,
    /// What the tool's `isError: true` means.
    pub tool_errors: ToolErrors,
}

impl GuardedTool {
    /// The call's key.
    pub fn key(&self, run: &Run, arguments: &Map<String, Value>) -> Result<Key, RenderError> {
        self.template.render(run, arguments)
    }

    /// The fingerprint of the arguments: the schema's defaults filled in,
    /// the free text left out, objects in the order of their keys.
    pub fn fingerprint(
        &self,
        arguments: &Map<String, Value>,
    ) -> Result<Fingerprint, FingerprintError> {
        let mut asked = arguments.clone();
        for (name, default) in &self.defaults {
            match asked.get(name) {
                None | Some(Value::Null) => {
                    asked.insert(name.clone(), default.clone());
                }
                Some(_) => {}
            }
        }
        for path in &self.free_text {
            remove_path(&mut asked, path);
        }
        let asked = Value::Object(asked);
        Ok(Fingerprint::builder()
            .arg("arguments", &Canonical(&asked))?
            .finish())
    }
}

fn remove_path(object: &mut Map<String, Value>, path: &str) {
    match path.split_once('.') {
        None => {
            object.remove(path);
        }
        Some((head, rest)) => {
            if let Some(Value::Object(inner)) = object.get_mut(head) {
                remove_path(inner, rest);
            }
        }
    }
}

/// A JSON value with every object's members in the order of their names,
/// whatever order the client sent them in.
struct Canonical<'a>(&'a Value);

impl Serialize for Canonical<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(map) => {
                let sorted: BTreeMap<&String, Canonical<'_>> =
                    map.iter().map(|(k, v)| (k, Canonical(v))).collect();
                sorted.serialize(serializer)
            }
            Value::Array(items) => {
                let items: Vec<Canonical<'_>> = items.iter().map(Canonical).collect();
                items.serialize(serializer)
            }
            other => other.serialize(serializer),
        }
    }
}

/// The tools as the last check left them.
#[derive(Default)]
pub struct Tools {
    guarded: HashMap<String, Arc<GuardedTool>>,
    /// Configured tools that failed a re-check, with why: refused, never
    /// passed through unguarded.
    refused: HashMap<String, String>,
}

/// What a `tools/call` of a name meets.
pub enum Route {
    /// Guarded.
    Guarded(Arc<GuardedTool>),
    /// Configured, but its check failed: refused with this message.
    Refused(String),
    /// Not configured: passed through.
    PassThrough,
}

impl Tools {
    /// Checks every configured tool against the upstream's listing.
    /// Returns the tools, and every problem found (a configured tool that
    /// is not listed, a template the schema refuses), each in one message.
    pub fn check(configs: &BTreeMap<String, ToolConfig>, listed: &[Tool]) -> (Tools, Vec<String>) {
        let mut tools = Tools::default();
        let mut problems = Vec::new();
        for (name, config) in configs {
            match check_tool(name, config, listed) {
                Ok(tool) => {
                    tools.guarded.insert(name.clone(), Arc::new(tool));
                }
                Err(found) => {
                    tools.refused.insert(name.clone(), found.join("; "));
                    problems.extend(found);
                }
            }
        }
        (tools, problems)
    }

    /// Where a call of `name` goes.
    pub fn route(&self, name: &str) -> Route {
        if let Some(tool) = self.guarded.get(name) {
            return Route::Guarded(tool.clone());
        }
        match self.refused.get(name) {
            Some(why) => Route::Refused(why.clone()),
            None => Route::PassThrough,
        }
    }

    /// Whether `name` is guarded.
    pub fn is_guarded(&self, name: &str) -> bool {
        self.guarded.contains_key(name)
    }

    /// Whether `name` is configured but refused.
    pub fn is_refused(&self, name: &str) -> bool {
        self.refused.contains_key(name)
    }
}

fn check_tool(
    name: &str,
    config: &ToolConfig,
    listed: &[Tool],
) -> Result<GuardedTool, Vec<String>> {
    let Some(tool) = listed.iter().find(|tool| tool.name == name) else {
        let names: Vec<&str> = listed.iter().map(|tool| tool.name.as_ref()).collect();
        let hint = match closest(&names, name) {
            Some(candidate) => format!("; did you mean `[tools.{candidate}]`?"),
            None => format!(" (it lists {})", names.join(", ")),
        };
        return Err(vec![format!(
            "[tools.{name}] names no tool of the upstream{hint}"
        )]);
    };
    let mut template = Template::parse(&config.key)
        .map_err(|problem| vec![format!("tool `{name}`: {problem}")])?;
    let marks = Marks {
        tool: name,
        free_text: &config.free_text,
        identifiers: &config.identifiers,
    };
    let schema = tool.input_schema.as_ref();
    let problems = check(&mut template, schema, &marks);
    if !problems.is_empty() {
        return Err(problems);
    }
    // The fingerprint leaves out what the file marks, and the top-level
    // properties named as the model's wording that it does not vouch for.
    let mut free_text = config.free_text.clone();
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for property in properties.keys() {
            if names::is_free_text(property)
                && !config.identifiers.contains(property)
                && !free_text.contains(property)
            {
                free_text.push(property.clone());
            }
        }
    }
    let defaults = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| {
            properties
                .iter()
                .filter_map(|(name, property)| {
                    let default = property.get("default").filter(|d| !d.is_null())?;
                    Some((name.clone(), default.clone()))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut policy = Policy::default();
    if let Some(lease) = config.lease {
        policy.lease = lease;
    }
    if let Some(wait) = config.wait {
        policy.wait = wait;
    }
    if let Some(retention) = config.retention {
        policy.retention = retention;
    }
    policy.takeover = match config.takeover {
        TakeoverName::ReportUnknown => Takeover::ReportUnknown,
        TakeoverName::Rerun => Takeover::Rerun,
    };
    Ok(GuardedTool {
        id: ToolId::from(name.to_owned()),
        template,
        free_text,
        defaults,
        policy,
        tool_errors: config.tool_errors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_fingerprint_ignores_order_defaults_and_free_text() {
        let config: ToolConfig = toml::from_str("key = \"<run>:refund:<order_id>\"").unwrap();
        let schema = json!({
            "type": "object",
            "properties": {
                "order_id": {"type": "string"},
                "amount_cents": {"type": "integer"},
                "currency": {"type": "string", "default": "usd"},
                "reason": {"type": "string"}
            },
            "required": ["order_id", "amount_cents"]
        });
        let tool = Tool::new(
            "refund_order",
            "",
            Arc::new(schema.as_object().unwrap().clone()),
        );
        let guarded =
            check_tool("refund_order", &config, &[tool]).unwrap_or_else(|p| panic!("{p:?}"));
        let print = |args: Value| guarded.fingerprint(args.as_object().unwrap()).unwrap();
        let first = print(json!({"order_id": "1", "amount_cents": 42, "reason": "asked"}));
        assert_eq!(
            first,
            print(
                json!({"reason": "asked again", "currency": "usd", "amount_cents": 42, "order_id": "1"})
            )
        );
        assert_ne!(first, print(json!({"order_id": "1", "amount_cents": 41})));
    }
}
