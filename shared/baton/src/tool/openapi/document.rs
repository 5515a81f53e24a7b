//! An OpenAPI 3.0 document read and turned into operations: each one's method, path template,
//! parameters and JSON body, and the JSON Schema of the arguments a model gives it.
//!
//! Local `$ref`s (`#/components/...`) are resolved: parameters and request bodies in place, and
//! schemas as `$defs` of the tool's schema (`#/components/schemas/Pet` becomes `#/$defs/Pet`), so
//! recursive schemas stay finite. A reference to another file is an error.

use std::collections::BTreeMap;

use openapiv3::{OpenAPI, Parameter, ParameterSchemaOrContent, ReferenceOr, RequestBody};
use serde_json::{Map, Value, json};

/// Where a parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Location {
    Path,
    Query,
    Header,
}

/// One parameter of an operation.
#[derive(Debug, Clone)]
pub(super) struct Param {
    pub(super) name: String,
    pub(super) location: Location,
}

/// One operation, ready to call.
#[derive(Debug, Clone)]
pub(super) struct Operation {
    pub(super) id: String,
    pub(super) method: reqwest::Method,
    /// The path template (`/pet/{petId}`).
    pub(super) path: String,
    pub(super) params: Vec<Param>,
    /// The argument holding the JSON body, when the operation takes one.
    pub(super) body: Option<String>,
    pub(super) description: String,
    pub(super) schema: Value,
}

/// The argument a request body is given in (unless a parameter has that name).
const BODY_ARGUMENT: &str = "body";

/// Parses `text` (YAML or JSON) as an OpenAPI 3.0 document.
pub(super) fn parse(text: &str) -> Result<OpenAPI, String> {
    let raw: Value =
        serde_yaml_ng::from_str(text).map_err(|e| format!("it is neither YAML nor JSON: {e}"))?;
    let version = raw.get("openapi").and_then(Value::as_str).unwrap_or_default();
    if !version.starts_with("3.") {
        return Err(format!(
            "it is not an OpenAPI 3 document (its `openapi` field is {})",
            if version.is_empty() { "missing".to_owned() } else { format!("`{version}`") }
        ));
    }
    serde_json::from_value(raw).map_err(|e| format!("it is not a valid OpenAPI document: {e}"))
}

/// The document's operations: every one (each must have an `operationId`), or the ones `only`
/// names (each must exist and take a JSON body if any).
pub(super) fn operations(doc: &OpenAPI, only: Option<&[String]>) -> Result<Vec<Operation>, String> {
    let mut found = Vec::new();
    for (path, item) in doc.paths.iter() {
        let ReferenceOr::Item(item) = item else {
            return Err(format!("the path `{path}` is a `$ref`, which is not supported"));
        };
        for (method, op) in item.iter() {
            let Some(id) = op.operation_id.clone() else {
                if only.is_none() {
                    return Err(format!(
                        "the operation {} {path} has no operationId: add one, or list the operations to offer in `operations:`",
                        method.to_uppercase()
                    ));
                }
                continue;
            };
            if only.is_some_and(|only| !only.contains(&id)) {
                continue;
            }
            let explicit = only.is_some();
            let params = item.parameters.iter().chain(&op.parameters);
            match operation(doc, &id, method, path, op, params) {
                Ok(op) => found.push(op),
                // Offered only because all are: left out, and said so.
                Err(reason) if !explicit && reason.starts_with(NOT_JSON) => {
                    tracing::warn!(operation = %id, "OpenAPI operation left out: {reason}");
                }
                Err(reason) => return Err(format!("operation `{id}`: {reason}")),
            }
        }
    }
    if let Some(only) = only {
        if let Some(missing) = only.iter().find(|id| !found.iter().any(|o| &o.id == *id)) {
            let known: Vec<&str> =
                doc.operations().filter_map(|(_, _, o)| o.operation_id.as_deref()).collect();
            return Err(format!(
                "no operation `{missing}` in the document; its operations: {}",
                known.join(", ")
            ));
        }
    }
    Ok(found)
}

const NOT_JSON: &str = "its request body is not JSON";

