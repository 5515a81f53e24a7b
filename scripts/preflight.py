#!/usr/bin/env python3
"""Checks, before `sam deploy`, what a first deploy of template.yaml needs from the account, the
region and this machine, and says for each missing thing how to fix it (docs/deployment.md).

    make preflight                                   # the parameters of samconfig.toml
    make preflight PARAMS="AuthMode=jwt JwtPublicKeySecretArn=arn:..."   # as --parameter-overrides

Parameters are the template's defaults, then samconfig.toml's `parameter_overrides`, then the
`Key=Value` arguments (the syntax of `sam deploy --parameter-overrides`). The region and credentials
are the AWS CLI's (`AWS_REGION`, `AWS_PROFILE`, ...; `--region` wins). Only read calls are made:
sts:GetCallerIdentity, lambda:GetAccountSettings, apigateway:GET (the account), iam:GetRole,
secretsmanager:DescribeSecret, and s3:ListBucket or ssm:GetParametersByPath for a team's config.
Exit code 0 when every check passes, 1 otherwise; each failure is one line with its fix."""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import boto3
import botocore.exceptions
import yaml

ROOT = Path(__file__).resolve().parents[1]

# Regions without Lambda function URLs, from the AWS Lambda Developer Guide, "Creating and managing
# Lambda function URLs" (https://docs.aws.amazon.com/lambda/latest/dg/urls-configuration.html, read
# 2026-11): the orchestrator's streaming endpoint is a Function URL, so the stack cannot be created
# there. Response streaming itself (the Function URL's RESPONSE_STREAM and API Gateway's streamed
# integration) is "not yet available in all AWS Regions" per the same guide, which points to the
# Builder Center's "AWS Capabilities by Region" (https://builder.aws.com/build/capabilities); that
# page publishes no list this script can keep, so streaming is checked as far as the guide's list
# goes and the line says so.
NO_FUNCTION_URLS = {
    "ap-south-2": "Asia Pacific (Hyderabad)",
    "ap-southeast-4": "Asia Pacific (Melbourne)",
    "ap-southeast-5": "Asia Pacific (Malaysia)",
    "ap-southeast-6": "Asia Pacific (New Zealand)",
    "ap-southeast-7": "Asia Pacific (Thailand)",
    "ap-east-2": "Asia Pacific (Taipei)",
    "ca-west-1": "Canada West (Calgary)",
    "eu-south-2": "Europe (Spain)",
    "eu-central-2": "Europe (Zurich)",
    "il-central-1": "Israel (Tel Aviv)",
    "me-central-1": "Middle East (UAE)",
}

# Lambda keeps this much of the account's concurrency unreserved: a reservation that would leave
# less is refused (Lambda Developer Guide, "Configuring reserved concurrency").
UNRESERVED_MINIMUM = 100
RESERVATIONS = ["OrchestratorReservedConcurrency", "ShoppingReservedConcurrency", "EvalReservedConcurrency"]

# The SAM CLI this repository is tested with; rust-cargolambda needs no beta opt-in there
# (it left the beta features in aws/aws-sam-cli#8526).
SAM_MINIMUM = (1, 170)


