"""The deployed shape of template.yaml, as AWS would build it, offline.

`deployed(params)` runs SAM's own translator (the `aws-sam-translator` package, what CloudFormation
runs for `Transform: AWS::Serverless-2016-10-31`) with these parameter values, then does what
CloudFormation does next with the translated template: drops the resources whose `Condition` is
false, picks the branch of each `Fn::If`, removes `AWS::NoValue`, and puts parameter values in for
`Ref`s to parameters. Other `Ref`s, `Fn::GetAtt` and `Fn::Sub` stay as they are.

The template read is `BATON_TEMPLATE` (default: the repository's template.yaml), and `samconfig.toml`
beside it, so the same tests can be run against another version of the files."""

import copy
import os
from functools import lru_cache
from pathlib import Path

import yaml
from samtranslator.translator.transform import transform

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = Path(os.environ.get("BATON_TEMPLATE", ROOT / "template.yaml"))
PSEUDO = {"AWS::Region": "us-east-1", "AWS::Partition": "aws", "AWS::AccountId": "123456789012"}
_NO_VALUE = object()


class _NoManagedPolicies:
    """The template names no managed policy by name, so the translator needs no IAM lookup."""

    def load(self):
        return {}


def _loader():
    """YAML with CloudFormation's short-form tags (`!Ref`, `!If`, ...) as their long-form dicts."""

    class Loader(yaml.SafeLoader):
        pass

    def construct(tag):
        name = tag if tag in ("Ref", "Condition") else f"Fn::{tag}"

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

    for tag in ["Ref", "Condition", "If", "Not", "Equals", "And", "Or", "Sub", "GetAtt", "Join", "Select", "Split"]:
        Loader.add_constructor(f"!{tag}", construct(tag))
    return Loader


@lru_cache(maxsize=None)
def source():
    """The template as written."""
    with open(TEMPLATE) as f:
        return yaml.load(f, Loader=_loader())


def _parameter_values(given):
    """Every parameter's value: the given one, else its default; lists split as CloudFormation does."""
    values = {}
    for name, spec in source().get("Parameters", {}).items():
        value = str(given.get(name, spec.get("Default", "")))
        values[name] = value.split(",") if spec.get("Type") == "CommaDelimitedList" else value
    return values


@lru_cache(maxsize=None)
def _translated(given):
    os.environ.setdefault("AWS_DEFAULT_REGION", PSEUDO["AWS::Region"])
    sam = copy.deepcopy(source())
    # As `sam validate` does: the code has been packaged to S3 before the transform runs.
    sam.setdefault("Globals", {}).setdefault("Function", {})["CodeUri"] = "s3://bucket/code.zip"
    return transform(sam, {**PSEUDO, **dict(given)}, _NoManagedPolicies())


class Deployed:
    """A translated template with its conditions decided."""

    def __init__(self, translated, params):
        self.params = params
        self._conditions = translated.get("Conditions", {})
        self._decided = {}
        self.resources = {}
        for name, resource in translated["Resources"].items():
            condition = resource.get("Condition")
            if condition is None or self.condition(condition):
                self.resources[name] = self.resolve(resource)

    def condition(self, name):
        if name not in self._decided:
            self._decided[name] = self._value(self._conditions[name])
        return self._decided[name]

    def _value(self, x):
        """The value of a condition expression."""
        if isinstance(x, dict) and len(x) == 1:
            ((fn, arg),) = x.items()
            if fn == "Ref" and arg in self.params:
                return self.params[arg]
            if fn == "Condition":
                return self.condition(arg)
            if fn == "Fn::Equals":
                a, b = (self._value(v) for v in arg)
                return str(a) == str(b)
            if fn == "Fn::Not":
                return not self._value(arg[0])
            if fn == "Fn::And":
                return all(self._value(v) for v in arg)
            if fn == "Fn::Or":
                return any(self._value(v) for v in arg)
            if fn == "Fn::Join":
                return arg[0].join(self._value(arg[1]))
        if isinstance(x, list):
            return [self._value(v) for v in x]
        return x

    def resolve(self, x):
        """`x` with its `Fn::If`s decided, `AWS::NoValue` removed and parameter `Ref`s filled in."""
        if isinstance(x, dict):
            if len(x) == 1:
                ((fn, arg),) = x.items()
                if fn == "Fn::If":
                    return self.resolve(arg[1] if self.condition(arg[0]) else arg[2])
                if fn == "Ref" and arg == "AWS::NoValue":
                    return _NO_VALUE
                if fn == "Ref" and arg in self.params:
                    return self.params[arg]
            out = {k: self.resolve(v) for k, v in x.items()}
            return {k: v for k, v in out.items() if v is not _NO_VALUE}
        if isinstance(x, list):
            return [v for v in (self.resolve(v) for v in x) if v is not _NO_VALUE]
        return x

    def of_type(self, kind):
        return {n: r for n, r in self.resources.items() if r["Type"] == kind}

    def props(self, name):
        return self.resources[name].get("Properties", {})


class Refused(Exception):
    """CloudFormation refuses these parameter values before creating anything: a rule's assertion
    failed. `args[0]` is the list of the failed assertions' descriptions, as CloudFormation shows them."""


def refusals(translated, params):
    """The `AssertDescription` of every assertion of the template's `Rules` that fails with these
    parameter values (a rule applies when it has no `RuleCondition` or that condition holds)."""
    judge = Deployed({"Resources": {}, "Conditions": {}}, params)
    failed = []
    for rule in translated.get("Rules", {}).values():
        if "RuleCondition" in rule and not judge._value(rule["RuleCondition"]):
            continue
        failed += [a["AssertDescription"] for a in rule["Assertions"] if not judge._value(a["Assert"])]
    return failed


def deployed(fresh=False, **given):
    """The stack these parameter values deploy (the others at their defaults); `fresh` translates
    again rather than reusing an earlier translation of the same values. Raises `Refused` when a
    rule of the template refuses the values, as CloudFormation would before creating anything."""
    given = {k: str(v) for k, v in given.items()}
    translate = _translated.__wrapped__ if fresh else _translated
    translated = translate(tuple(sorted(given.items())))
    params = {**PSEUDO, **_parameter_values(given)}
    failed = refusals(translated, params)
    if failed:
        raise Refused(failed)
    return Deployed(translated, params)