fn operation<'a>(
    doc: &OpenAPI,
    id: &str,
    method: &str,
    path: &str,
    op: &openapiv3::Operation,
    params: impl Iterator<Item = &'a ReferenceOr<Parameter>>,
) -> Result<Operation, String> {
    if id.is_empty()
        || id.len() > 64
        || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err("an operationId must be 1 to 64 letters, digits, `_` or `-` to name a tool".into());
    }
    let mut defs = BTreeMap::new();
    let (mut properties, mut required, mut out) = (Map::new(), Vec::new(), Vec::new());
    for param in params {
        let param = resolve_parameter(doc, param)?;
        let location = match &param {
            Parameter::Path { .. } => Location::Path,
            Parameter::Query { .. } => Location::Query,
            Parameter::Header { .. } => Location::Header,
            Parameter::Cookie { .. } => return Err("cookie parameters are not supported".into()),
        };
        let data = param.parameter_data_ref();
        let mut schema = match &data.format {
            ParameterSchemaOrContent::Schema(schema) => schema_json(doc, schema, &mut defs)?,
            ParameterSchemaOrContent::Content(_) => json!({}),
        };
        if let (Some(text), Some(object)) = (&data.description, schema.as_object_mut()) {
            object.entry("description").or_insert_with(|| Value::String(text.clone()));
        }
        if data.required || location == Location::Path {
            required.push(Value::String(data.name.clone()));
        }
        // A later (operation-level) parameter overrides a path-level one of the same name.
        out.retain(|p: &Param| p.name != data.name);
        properties.insert(data.name.clone(), schema);
        out.push(Param { name: data.name.clone(), location });
    }
    let body = match &op.request_body {
        None => None,
        Some(body) => {
            let body = resolve_body(doc, body)?;
            let media = body.content.iter().find(|(t, _)| is_json(t)).map(|(_, m)| m);
            let Some(media) = media else {
                let types: Vec<&str> = body.content.keys().map(String::as_str).collect();
                return Err(format!("{NOT_JSON} ({})", types.join(", ")));
            };
            let name = if properties.contains_key(BODY_ARGUMENT) { "request_body" } else { BODY_ARGUMENT };
            let mut schema = match &media.schema {
                Some(schema) => schema_json(doc, schema, &mut defs)?,
                None => json!({}),
            };
            if let (Some(text), Some(object)) = (&body.description, schema.as_object_mut()) {
                object.entry("description").or_insert_with(|| Value::String(text.clone()));
            }
            properties.insert(name.to_owned(), schema);
            if body.required {
                required.push(Value::String(name.to_owned()));
            }
            Some(name.to_owned())
        }
    };
    let mut schema = json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false});
    if !defs.is_empty() {
        schema["$defs"] = Value::Object(defs.into_iter().collect());
    }
    let description = [op.summary.as_deref(), op.description.as_deref()]
        .into_iter()
        .flatten()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .fold(
            String::new(),
            |acc, t| if acc.is_empty() || acc == t { t.to_owned() } else { format!("{acc}. {t}") },
        );
    let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).map_err(|e| e.to_string())?;
    Ok(Operation { id: id.to_owned(), method, path: path.to_owned(), params: out, body, description, schema })
}

fn is_json(media_type: &str) -> bool {
    let essence = media_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}

/// The name a `#/components/<kind>/<name>` reference points at.
fn local_name<'r>(reference: &'r str, kind: &str) -> Result<&'r str, String> {
    reference
        .strip_prefix("#/components/")
        .and_then(|r| r.strip_prefix(kind))
        .and_then(|r| r.strip_prefix('/'))
        .ok_or_else(|| format!("the reference `{reference}` is not a local `#/components/{kind}/…` one"))
}

fn resolve_parameter<'d>(
    doc: &'d OpenAPI,
    param: &'d ReferenceOr<Parameter>,
) -> Result<&'d Parameter, String> {
    match param {
        ReferenceOr::Item(param) => Ok(param),
        ReferenceOr::Reference { reference } => {
            let name = local_name(reference, "parameters")?;
            match doc.components.as_ref().and_then(|c| c.parameters.get(name)) {
                Some(ReferenceOr::Item(param)) => Ok(param),
                _ => Err(format!("the reference `{reference}` points at no parameter")),
            }
        }
    }
}

fn resolve_body<'d>(doc: &'d OpenAPI, body: &'d ReferenceOr<RequestBody>) -> Result<&'d RequestBody, String> {
    match body {
        ReferenceOr::Item(body) => Ok(body),
        ReferenceOr::Reference { reference } => {
            let name = local_name(reference, "requestBodies")?;
            match doc.components.as_ref().and_then(|c| c.request_bodies.get(name)) {
                Some(ReferenceOr::Item(body)) => Ok(body),
                _ => Err(format!("the reference `{reference}` points at no request body")),
            }
        }
    }
}