def template_defaults(template):
    """Every parameter's default, read without CloudFormation's tags (`!Ref` and the like)."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    with open(template) as f:
        parameters = yaml.load(f, Loader=Loader).get("Parameters", {})
    return {name: str(spec.get("Default", "")) for name, spec in parameters.items()}


def overrides(text):
    """`Key=Value Key2="a b"` (sam's --parameter-overrides syntax) as a dict."""
    pairs = re.findall(r'([A-Za-z0-9]+)=("[^"]*"|\S*)', text or "")
    return {k: v.strip('"') for k, v in pairs}


def parameters(template, samconfig, given):
    values = template_defaults(template)
    if samconfig.exists():
        with open(samconfig, "rb") as f:
            deploy = tomllib.load(f).get("default", {}).get("deploy", {}).get("parameters", {})
        saved = deploy.get("parameter_overrides", "")
        values.update(overrides(" ".join(saved) if isinstance(saved, list) else saved))
    for arg in given:
        values.update(overrides(arg))
    return values


class Report:
    def __init__(self, out=sys.stdout):
        self.out, self.failed = out, 0

    def ok(self, what, detail):
        print(f"ok    {what}: {detail}", file=self.out)

    def fail(self, what, sentence):
        self.failed += 1
        print(f"FAIL  {what}: {sentence}", file=self.out)


def aws_error(e):
    if isinstance(e, botocore.exceptions.ClientError):
        return f"{e.response['Error'].get('Code')}: {e.response['Error'].get('Message')}"
    return str(e)


def check_identity(report, session):
    try:
        who = session.client("sts").get_caller_identity()
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
        report.fail("credentials", f"no usable AWS credentials ({aws_error(e)}): run `aws configure sso` "
                    "and `aws sso login`, or set AWS_PROFILE to a configured profile.")
        return False
    report.ok("credentials", f"{who['Arn']} in account {who['Account']}")
    return True


def check_region(report, region):
    if not region:
        report.fail("region", "no region is set: export AWS_REGION=<region> or run `aws configure set region <region>`.")
        return False
    if region in NO_FUNCTION_URLS:
        report.fail("region", f"{region} ({NO_FUNCTION_URLS[region]}) has no Lambda function URLs, which the "
                    "streaming endpoint is: deploy in another region (e.g. AWS_REGION=us-east-1 or eu-west-1).")
        return False
    report.ok("region", f"{region} has Lambda function URLs (response streaming: see the Builder Center's "
              "capabilities page for this region; docs/deployment.md)")
    return True


def check_concurrency(report, session, params):
    try:
        reserved = {name: int(params.get(name) or 0) for name in RESERVATIONS}
    except ValueError:
        report.fail("concurrency", "a *ReservedConcurrency parameter is not a whole number: give 0 or more.")
        return
    wanted = sum(reserved.values())
    try:
        settings = session.client("lambda").get_account_settings()
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
        report.fail("concurrency", f"cannot read the Lambda account settings ({aws_error(e)}): "
                    "allow lambda:GetAccountSettings to the deployer, or set every *ReservedConcurrency to 0.")
        return
    limit = settings["AccountLimit"]["ConcurrentExecutions"]
    unreserved = settings["AccountLimit"]["UnreservedConcurrentExecutions"]
    if wanted and unreserved - wanted < UNRESERVED_MINIMUM:
        named = ", ".join(f"{k}={v}" for k, v in reserved.items() if v)
        report.fail("concurrency", f"the parameters reserve {wanted} concurrent executions ({named}) but the "
                    f"account has {unreserved} unreserved of {limit} and Lambda keeps {UNRESERVED_MINIMUM}: set "
                    f"them to 0 (the default), or ask Service Quotas for 'Concurrent executions' of at least "
                    f"{limit - unreserved + wanted + UNRESERVED_MINIMUM}.")
        return
    report.ok("concurrency", f"account limit {limit}, {unreserved} unreserved; the parameters reserve {wanted}")


def check_logging_role(report, session, params, region):
    if params.get("CreateApiGatewayLoggingRole") == "true":
        report.ok("API Gateway logging role", "the stack creates it (CreateApiGatewayLoggingRole=true)")
        return
    try:
        # The CLI prints `null` for an account with none: the field is absent from the answer.
        arn = session.client("apigateway").get_account().get("cloudwatchRoleArn")
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
        report.fail("API Gateway logging role", f"cannot read API Gateway's account settings ({aws_error(e)}): "
                    "allow apigateway:GET on arn:aws:apigateway:<region>::/account to the deployer.")
        return
    fix = ("deploy with CreateApiGatewayLoggingRole=true, or set a role that trusts apigateway.amazonaws.com "
           "with AmazonAPIGatewayPushToCloudWatchLogs: `aws apigateway update-account --patch-operations "
           "op=replace,path=/cloudwatchRoleArn,value=<role ARN>`.")
    if not arn:
        report.fail("API Gateway logging role", f"{region} has no API Gateway CloudWatch role, which the REST "
                    f"API's access logs need: {fix}")
        return
    try:
        session.client("iam").get_role(RoleName=arn.rsplit("/", 1)[-1])
    except botocore.exceptions.ClientError as e:
        if e.response["Error"].get("Code") == "NoSuchEntity":
            report.fail("API Gateway logging role", f"the account's role {arn} no longer exists: {fix}")
            return
        report.ok("API Gateway logging role", f"{arn} (not verified: {aws_error(e)})")
        return
    report.ok("API Gateway logging role", arn)


def version(command):
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out.stdout + out.stderr)
    return tuple(int(x) for x in match.groups() if x is not None) if match and out.returncode == 0 else None


