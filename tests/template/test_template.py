"""What template.yaml deploys, read on SAM's translated output for each auth mode (see cfn.py).

`sam validate --lint`, cfn-lint and checkov read the template as written; they cannot see what the
translator generates (the REST API's methods live in its generated body) nor what it silently drops (a
conditional `DefaultAuthorizer`, the public permissions of a conditional Function URL AuthType)."""

import json
import re
import tomllib

import pytest

from cfn import ROOT, TEMPLATE, deployed, source

MODES = ["iam", "jwt"]
ORIGINS = "https://chat.example.com,http://localhost:8000"
FUNCTIONS = ["OrchestratorFunction", "ShoppingFunction", "EvalFunction"]


def api_methods(stack):
    """(path, method, its OpenAPI) of every method of every REST API."""
    for api in stack.of_type("AWS::ApiGateway::RestApi").values():
        body = api["Properties"]["Body"]
        for path, item in body["paths"].items():
            for method, spec in item.items():
                yield path, method, spec, body


def sigv4(spec, body):
    """Whether the method requires a SigV4 signature (API Gateway's AWS_IAM authorization)."""
    schemes = body.get("components", {}).get("securitySchemes") or body.get("securityDefinitions", {})
    return any(
        schemes.get(name, {}).get("x-amazon-apigateway-authtype") == "awsSigv4"
        for requirement in spec.get("security", [])
        for name in requirement
    )


def invokes_function(spec):
    return spec.get("x-amazon-apigateway-integration", {}).get("type") in ("aws_proxy", "aws")


def env(stack, function):
    return stack.props(function).get("Environment", {}).get("Variables", {})


def ref(x):
    return x.get("Ref") if isinstance(x, dict) else None


def function_of(permission):
    name = permission["Properties"]["FunctionName"]
    return ref(name) or name.get("Fn::GetAtt", [None])[0]


def public_permissions(stack):
    return [p["Properties"] for p in stack.of_type("AWS::Lambda::Permission").values()
            if p["Properties"].get("Principal") == "*"]


