//! [`JsonSchema`]: a tool's (or an agent's) JSON Schema, compiled once, and a value's violations
//! in words the model can act on.

use serde_json::Value;

/// A JSON Schema compiled once (draft 2020-12 by default; no remote `$ref`s), to validate
/// values against it.
pub struct JsonSchema {
    schemas: boon::Schemas,
    index: boon::SchemaIndex,
}

impl std::fmt::Debug for JsonSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JsonSchema")
    }
}

impl JsonSchema {
    /// Compiles `schema`; the error is the compiler's message.
    pub fn compile(schema: &Value) -> Result<JsonSchema, String> {
        let mut compiler = boon::Compiler::new();
        compiler.use_loader(Box::new(boon::SchemeUrlLoader::new()));
        compiler.set_default_draft(boon::Draft::V2020_12);
        let mut schemas = boon::Schemas::new();
        let url = "urn:baton:schema";
        compiler.add_resource(url, schema.clone()).map_err(|e| format!("{e:#}"))?;
        let index = compiler.compile(url, &mut schemas).map_err(|e| format!("{e:#}"))?;
        Ok(JsonSchema { schemas, index })
    }

    /// Checks `value`; the error names each violation and where it is.
    pub fn validate(&self, value: &Value) -> Result<(), String> {
        self.schemas.validate(value, self.index).map_err(|e| schema_violations(&e))
    }
}

/// The leaf violations of a validation error, one per line part: `at '/limit': must be >= 1`.
fn schema_violations(error: &boon::ValidationError<'_, '_>) -> String {
    fn leaves(e: &boon::ValidationError<'_, '_>, out: &mut Vec<String>) {
        if e.causes.is_empty() {
            let at = e.instance_location.to_string();
            let at = if at.is_empty() { "the arguments".to_owned() } else { format!("'{at}'") };
            out.push(format!("at {at}: {}", e.kind));
        }
        for cause in &e.causes {
            leaves(cause, out);
        }
    }
    let mut out = Vec::new();
    leaves(error, &mut out);
    out.join("; ")
}