def check_tools(report):
    activate = "activate the venv that has it (`. .venv/bin/activate`), or `pipx install cargo-lambda` (or `uv tool install cargo-lambda`)"
    sam = shutil.which("sam")
    sam_version = version([sam, "--version"]) if sam else None
    if not sam_version:
        report.fail("sam", f"the SAM CLI is not on PATH: {activate.replace('cargo-lambda', 'aws-sam-cli')}.")
    elif sam_version[:2] < SAM_MINIMUM:
        report.fail("sam", f"SAM CLI {'.'.join(map(str, sam_version))} is older than "
                    f"{'.'.join(map(str, SAM_MINIMUM))}, which builds rust-cargolambda without beta features: "
                    "`pip install -U aws-sam-cli` in the venv (or `pipx upgrade aws-sam-cli`).")
    else:
        report.ok("sam", f"{sam} {'.'.join(map(str, sam_version))}")
    cargo_lambda = shutil.which("cargo-lambda")
    if not cargo_lambda:
        report.fail("cargo-lambda", f"cargo-lambda is not on PATH, where `sam build` looks for it: {activate}.")
    else:
        report.ok("cargo-lambda", cargo_lambda)
    # cargo-lambda cross-compiles for arm64 with zig: a `zig` on PATH, or the ziglang package of
    # the python3 on PATH (what `pip install cargo-lambda` brings).
    zig = shutil.which("zig")
    python = shutil.which("python3")
    if zig:
        report.ok("zig", zig)
    elif python and version([python, "-m", "ziglang", "version"]):
        report.ok("zig", f"{python} -m ziglang")
    else:
        report.fail("zig", "zig is not on PATH (nor the ziglang package of the python3 on PATH), which cargo-lambda "
                    f"needs for arm64: {activate}, or install zig from ziglang.org.")


def check_secrets(report, session, params):
    wanted = []
    if params.get("AuthMode") == "jwt":
        if not params.get("JwtPublicKeySecretArn"):
            report.fail("secrets", "AuthMode jwt needs JwtPublicKeySecretArn, the ARN of a secret holding the "
                        "issuer's RS256 public key: `aws secretsmanager create-secret --name baton/jwt-public-key "
                        "--secret-string file://issuer-public.pem` and pass its ARN.")
        else:
            wanted.append("JwtPublicKeySecretArn")
    wanted += [name for name in ("OpenAiApiKeySecretArn", "ForethoughtTokenSecretArn") if params.get(name)]
    if not wanted and params.get("AuthMode") != "jwt":
        report.ok("secrets", "none needed (iam mode, offline model)")
    client = session.client("secretsmanager")
    for name in wanted:
        arn = params[name]
        try:
            client.describe_secret(SecretId=arn)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            report.fail("secrets", f"{name} {arn} cannot be read ({aws_error(e)}): create it in this region "
                        "(`aws secretsmanager create-secret`) and pass the ARN it prints.")
            continue
        report.ok("secrets", f"{name} {arn}")


def check_config(report, session, params):
    bucket, path = params.get("ConfigBucket"), params.get("ConfigParameterPath")
    config_file = params.get("ConfigFile") or "baton.yaml"
    if bucket:
        key = f"{params.get('ConfigPrefix', '')}{config_file}"
        try:
            listed = session.client("s3").list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            report.fail("config", f"cannot list s3://{bucket}/ ({aws_error(e)}): create the bucket in this "
                        "account, or fix ConfigBucket.")
            return
        if not any(o["Key"] == key for o in listed.get("Contents", [])):
            report.fail("config", f"s3://{bucket}/{key} does not exist: `aws s3 cp {config_file} s3://{bucket}/{key}`.")
            return
        report.ok("config", f"s3://{bucket}/{key}")
    elif path:
        name = f"{path}/{config_file}"
        try:
            session.client("ssm").get_parameter(Name=name)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            report.fail("config", f"SSM parameter {name} cannot be read ({aws_error(e)}): `aws ssm put-parameter "
                        f"--name {name} --type String --value file://{config_file}`.")
            return
        report.ok("config", f"ssm:{name}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="Key=Value template parameters (as sam deploy --parameter-overrides)")
    parser.add_argument("--region", help="the region to check (default: the AWS CLI's)")
    parser.add_argument("--template", default=ROOT / "template.yaml", type=Path)
    parser.add_argument("--samconfig", default=ROOT / "samconfig.toml", type=Path)
    args = parser.parse_args(argv)
    params = parameters(args.template, args.samconfig, args.overrides)
    report = Report()
    session = boto3.session.Session(region_name=args.region or os.environ.get("AWS_REGION") or None)
    region = session.region_name
    check_tools(report)
    if check_region(report, region) and check_identity(report, session):
        check_concurrency(report, session, params)
        check_logging_role(report, session, params, region)
        check_secrets(report, session, params)
        check_config(report, session, params)
    print(f"{report.failed} failed" if report.failed else "ready to deploy: sam build && sam deploy --guided")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
