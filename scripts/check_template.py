"""Translates template.yaml with SAM's own translator, offline, and checks what would otherwise fail
silently in AWS: streaming on both endpoints (a misspelt REST property builds a buffered API), IAM auth by
default, the table's key schema and TTL, the schedule, and no secret passed as a plain parameter; and what a
production deployment needs: tracing, reserved concurrency, API access logs, a dead-letter queue for the
scheduled eval.

Run by scripts/test.sh with the virtual environment's Python (aws-sam-cli ships samtranslator)."""

import json
import os
import sys

import yaml
from samtranslator.translator.transform import transform


class NoManagedPolicies:
    """The template uses SAM policy templates only, so no IAM lookup is needed."""

    def load(self):
        return {}


def cfn_loader():
    # CloudFormation short-form tags (!Ref, !If, ...) as plain {"Fn::..."} dicts.
    class Loader(yaml.SafeLoader):
        pass

    def construct(tag):
        name = "Ref" if tag == "Ref" else f"Fn::{tag}"

        def build(loader, node):
            if isinstance(node, yaml.ScalarNode):
                value = loader.construct_scalar(node)
                if tag == "GetAtt":
                    value = value.split(".", 1)
            elif isinstance(node, yaml.SequenceNode):
                value = loader.construct_sequence(node, deep=True)
            else:
                value = loader.construct_mapping(node, deep=True)
            return {name: value}

        return build

    for tag in ["Ref", "If", "Not", "Equals", "Sub", "GetAtt", "Join", "Select", "Split"]:
        Loader.add_constructor(f"!{tag}", construct(tag))
    return Loader


def main(path):
    # The translator asks for a region (for ARNs); no AWS call is made.
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with open(path) as f:
        sam = yaml.load(f, Loader=cfn_loader())
    # As `sam validate` does: code is packaged to S3 before translation.
    sam.setdefault("Globals", {}).setdefault("Function", {})["CodeUri"] = "s3://bucket/code.zip"
    out = transform(sam, {"AWS::Region": "us-east-1", "AWS::Partition": "aws"}, NoManagedPolicies())
    resources = out["Resources"]
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    url = resources.get("OrchestratorFunctionUrl", {}).get("Properties", {})
    check(url.get("InvokeMode") == "RESPONSE_STREAM", "Function URL InvokeMode is RESPONSE_STREAM")
    auth = json.dumps(url.get("AuthType"))
    check("AWS_IAM" in auth, "Function URL is AWS_IAM by default")

    body = json.dumps(resources.get("ChatApi", {}).get("Properties", {}).get("Body", {}))
    check("response-streaming-invocations" in body, "REST API integration uses response-streaming-invocations")
    check("2021-11-15" in body, "REST API integration uses the streaming API version")
    endpoint = resources.get("ChatApi", {}).get("Properties", {}).get("EndpointConfiguration", {})
    check(endpoint.get("Types") == ["REGIONAL"], "REST API endpoint is REGIONAL")

    table = resources.get("Table", {}).get("Properties", {})
    keys = {k["AttributeName"]: k["KeyType"] for k in table.get("KeySchema", [])}
    check(keys == {"pk": "HASH", "sk": "RANGE"}, "table keys are pk (HASH) and sk (RANGE)")
    ttl = table.get("TimeToLiveSpecification", {})
    check(ttl == {"AttributeName": "ttl", "Enabled": True}, "table TTL is on attribute ttl")

    schedules = [r for r in resources.values() if r["Type"] == "AWS::Scheduler::Schedule"]
    check(len(schedules) == 1, "one EventBridge Scheduler schedule (ScheduleV2) for the eval")
    target = schedules[0]["Properties"].get("Target", {}) if schedules else {}
    check("EvalFailures" in json.dumps(target.get("DeadLetterConfig")), "the schedule has a dead-letter queue")

    stage = next((r["Properties"] for r in resources.values() if r["Type"] == "AWS::ApiGateway::Stage"), {})
    check(stage.get("TracingEnabled") is True, "REST API stage is traced (X-Ray)")
    check("ApiAccessLogs" in json.dumps(stage.get("AccessLogSetting")), "REST API stage writes access logs")

    functions = {n: r["Properties"] for n, r in resources.items() if r["Type"] == "AWS::Lambda::Function"}
    for name in ["OrchestratorFunction", "ShoppingFunction", "EvalFunction"]:
        check("ReservedConcurrentExecutions" in functions.get(name, {}), f"{name} has reserved concurrency")
    eval_dlq = json.dumps(functions.get("EvalFunction", {}).get("DeadLetterConfig"))
    check("EvalFailures" in eval_dlq, "the eval function sends failed runs to a dead-letter queue")

    for name, fn in resources.items():
        if fn["Type"] != "AWS::Lambda::Function":
            continue
        props = fn["Properties"]
        check(props.get("Architectures") == ["arm64"], f"{name} is arm64")
        check(props.get("Runtime") == "provided.al2023", f"{name} runs on provided.al2023")
        check(props.get("TracingConfig") == {"Mode": "Active"}, f"{name} is traced (X-Ray)")
        env = json.dumps(props.get("Environment", {}))
        for secret in ["OPENAI_API_KEY\"", "FORETHOUGHT_TOKEN\""]:
            check(secret not in env, f"{name} gets no plain {secret.strip(chr(34))} (secret ARNs only)")

    for name, param in sam.get("Parameters", {}).items():
        lowered = name.lower()
        if any(w in lowered for w in ["key", "token", "secret", "password"]):
            check(lowered.endswith("secretarn"), f"parameter {name} is a secret ARN, not a secret value")

    for f in failures:
        print(f"template check FAILED: {f}")
    if failures:
        sys.exit(1)
    print(f"template check: {path} translates, streaming, auth and production settings verified")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "template.yaml")
