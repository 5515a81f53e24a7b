"""`make preflight` (scripts/preflight.py) against moto_server: a passing setup and each failure.

Every AWS call goes to a real moto_server on loopback (STS, API Gateway, IAM, Secrets Manager, S3,
SSM), except Lambda's GetAccountSettings, which moto does not implement: a stub of that one call
answers it (`AWS_ENDPOINT_URL_LAMBDA`), with the account's limit each test sets. The tools are the
venv's real `sam` and `cargo-lambda`, and zig is the venv's ziglang package, reached as the checked
command reaches them: on a PATH made for each test."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
import pytest

ROOT = Path(__file__).resolve().parents[2]
PREFLIGHT = ROOT / "scripts" / "preflight.py"
VENV_BIN = Path(sys.executable).parent
ACCOUNT = {"ConcurrentExecutions": 1000, "UnreservedConcurrentExecutions": 1000}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def moto():
    port = free_port()
    server = subprocess.Popen([str(VENV_BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(urllib.request.Request(url + "/moto-api/reset", method="POST"), timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail("moto_server did not start")
            time.sleep(0.2)
    yield url
    server.terminate()
    server.wait(timeout=10)


class AccountSettings(BaseHTTPRequestHandler):
    """Lambda's GetAccountSettings (GET /2016-08-19/account-settings/), which moto lacks."""

    def do_GET(self):
        if not self.path.startswith("/2016-08-19/account-settings"):
            self.send_error(404)
            return
        body = json.dumps({"AccountLimit": {"TotalCodeSize": 80530636800, "CodeSizeUnzipped": 262144000,
                                            "CodeSizeZipped": 52428800, **ACCOUNT},
                           "AccountUsage": {"TotalCodeSize": 0, "FunctionCount": 0}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def lambda_stub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), AccountSettings)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def aws(moto, lambda_stub, tmp_path, monkeypatch):
    """An empty moto account in us-east-1, a new account's concurrency (1000), and the env for it."""
    urllib.request.urlopen(urllib.request.Request(moto + "/moto-api/reset", method="POST"), timeout=10)
    ACCOUNT.update(ConcurrentExecutions=1000, UnreservedConcurrentExecutions=1000)
    env = {"AWS_ENDPOINT_URL": moto, "AWS_ENDPOINT_URL_LAMBDA": lambda_stub, "AWS_REGION": "us-east-1",
           "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
           "HOME": str(tmp_path)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return env


def tools(tmp_path, sam=True, cargo_lambda=True, zig=True):
    """A PATH holding the venv's real tools (as wrappers, so nothing else of the venv is on it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    wanted = {"sam": sam and f'exec "{VENV_BIN / "sam"}" "$@"',
              "cargo-lambda": cargo_lambda and f'exec "{VENV_BIN / "cargo-lambda"}" "$@"',
              # What `pip install cargo-lambda` brings: zig as the ziglang package of the venv's python3.
              "python3": zig and f'exec "{sys.executable}" "$@"'}
    for name, line in wanted.items():
        if line:
            (bin_dir / name).write_text(f"#!/bin/sh\n{line}\n")
            (bin_dir / name).chmod(0o755)
    return str(bin_dir)


def preflight(env, path, *params, region=None):
    run_env = {**env, "PATH": path}
    if region is not None:
        run_env["AWS_REGION"] = run_env["AWS_DEFAULT_REGION"] = region
    run_env = {k: v for k, v in run_env.items() if v is not None}
    out = subprocess.run([sys.executable, str(PREFLIGHT), *params], env=run_env, capture_output=True,
                         text=True, timeout=120)
    print(out.stdout, out.stderr)
    return out.returncode, out.stdout


def failures(stdout):
    return [line for line in stdout.splitlines() if line.startswith("FAIL")]


def logging_role(arn_only=False):
    iam = boto3.client("iam")
    role = iam.create_role(RoleName="apigw-logs", AssumeRolePolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                "Principal": {"Service": "apigateway.amazonaws.com"}}]}))
    arn = role["Role"]["Arn"]
    boto3.client("apigateway").update_account(
        patchOperations=[{"op": "replace", "path": "/cloudwatchRoleArn", "value": arn}])
    return arn


def test_a_ready_account_passes_in_every_auth_mode(aws, tmp_path):
    logging_role()
    key = boto3.client("secretsmanager").create_secret(Name="baton/jwt-public-key", SecretString="PEM")["ARN"]
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="team-configs")
    s3.put_object(Bucket="team-configs", Key="travel/baton.yaml", Body=b"entry: concierge\n")
    code, out = preflight(aws, tools(tmp_path))
    assert code == 0 and not failures(out), out
    assert "ready to deploy" in out
    code, out = preflight(aws, tools(tmp_path), "AuthMode=jwt", f"JwtPublicKeySecretArn={key}",
                          "ConfigBucket=team-configs", "ConfigPrefix=travel/")
    assert code == 0 and not failures(out), out
    assert "ok    secrets: JwtPublicKeySecretArn" in out and "ok    config: s3://team-configs/travel/baton.yaml" in out


def test_no_credentials(aws, tmp_path):
    env = {**aws, "AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None}
    code, out = preflight(env, tools(tmp_path))
    assert code == 1 and failures(out) == [
        failures(out)[0]] and "FAIL  credentials: no usable AWS credentials" in out and "aws sso login" in out, out


def test_no_region(aws, tmp_path):
    code, out = preflight(aws, tools(tmp_path), region="")
    assert code == 1 and "FAIL  region: no region is set: export AWS_REGION" in out, out


def test_a_region_without_function_urls(aws, tmp_path):
    code, out = preflight(aws, tools(tmp_path), region="eu-central-2")
    assert code == 1 and "FAIL  region: eu-central-2 (Europe (Zurich)) has no Lambda function URLs" in out, out


def test_reserved_concurrency_the_account_cannot_give(aws, tmp_path):
    logging_role()
    # A new account: a limit of 10, all unreserved. The defaults (0) pass; any reservation fails.
    ACCOUNT.update(ConcurrentExecutions=10, UnreservedConcurrentExecutions=10)
    code, out = preflight(aws, tools(tmp_path))
    assert code == 0 and "account limit 10, 10 unreserved; the parameters reserve 0" in out, out
    code, out = preflight(aws, tools(tmp_path), "OrchestratorReservedConcurrency=100", "EvalReservedConcurrency=1")
    (line,) = failures(out)
    assert code == 1 and line.startswith("FAIL  concurrency: the parameters reserve 101 concurrent executions"), out
    assert "set them to 0" in line and "at least 201" in line, line


def test_no_api_gateway_logging_role(aws, tmp_path):
    code, out = preflight(aws, tools(tmp_path))
    (line,) = failures(out)
    assert code == 1 and line.startswith("FAIL  API Gateway logging role: us-east-1 has no API Gateway CloudWatch role")
    assert "CreateApiGatewayLoggingRole=true" in line and "update-account" in line
    code, out = preflight(aws, tools(tmp_path), "CreateApiGatewayLoggingRole=true")
    assert code == 0, out


def test_a_logging_role_that_was_deleted(aws, tmp_path):
    logging_role()
    boto3.client("iam").delete_role(RoleName="apigw-logs")
    code, out = preflight(aws, tools(tmp_path))
    (line,) = failures(out)
    assert code == 1 and "role/apigw-logs no longer exists" in line, out


@pytest.mark.parametrize(("missing", "expected"), [
    ("cargo_lambda", "FAIL  cargo-lambda: cargo-lambda is not on PATH, where `sam build` looks for it: activate the venv"),
    ("zig", "FAIL  zig: zig is not on PATH"),
    ("sam", "FAIL  sam: the SAM CLI is not on PATH"),
])
def test_a_tool_not_on_path(aws, tmp_path, missing, expected):
    logging_role()
    code, out = preflight(aws, tools(tmp_path, **{missing: False}))
    (line,) = failures(out)
    assert code == 1 and line.startswith(expected), out


def test_an_old_sam_cli(aws, tmp_path):
    logging_role()
    path = tools(tmp_path, sam=False)
    old = Path(path) / "sam"
    old.write_text("#!/bin/sh\necho 'SAM CLI, version 1.120.0'\n")
    old.chmod(0o755)
    code, out = preflight(aws, path)
    (line,) = failures(out)
    assert code == 1 and line.startswith("FAIL  sam: SAM CLI 1.120.0 is older than 1.170"), out


def test_jwt_mode_without_its_key_or_with_a_key_that_is_not_there(aws, tmp_path):
    logging_role()
    code, out = preflight(aws, tools(tmp_path), "AuthMode=jwt")
    (line,) = failures(out)
    assert code == 1 and line.startswith("FAIL  secrets: AuthMode jwt needs JwtPublicKeySecretArn"), out
    missing = "arn:aws:secretsmanager:us-east-1:123456789012:secret:baton/nope-AbCdEf"
    code, out = preflight(aws, tools(tmp_path), "AuthMode=jwt", f"JwtPublicKeySecretArn={missing}")
    (line,) = failures(out)
    assert code == 1 and f"JwtPublicKeySecretArn {missing} cannot be read (ResourceNotFoundException" in line, out


def test_a_model_key_secret_that_is_not_there(aws, tmp_path):
    logging_role()
    missing = "arn:aws:secretsmanager:us-east-1:123456789012:secret:baton/openai-key-AbCdEf"
    code, out = preflight(aws, tools(tmp_path), f"OpenAiApiKeySecretArn={missing}")
    (line,) = failures(out)
    assert code == 1 and line.startswith(f"FAIL  secrets: OpenAiApiKeySecretArn {missing} cannot be read"), out


def test_a_team_config_that_is_not_there(aws, tmp_path):
    logging_role()
    boto3.client("s3").create_bucket(Bucket="team-configs")
    code, out = preflight(aws, tools(tmp_path), "ConfigBucket=team-configs", "ConfigPrefix=travel/")
    (line,) = failures(out)
    assert code == 1 and "s3://team-configs/travel/baton.yaml does not exist: `aws s3 cp" in line, out
    boto3.client("ssm").put_parameter(Name="/baton/travel/baton.yaml", Value="entry: x", Type="String")
    code, out = preflight(aws, tools(tmp_path), "ConfigParameterPath=/baton/travel")
    assert code == 0 and "ok    config: ssm:/baton/travel/baton.yaml" in out, out


def test_samconfig_parameters_are_read_and_arguments_win(tmp_path):
    sys.path.insert(0, str(PREFLIGHT.parent))
    import preflight as module

    samconfig = tmp_path / "samconfig.toml"
    samconfig.write_text('[default.deploy.parameters]\nparameter_overrides = "AuthMode=jwt OrchestratorReservedConcurrency=5"\n')
    params = module.parameters(ROOT / "template.yaml", samconfig, ["OrchestratorReservedConcurrency=7"])
    assert params["AuthMode"] == "jwt" and params["OrchestratorReservedConcurrency"] == "7"
    assert params["ShoppingReservedConcurrency"] == "0", "the template's default"
