//! The request's tool definitions, as the parsers need them: names, and the JSON
//! schema of each parameter so XML-style values can be typed.

use serde_json::Value;

/// One OpenAI function tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    pub name: String,
    /// The `parameters` JSON schema (`{}` when absent).
    pub parameters: Value,
}

/// The tools a request declared.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tools {
    defs: Vec<ToolDef>,
}

impl Tools {
    /// From a JSON array of OpenAI tool definitions (`{"type":"function","function":{...}}`);
    /// bare function objects (`{"name":..,"parameters":..}`) are accepted too.
    pub fn from_value(value: &Value) -> Result<Self, String> {
        let Some(items) = value.as_array() else {
            return Err("tools must be a JSON array".into());
        };
        let mut defs = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let function = item.get("function").unwrap_or(item);
            let Some(name) = function.get("name").and_then(Value::as_str) else {
                return Err(format!("tools[{i}] has no function name"));
            };
            defs.push(ToolDef {
                name: name.to_owned(),
                parameters: function
                    .get("parameters")
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Default::default())),
            });
        }
        Ok(Self { defs })
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, String> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        Self::from_value(&value)
    }

    pub fn is_empty(&self) -> bool {
        self.defs.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<&ToolDef> {
        self.defs.iter().find(|d| d.name == name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &ToolDef> {
        self.defs.iter()
    }
}