/// `schema` as JSON Schema, its references rewritten to `#/$defs/…` and each schema they
/// reach (transitively) added to `defs`.
fn schema_json<T: serde::Serialize>(
    doc: &OpenAPI,
    schema: &T,
    defs: &mut BTreeMap<String, Value>,
) -> Result<Value, String> {
    let mut value = serde_json::to_value(schema).map_err(|e| e.to_string())?;
    let mut pending = Vec::new();
    rewrite_refs(&mut value, &mut pending)?;
    while let Some(name) = pending.pop() {
        if defs.contains_key(&name) {
            continue;
        }
        let component = doc.components.as_ref().and_then(|c| c.schemas.get(&name));
        let Some(component) = component else {
            return Err(format!("the reference `#/components/schemas/{name}` points at no schema"));
        };
        let mut def = serde_json::to_value(component).map_err(|e| e.to_string())?;
        rewrite_refs(&mut def, &mut pending)?;
        defs.insert(name, def);
    }
    Ok(value)
}

fn rewrite_refs(value: &mut Value, pending: &mut Vec<String>) -> Result<(), String> {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get_mut("$ref") {
                let name = local_name(reference, "schemas")?.to_owned();
                *reference = format!("#/$defs/{name}");
                pending.push(name);
            }
            map.values_mut().try_for_each(|v| rewrite_refs(v, pending))
        }
        Value::Array(items) => items.iter_mut().try_for_each(|v| rewrite_refs(v, pending)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r##"
openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /pets/{petId}:
    parameters:
      - {name: petId, in: path, required: true, schema: {type: integer}}
    get:
      operationId: getPet
      summary: Find a pet
      parameters:
        - {name: verbose, in: query, schema: {type: boolean}}
        - $ref: '#/components/parameters/Trace'
      responses: {"200": {description: ok}}
    put:
      operationId: putPet
      requestBody:
        required: true
        content: {application/json: {schema: {$ref: '#/components/schemas/Pet'}}}
      responses: {"200": {description: ok}}
  /upload:
    post:
      operationId: upload
      requestBody: {content: {application/octet-stream: {schema: {type: string}}}}
      responses: {"200": {description: ok}}
components:
  parameters:
    Trace: {name: X-Trace, in: header, schema: {type: string}}
  schemas:
    Pet:
      type: object
      properties: {name: {type: string}, friends: {type: array, items: {$ref: '#/components/schemas/Pet'}}}
"##;

    #[test]
    fn parameters_and_a_json_body_become_one_schema_with_local_refs_as_defs() {
        let doc = parse(DOC).unwrap();
        let ops = operations(&doc, None).unwrap();
        let ids: Vec<&str> = ops.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(ids, ["getPet", "putPet"], "upload (not JSON) is left out");
        let get = &ops[0];
        assert_eq!(get.schema["required"], json!(["petId"]));
        assert_eq!(get.schema["properties"]["X-Trace"]["type"], "string");
        assert_eq!(
            get.params.iter().map(|p| p.location).collect::<Vec<_>>(),
            [Location::Path, Location::Query, Location::Header]
        );
        let put = &ops[1];
        assert_eq!(put.body.as_deref(), Some("body"));
        assert_eq!(put.schema["properties"]["body"]["$ref"], "#/$defs/Pet");
        assert_eq!(put.schema["$defs"]["Pet"]["properties"]["friends"]["items"]["$ref"], "#/$defs/Pet");
        crate::tool::JsonSchema::compile(&put.schema).expect("a valid JSON Schema");
    }

    #[test]
    fn an_operation_without_an_operation_id_is_an_error_unless_a_subset_is_listed() {
        let doc = parse(&DOC.replace("      operationId: putPet\n", "")).unwrap();
        let err = operations(&doc, None).unwrap_err();
        assert!(err.contains("PUT /pets/{petId} has no operationId"), "{err}");
        let only = ["getPet".to_owned()];
        assert_eq!(operations(&doc, Some(&only)).unwrap().len(), 1);
    }

    #[test]
    fn a_listed_operation_must_exist_and_take_json() {
        let doc = parse(DOC).unwrap();
        let err = operations(&doc, Some(&["nope".to_owned()])).unwrap_err();
        assert!(err.contains("no operation `nope`") && err.contains("getPet, putPet, upload"), "{err}");
        let err = operations(&doc, Some(&["upload".to_owned()])).unwrap_err();
        assert!(err.contains("operation `upload`: its request body is not JSON"), "{err}");
    }

    #[test]
    fn a_document_that_is_not_openapi_3_says_so() {
        assert!(parse("swagger: '2.0'\n").unwrap_err().contains("not an OpenAPI 3 document"));
        assert!(parse("{not yaml").unwrap_err().contains("neither YAML nor JSON"));
    }
}