def dynamodb_statements(stack, function):
    role = stack.props(function)["Role"]["Fn::GetAtt"][0]
    for policy in stack.props(role).get("Policies", []):
        for statement in policy["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if any(a.startswith("dynamodb:") for a in actions):
                yield statement, set(actions)


# --- 1. Each auth mode yields exactly the gateway auth it promises -------------------------------


@pytest.mark.parametrize("origins", ["", ORIGINS])
def test_iam_mode_every_rest_method_that_reaches_the_function_requires_sigv4(origins):
    stack = deployed(AuthMode="iam", CorsAllowedOrigins=origins)
    methods = list(api_methods(stack))
    assert any(m == "post" and p == "/chat" for p, m, _, _ in methods), "POST /chat exists"
    for path, method, spec, body in methods:
        if invokes_function(spec):
            assert sigv4(spec, body), f"{method.upper()} {path} invokes the function without SigV4"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("origins", ["", ORIGINS])
def test_no_path_reaches_the_function_without_authentication(mode, origins):
    """Every way in is either signed at the gateway, or goes to a function that verifies a JWT
    itself; a method open at the gateway that does not invoke the function can only be the CORS
    preflight (a MOCK answered by API Gateway: browsers never sign a preflight)."""
    stack = deployed(AuthMode=mode, CorsAllowedOrigins=origins)
    jwt_checked = env(stack, "OrchestratorFunction").get("BATON_AUTH") == "jwt"
    for path, method, spec, body in api_methods(stack):
        if sigv4(spec, body):
            continue
        if invokes_function(spec):
            assert jwt_checked, f"{method.upper()} {path} is open and the function checks no JWT"
        else:
            assert method == "options" and spec["x-amazon-apigateway-integration"]["type"] == "mock", (path, method)
    for url in stack.of_type("AWS::Lambda::Url").values():
        if url["Properties"]["AuthType"] != "AWS_IAM":
            assert url["Properties"]["AuthType"] == "NONE" and jwt_checked
    for permission in public_permissions(stack):
        assert jwt_checked and function_of({"Properties": permission}) == "OrchestratorFunction", permission


def test_iam_mode_function_url_requires_iam_and_nothing_is_public():
    stack = deployed(AuthMode="iam")
    assert stack.props("OrchestratorFunctionUrl")["AuthType"] == "AWS_IAM"
    assert env(stack, "OrchestratorFunction")["BATON_AUTH"] == "iam"
    assert public_permissions(stack) == []


def test_jwt_mode_function_url_is_public_with_both_permissions_aws_requires():
    stack = deployed(AuthMode="jwt")
    url = stack.props("OrchestratorFunctionUrl")
    assert url["AuthType"] == "NONE" and url["InvokeMode"] == "RESPONSE_STREAM"
    public = public_permissions(stack)
    assert {p["Action"] for p in public} == {"lambda:InvokeFunctionUrl", "lambda:InvokeFunction"}, public
    for p in public:
        assert function_of({"Properties": p}) == "OrchestratorFunction"
        if p["Action"] == "lambda:InvokeFunctionUrl":
            assert p["FunctionUrlAuthType"] == "NONE"
        else:
            assert p["InvokedViaFunctionUrl"] is True, "InvokeFunction only through the Function URL"


def test_jwt_mode_function_verifies_tokens_with_a_key_it_can_read():
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:jwt-key"
    stack = deployed(AuthMode="jwt", JwtPublicKeySecretArn=arn, JwtIssuer="https://issuer", JwtAudience="baton")
    variables = env(stack, "OrchestratorFunction")
    assert variables["BATON_AUTH"] == "jwt"
    assert variables["BATON_JWT_PUBLIC_KEY_SECRET_ARN"] == arn
    assert (variables["BATON_JWT_ISSUER"], variables["BATON_JWT_AUDIENCE"]) == ("https://issuer", "baton")
    role = stack.props("OrchestratorFunctionRole")
    readable = [s["Resource"] for p in role["Policies"] for s in p["PolicyDocument"]["Statement"]
                if "secretsmanager:GetSecretValue" in json.dumps(s["Action"])]
    assert any(arn in json.dumps(r) for r in readable), readable


def test_every_variable_the_template_sets_is_read_by_the_functions():
    """A setting the template passes that no code reads is a deployment that starts without it
    (as `BATON_JWT_PUBLIC_KEY_SECRET_ARN` once was: jwt mode could not start)."""
    code = "\n".join(p.read_text() for d in ["shared", "functions"] for p in (ROOT / d).rglob("*.rs"))
    stack = deployed(AuthMode="jwt", CorsAllowedOrigins=ORIGINS)
    unread = [f"{function}: {name}" for function in FUNCTIONS for name in env(stack, function)
              if f'"{name}"' not in code]
    assert unread == [], "variables no code reads"


@pytest.mark.parametrize("mode", MODES)
def test_one_stage_and_the_function_invocable_only_from_it(mode):
    stack = deployed(AuthMode=mode)
    stages = stack.of_type("AWS::ApiGateway::Stage")
    assert [s["Properties"]["StageName"] for s in stages.values()] == ["v1"]
    for deployment in stack.of_type("AWS::ApiGateway::Deployment").values():
        assert "StageName" not in deployment["Properties"], "a deployment with StageName makes a second stage"
    api_permissions = [p["Properties"] for p in stack.of_type("AWS::Lambda::Permission").values()
                       if p["Properties"]["Principal"] == "apigateway.amazonaws.com"]
    # One permission per method that invokes the function, on the one stage, path parameters as `*`.
    allowed = sorted(p["SourceArn"]["Fn::Sub"].split("${ChatApi}")[1] for p in api_permissions)
    invoking = sorted(f"/v1/{method.upper()}{re.sub(r'{[^}]+}', '*', path)}"
                      for path, method, spec, _ in api_methods(stack) if invokes_function(spec))
    assert allowed == invoking == [
        "/v1/GET/.well-known/agent-card.json", "/v1/GET/a2a/*/.well-known/agent-card.json",
        "/v1/GET/ai-sdk/*/stream", "/v1/GET/chat/*/events", "/v1/GET/chat/*/messages",
        "/v1/GET/chat/*/turns/*/events", "/v1/POST/a2a", "/v1/POST/a2a/*", "/v1/POST/agui", "/v1/POST/ai-sdk",
        "/v1/POST/chat", "/v1/POST/chat/*/csat", "/v1/POST/chat/*/turns/*/cancel"], (allowed, invoking)


def test_changing_the_auth_mode_deploys_the_api_again(monkeypatch):
    """The body's `Fn::If` is the same text in both modes, so a deployment named after a hash of the
    body would stay, and the stage would keep serving the old methods. Two deploys, a minute apart."""
    now = [1_800_000_000]
    monkeypatch.setattr("samtranslator.model.apigateway.time.time", lambda: now[0])
    deployments = []
    for mode in MODES:
        deployments.append(set(deployed(fresh=True, AuthMode=mode).of_type("AWS::ApiGateway::Deployment")))
        now[0] += 60
    assert all(len(d) == 1 for d in deployments) and deployments[0] != deployments[1], deployments


# --- 2. CORS ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_cors_origins_reach_the_function_url_the_rest_preflight_and_the_function(mode):
    stack = deployed(AuthMode=mode, CorsAllowedOrigins=ORIGINS)
    cors = stack.props("OrchestratorFunctionUrl").get("Cors")
    assert cors, "the Function URL has a CORS configuration"
    assert cors["AllowOrigins"] == ORIGINS.split(",")
    assert cors["AllowMethods"] == ["GET", "POST"], "the page posts turns and reads conversations back"
    # What the web client sends (web/baton-client.js): its token, JSON, and the local user header.
    assert {"authorization", "content-type", "x-baton-user"} <= {h.lower() for h in cors["AllowHeaders"]}
    assert "x-baton-episode-id" in cors["ExposeHeaders"]
    methods = {(p, m): spec for p, m, spec, _ in api_methods(stack)}
    # The page's paths (the A2A endpoint and its card serve agents, not browsers: no preflight).
    a2a = {"/a2a", "/.well-known/agent-card.json", "/a2a/{agent}", "/a2a/{agent}/.well-known/agent-card.json"}
    posted = {p for p, m in methods if m == "post"} - a2a
    assert posted == {"/chat", "/chat/{episode_id}/csat", "/chat/{episode_id}/turns/{turn_id}/cancel", "/agui", "/ai-sdk"}
    read = {p for p, m in methods if m == "get"} - a2a
    assert read == {"/chat/{episode_id}/messages", "/chat/{episode_id}/events", "/chat/{episode_id}/turns/{turn_id}/events",
                    "/ai-sdk/{chat_id}/stream"}
    # A reconnecting client sends its last event id (web/baton-client.js).
    assert "last-event-id" in {h.lower() for h in cors["AllowHeaders"]}
    assert all((p, "options") in methods for p in posted | read), "a preflight on every path the page calls"
    preflight = methods[("/chat", "options")]
    integration = preflight["x-amazon-apigateway-integration"]
    assert integration["type"] == "mock"
    answer = integration["responses"]["default"]
    assert answer["responseParameters"]["method.response.header.Access-Control-Allow-Methods"] == "'GET,POST'"
    allowed = answer["responseParameters"]["method.response.header.Access-Control-Allow-Headers"].strip("'")
    assert set(allowed.split(",")) == {h.lower() for h in cors["AllowHeaders"]}, "both endpoints allow the same"
    echo = answer["responseTemplates"]["application/json"]["Fn::Sub"]
    assert stack.resolve(echo[1])["Origins"] == {"Fn::Join": [",", ORIGINS.split(",")]}
    assert "Access-Control-Allow-Origin" in echo[0]
    # REST answers get their CORS headers from the function (the Function URL adds its own).
    assert env(stack, "OrchestratorFunction")["BATON_CORS_ORIGINS"] == {"Fn::Join": [",", ORIGINS.split(",")]}


def test_without_origins_there_is_no_cors_and_no_preflight():
    stack = deployed()
    assert "Cors" not in stack.props("OrchestratorFunctionUrl")
    methods = [m for _, m, _, _ in api_methods(stack)]
    assert len(methods) == 13 and "options" not in methods, f"no OPTIONS method on any path: {methods}"
    assert env(stack, "OrchestratorFunction").get("BATON_CORS_ORIGINS") == ""


# --- 3. Deploy snags ----------------------------------------------------------------------------


@pytest.mark.parametrize("days", [None, 7])
def test_every_function_logs_to_a_group_the_stack_keeps_for_the_retention_days(days):
    stack = deployed() if days is None else deployed(LogRetentionDays=days)
    groups = stack.of_type("AWS::Logs::LogGroup")
    for function in FUNCTIONS:
        group = ref(stack.props(function).get("LoggingConfig", {}).get("LogGroup"))
        assert group in groups, f"{function} logs to a group of the stack"
        assert str(groups[group]["Properties"]["RetentionInDays"]) == str(days or 30)
    assert all(str(g["Properties"]["RetentionInDays"]) == str(days or 30) for g in groups.values())


def test_the_schedule_is_named_after_the_stack():
    (schedule,) = deployed().of_type("AWS::Scheduler::Schedule").values()
    name = schedule["Properties"].get("Name")
    assert name is None or "${AWS::StackName}" in (name.get("Fn::Sub", "") if isinstance(name, dict) else ""), (
        f"a fixed name ({name}) fails a second stack in the same account and region"
    )
    assert "EvalFailures" in json.dumps(schedule["Properties"]["Target"]["DeadLetterConfig"])


# What each function's code calls (shared/baton-aws/src/dynamodb.rs; TransactWriteItems is
# authorised per contained Put, Update and Delete): the orchestrator everything the store does,
# shopping its agent state on the episode item, the eval its own episodes.
DYNAMODB_ACTIONS = {
    "OrchestratorFunction": {"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query"},
    "ShoppingFunction": {"GetItem", "PutItem"},
    "EvalFunction": {"Query", "PutItem", "UpdateItem", "DeleteItem"},
}


@pytest.mark.parametrize("function", FUNCTIONS)
def test_functions_are_granted_only_the_dynamodb_actions_their_code_calls(function):
    granted = set()
    for _, actions in dynamodb_statements(deployed(), function):
        granted |= {a.removeprefix("dynamodb:") for a in actions}
    assert granted == DYNAMODB_ACTIONS[function]


def test_the_eval_reads_and_writes_only_its_own_episodes():
    statements = list(dynamodb_statements(deployed(), "EvalFunction"))
    assert statements
    for statement, _ in statements:
        keys = statement["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]
        assert keys == ["USER#eval#EP#*"], statement


@pytest.mark.parametrize(("value", "reserved"), [(None, 1), (0, None), (3, 3)])
def test_eval_reserved_concurrency_is_a_parameter_where_zero_is_unreserved(value, reserved):
    stack = deployed() if value is None else deployed(EvalReservedConcurrency=value)
    got = stack.props("EvalFunction").get("ReservedConcurrentExecutions")
    assert (None if got is None else int(got)) == reserved


def test_the_table_is_retained_and_protected_from_deletion():
    table = deployed().resources["Table"]
    assert table["Properties"]["DeletionProtectionEnabled"] is True
    assert table.get("DeletionPolicy") == "Retain" and table.get("UpdateReplacePolicy") == "Retain"


def test_the_alarm_notifies_the_topic_when_one_is_given():
    topic = "arn:aws:sns:us-east-1:123456789012:baton-alarms"
    alarm = deployed(AlarmTopicArn=topic).props("TurnErrorRateAlarm")
    assert alarm["AlarmActions"] == [topic] and alarm["OKActions"] == [topic]
    quiet = deployed().props("TurnErrorRateAlarm")
    assert "AlarmActions" not in quiet and "OKActions" not in quiet


def test_samconfig_opts_into_the_cargo_lambda_beta_for_build_and_sync():
    with open(TEMPLATE.parent / "samconfig.toml", "rb") as f:
        config = tomllib.load(f)
    for command in ["build", "sync"]:
        assert config["default"][command]["parameters"].get("beta_features") is True, command


def test_the_api_gateway_logging_role_is_created_on_request_and_the_stage_waits_for_it():
    assert not deployed().of_type("AWS::ApiGateway::Account")
    stack = deployed(CreateApiGatewayLoggingRole="true")
    (account,) = stack.of_type("AWS::ApiGateway::Account").values()
    role = account["Properties"]["CloudWatchRoleArn"]["Fn::GetAtt"][0]
    trust = stack.props(role)["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"] == {"Service": "apigateway.amazonaws.com"}
    assert "AmazonAPIGatewayPushToCloudWatchLogs" in json.dumps(stack.props(role)["ManagedPolicyArns"])
    (stage,) = stack.of_type("AWS::ApiGateway::Stage").values()
    assert "ApiGatewayAccount" in json.dumps(stage["Properties"]["AccessLogSetting"])


@pytest.mark.parametrize("route", [("/chat", "post"), ("/chat/{episode_id}/events", "get"),
                                   ("/chat/{episode_id}/turns/{turn_id}/events", "get"), ("/agui", "post"),
                                   ("/ai-sdk", "post"), ("/ai-sdk/{chat_id}/stream", "get"), ("/a2a", "post"),
                                   ("/a2a/{agent}", "post")])
def test_the_rest_integration_timeout_of_a_stream_is_explicit_and_outlasts_the_function(route):
    """A turn's stream and a rejoined one both last up to the function's deadline."""
    stack = deployed()
    (spec,) = [spec for p, m, spec, _ in api_methods(stack) if (p, m) == route]
    integration = spec["x-amazon-apigateway-integration"]
    timeout = integration.get("timeoutInMillis")
    assert timeout is not None, "left to the default"
    assert stack.props("OrchestratorFunction")["Timeout"] * 1000 < timeout <= 900_000
    assert integration["responseTransferMode"] == "STREAM"


# --- What must hold whatever the parameters -----------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_both_endpoints_stream(mode):
    stack = deployed(AuthMode=mode)
    assert stack.props("OrchestratorFunctionUrl")["InvokeMode"] == "RESPONSE_STREAM"
    (post,) = [spec for p, m, spec, _ in api_methods(stack) if (p, m) == ("/chat", "post")]
    integration = post["x-amazon-apigateway-integration"]
    assert integration["responseTransferMode"] == "STREAM"
    assert "/2021-11-15/functions/${OrchestratorFunction.Arn}/response-streaming-invocations" in integration["uri"]["Fn::Sub"]
    (api,) = stack.of_type("AWS::ApiGateway::RestApi").values()
    assert api["Properties"]["EndpointConfiguration"] == {"Types": ["REGIONAL"]}


def test_the_table_keys_and_ttl():
    table = deployed().props("Table")
    assert {k["AttributeName"]: k["KeyType"] for k in table["KeySchema"]} == {"pk": "HASH", "sk": "RANGE"}
    assert table["TimeToLiveSpecification"] == {"AttributeName": "ttl", "Enabled": True}


def test_production_settings_tracing_access_logs_and_the_eval_dead_letter_queue():
    stack = deployed()
    (stage,) = stack.of_type("AWS::ApiGateway::Stage").values()
    assert stage["Properties"]["TracingEnabled"] is True
    assert "ApiAccessLogs" in json.dumps(stage["Properties"]["AccessLogSetting"])
    assert "EvalFailures" in json.dumps(stack.props("EvalFunction")["DeadLetterConfig"])
    for name, function in stack.of_type("AWS::Lambda::Function").items():
        props = function["Properties"]
        assert props["Architectures"] == ["arm64"] and props["Runtime"] == "provided.al2023", name
        assert props["TracingConfig"] == {"Mode": "Active"}, name
        assert not {"OPENAI_API_KEY", "FORETHOUGHT_API_TOKEN", "BATON_JWT_HS256_SECRET"} & set(env(stack, name)), name


def test_secrets_are_passed_as_secret_arns_only():
    for name in source()["Parameters"]:
        if re.search("key|token|secret|password", name, re.IGNORECASE):
            assert name.endswith("SecretArn"), f"parameter {name} is a secret ARN, not a secret value"
