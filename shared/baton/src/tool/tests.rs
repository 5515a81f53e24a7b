use super::testing::FnTool;
use super::*;
use crate::model::ToolCall;

/// Echoes its text; fails on `fail`, takes a minute on `slow`.
fn echo() -> Arc<dyn Tool> {
    let parameters = json!({"type": "object", "properties": {
        "text": {"type": "string", "minLength": 1},
        "times": {"type": "integer", "minimum": 1, "maximum": 3},
    }, "required": ["text"], "additionalProperties": false});
    FnTool::new("echo", "Echoes its text.", parameters, |arguments, context| async move {
        if arguments["text"] == "fail" {
            return Err(ToolError::Failed { tool: "echo".into(), reason: "asked to".into() });
        }
        if arguments["text"] == "slow" {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        Ok(json!({"echo": arguments["text"], "user": context.user_id}))
    })
}

fn registry() -> ToolRegistry {
    ToolRegistry::new(vec![echo()]).unwrap()
}

fn call(name: &str, arguments: &str) -> ToolCall {
    ToolCall { id: "c1".into(), name: name.into(), arguments: arguments.into() }
}

async fn run(name: &str, arguments: &str) -> ToolOutcome {
    let context = ToolContext::new("u1", "e");
    registry().call(&call(name, arguments), &context, Duration::from_secs(1)).await
}

#[tokio::test]
async fn valid_arguments_reach_the_tool_with_the_context() {
    let outcome = run("echo", r#"{"text":"hi"}"#).await;
    assert!(!outcome.is_error);
    assert_eq!(outcome.result, json!({"echo": "hi", "user": "u1"}));
    assert_eq!(outcome.arguments, json!({"text": "hi"}));
}

#[tokio::test]
async fn schema_violations_are_named_for_the_model() {
    let outcome = run("echo", r#"{"text":"hi","times":9,"extra":true}"#).await;
    assert!(outcome.is_error);
    assert_eq!(outcome.result["error"]["code"], "invalid_arguments");
    let message = outcome.result["error"]["message"].as_str().unwrap();
    assert!(message.contains("'/times'") && message.contains("extra"), "{message}");
    assert_eq!(outcome.arguments["times"], 9, "the parsed arguments are kept for the event");
}

#[tokio::test]
async fn missing_required_argument_is_an_error_result() {
    let outcome = run("echo", "{}").await;
    assert!(outcome.is_error);
    assert!(outcome.result["error"]["message"].as_str().unwrap().contains("text"), "{outcome:?}");
}

#[tokio::test]
async fn unreadable_json_is_an_error_result_with_the_raw_text() {
    let outcome = run("echo", r#"{"text": "hi""#).await;
    assert!(outcome.is_error);
    assert_eq!(outcome.result["error"]["code"], "invalid_arguments");
    assert_eq!(outcome.arguments, json!(r#"{"text": "hi""#));
}

#[tokio::test]
async fn unknown_tool_lists_the_real_ones() {
    let outcome = run("shout", "{}").await;
    assert_eq!(outcome.result["error"]["code"], "unknown_tool");
    assert!(outcome.result["error"]["message"].as_str().unwrap().contains("echo"));
}

#[tokio::test]
async fn tool_failure_is_an_error_result() {
    let outcome = run("echo", r#"{"text":"fail"}"#).await;
    assert_eq!(outcome.result["error"]["code"], "tool_failed");
}

#[tokio::test(start_paused = true)]
async fn a_slow_tool_times_out() {
    let outcome = run("echo", r#"{"text":"slow"}"#).await;
    assert_eq!(outcome.result["error"]["code"], "tool_timeout");
}

#[tokio::test]
async fn a_bad_schema_refuses_its_calls_and_a_duplicate_name_fails_at_construction() {
    let bad = FnTool::new("bad", "", json!({"type": "nonsense"}), |_, _| async { Ok(Value::Null) });
    let registry = ToolRegistry::new(vec![bad, echo()]).unwrap();
    let context = ToolContext::new("u1", "e");
    for _ in 0..2 {
        let outcome = registry.call(&call("bad", "{}"), &context, Duration::from_secs(1)).await;
        assert_eq!(outcome.result["error"]["code"], "invalid_schema", "{outcome:?}");
        assert!(outcome.result["error"]["message"].as_str().unwrap().contains("`bad`"), "{outcome:?}");
    }
    let fine = registry.call(&call("echo", r#"{"text":"hi"}"#), &context, Duration::from_secs(1)).await;
    assert!(!fine.is_error, "the registry's other tools still work: {fine:?}");
    let dup = ToolRegistry::new(vec![echo(), echo()]);
    assert!(matches!(dup, Err(ToolError::DuplicateName(n)) if n == "echo"));
}

#[tokio::test]
async fn a_subset_registry_shares_the_compiled_schemas_and_refuses_the_rest() {
    let full = ToolRegistry::new(vec![echo()]).unwrap();
    let context = ToolContext::new("u1", "e");
    let subset = full.only(&["echo".to_owned()]);
    let outcome = subset.call(&call("echo", r#"{"text":"hi"}"#), &context, Duration::from_secs(1)).await;
    assert!(!outcome.is_error, "{outcome:?}");
    assert!(full.tools[0].schema.get().is_some(), "compiled once, for both registries");
    let none = full.only(&[]);
    let outcome = none.call(&call("echo", r#"{"text":"hi"}"#), &context, Duration::from_secs(1)).await;
    assert_eq!(outcome.result["error"]["code"], "unknown_tool");
}
