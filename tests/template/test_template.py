"""What template.yaml deploys, read on SAM's translated output for each auth mode (see cfn.py).

`sam validate --lint`, cfn-lint and checkov read the template as written; they cannot see what the
translator generates (the REST API's methods live in its generated body) nor what it silently drops (a
conditional `DefaultAuthorizer`, the public permissions of a conditional Function URL AuthType)."""

import json
import re
import tomllib

import pytest

from cfn import ROOT, TEMPLATE, Refused, deployed, source

MODES = ["iam", "jwt"]
ORIGINS = "https://chat.example.com,http://localhost:8000"
FUNCTIONS = ["OrchestratorFunction", "ShoppingFunction", "EvalFunction"]
JWT_KEY = "arn:aws:secretsmanager:us-east-1:123456789012:secret:jwt-key"


def auth(mode):
    """The parameters of an auth mode that deploys: jwt mode with its key's secret."""
    return {"AuthMode": mode, **({"JwtPublicKeySecretArn": JWT_KEY} if mode == "jwt" else {})}


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
    stack = deployed(**auth(mode), CorsAllowedOrigins=origins)
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
    stack = deployed(**auth("jwt"))
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
    stack = deployed(**auth("jwt"), CorsAllowedOrigins=ORIGINS)
    unread = [f"{function}: {name}" for function in FUNCTIONS for name in env(stack, function)
              if f'"{name}"' not in code]
    assert unread == [], "variables no code reads"


@pytest.mark.parametrize("mode", MODES)
def test_one_stage_and_the_function_invocable_only_from_it(mode):
    stack = deployed(**auth(mode))
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
        deployments.append(set(deployed(fresh=True, **auth(mode)).of_type("AWS::ApiGateway::Deployment")))
        now[0] += 60
    assert all(len(d) == 1 for d in deployments) and deployments[0] != deployments[1], deployments


# --- 2. CORS ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_cors_origins_reach_the_function_url_the_rest_preflight_and_the_function(mode):
    stack = deployed(**auth(mode), CorsAllowedOrigins=ORIGINS)
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


RESERVED = {"OrchestratorFunction": "OrchestratorReservedConcurrency",
            "ShoppingFunction": "ShoppingReservedConcurrency", "EvalFunction": "EvalReservedConcurrency"}


def test_by_default_no_function_reserves_concurrency():
    """Lambda keeps 100 of an account's concurrency unreserved, and new accounts start far lower
    than the 301 the old defaults (100, 100, 1) needed: the function create failed."""
    stack = deployed()
    for function in FUNCTIONS:
        assert "ReservedConcurrentExecutions" not in stack.props(function), function


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize(("value", "reserved"), [(0, None), (1, 1), (50, 50)])
def test_reserved_concurrency_is_a_parameter_where_zero_is_unreserved(function, value, reserved):
    got = deployed(**{RESERVED[function]: value}).props(function).get("ReservedConcurrentExecutions")
    assert (None if got is None else int(got)) == reserved


def test_jwt_mode_without_its_key_is_refused_before_anything_is_created():
    """An empty JwtPublicKeySecretArn once deployed a role policy whose Resource was "": IAM refused
    the whole policy (MalformedPolicyDocument) halfway through the stack."""
    with pytest.raises(Refused) as refused:
        deployed(AuthMode="jwt")
    (message,) = refused.value.args[0]
    assert "JwtPublicKeySecretArn" in message and "AuthMode jwt" in message
    # iam mode needs no key, and jwt mode with one deploys a policy naming exactly it.
    assert deployed(AuthMode="iam")
    role = deployed(**auth("jwt")).props("OrchestratorFunctionRole")
    resources = [s["Resource"] for p in role["Policies"] for s in p["PolicyDocument"]["Statement"]]
    assert "" not in json.dumps(resources).split('"'), resources


def test_no_policy_statement_has_an_empty_resource_whatever_the_mode():
    for params in [{}, auth("jwt"), {"ConfigBucket": "b"}, {"ConfigParameterPath": "/baton/t"},
                   {"ExistingTableName": "old-table"}]:
        stack = deployed(**params)
        for name, role in stack.of_type("AWS::IAM::Role").items():
            for policy in role["Properties"].get("Policies", []):
                for statement in policy["PolicyDocument"]["Statement"]:
                    resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
                    assert all(r not in ("", None) for r in resources), (params, name, statement)


def test_the_dashboard_name_is_unique_per_stack_and_region():
    """Dashboard names are global to the account: two regions' stacks of one name collided."""
    (dashboard,) = deployed().of_type("AWS::CloudWatch::Dashboard").values()
    name = dashboard["Properties"]["DashboardName"]["Fn::Sub"]
    assert "${AWS::StackName}" in name and "${AWS::Region}" in name


def test_an_existing_table_is_reattached_instead_of_a_new_one():
    """The table outlives the stack; a redeploy after `sam delete` names it to keep the conversations."""
    stack = deployed(ExistingTableName="baton-Table-OLD")
    assert not stack.of_type("AWS::DynamoDB::Table")
    table_arn = {"Fn::Sub": "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/${ExistingTableName}"}
    for function in FUNCTIONS:
        assert env(stack, function)["BATON_TABLE"] == "baton-Table-OLD"
        for statement, _ in dynamodb_statements(stack, function):
            assert statement["Resource"] == table_arn, (function, statement)
    fresh = deployed()
    assert env(fresh, "OrchestratorFunction")["BATON_TABLE"] == {"Ref": "Table"}


# --- 4. A team's configuration, read at cold start ------------------------------------------------


def config_statements(stack, function):
    """The statements of the managed policies the function's role has (the configuration's)."""
    role = stack.props(stack.props(function)["Role"]["Fn::GetAtt"][0])
    out = []
    for arn in role.get("ManagedPolicyArns", []):
        if isinstance(arn, dict) and "Ref" in arn and arn["Ref"] in stack.resources:
            out += stack.props(arn["Ref"])["PolicyDocument"]["Statement"]
    return out


def test_without_a_config_location_nothing_is_read_and_nothing_is_granted():
    stack = deployed()
    assert "ConfigReadPolicy" not in stack.resources
    for function in FUNCTIONS:
        assert "BATON_CONFIG" not in env(stack, function)
        assert config_statements(stack, function) == []


@pytest.mark.parametrize("prefix", ["travel/", ""])
def test_an_s3_config_is_read_by_every_function_with_only_its_folder_granted(prefix):
    stack = deployed(ConfigBucket="team-configs", ConfigPrefix=prefix, ConfigFile="team.yaml")
    for function in FUNCTIONS:
        # Read by shared/baton-aws/src/config_source.rs: s3://team-configs/<prefix>team.yaml.
        assert env(stack, function)["BATON_CONFIG"] == {"Fn::Sub": "s3://${ConfigBucket}/${ConfigPrefix}${ConfigFile}"}
        assert stack.params["ConfigPrefix"] == prefix
        statements = config_statements(stack, function)
        assert {s["Sid"]: s["Action"] for s in statements} == {"ConfigObjects": "s3:GetObject", "ConfigFolder": "s3:ListBucket"}
        by_sid = {s["Sid"]: s for s in statements}
        assert by_sid["ConfigObjects"]["Resource"] == {"Fn::Sub": "arn:${AWS::Partition}:s3:::${ConfigBucket}/${ConfigPrefix}*"}
        assert by_sid["ConfigFolder"]["Condition"] == {"StringLike": {"s3:prefix": {"Fn::Sub": "${ConfigPrefix}*"}}}


def test_an_ssm_config_is_read_by_every_function_with_only_its_path_granted():
    stack = deployed(ConfigParameterPath="/baton/travel")
    for function in FUNCTIONS:
        assert env(stack, function)["BATON_CONFIG"] == {"Fn::Sub": "ssm:${ConfigParameterPath}/${ConfigFile}"}
        (statement,) = config_statements(stack, function)
        assert statement["Action"] == "ssm:GetParametersByPath"
        assert statement["Resource"] == {
            "Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter${ConfigParameterPath}"}


def test_a_teams_lambda_tools_and_tool_secrets_are_granted_by_their_arns_only():
    tools = ["arn:aws:lambda:us-east-1:123456789012:function:book-hotel",
             "arn:aws:lambda:us-east-1:123456789012:function:search-flights"]
    secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hotels-api-key"
    stack = deployed(ToolFunctionArns=",".join(tools), ToolSecretArns=secret)
    for function in ["OrchestratorFunction", "ShoppingFunction"]:
        by_sid = {s["Sid"]: s for s in config_statements(stack, function)}
        assert by_sid["TeamLambdaTools"]["Action"] == "lambda:InvokeFunction"
        assert by_sid["TeamLambdaTools"]["Resource"] == tools
        assert by_sid["TeamToolSecrets"]["Action"] == "secretsmanager:GetSecretValue"
        assert by_sid["TeamToolSecrets"]["Resource"] == [secret]
    assert "TeamLambdaTools" not in {s.get("Sid") for s in config_statements(stack, "EvalFunction")}
    only_functions = deployed(ToolFunctionArns=tools[0])
    sids = {s["Sid"] for s in config_statements(only_functions, "OrchestratorFunction")}
    assert sids == {"TeamLambdaTools"}, sids
    plain = deployed()
    assert "TeamToolsPolicy" not in plain.resources
    assert config_statements(plain, "OrchestratorFunction") == []


def test_two_config_locations_are_refused():
    with pytest.raises(Refused) as refused:
        deployed(ConfigBucket="b", ConfigParameterPath="/p")
    assert "not both" in refused.value.args[0][0]


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


def test_samconfig_turns_on_no_beta_feature():
    """rust-cargolambda left SAM CLI's beta features (aws/aws-sam-cli#8526); `beta_features = true`
    would now turn on every remaining beta."""
    with open(TEMPLATE.parent / "samconfig.toml", "rb") as f:
        config = tomllib.load(f)
    for command, section in config["default"].items():
        assert "beta_features" not in section.get("parameters", {}), command


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
    stack = deployed(**auth(mode))
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
            assert name.endswith(("SecretArn", "SecretArns")), f"parameter {name} is a secret ARN, not a secret value"
