"""A Lambda runtime for a Python handler, speaking the Lambda Runtime API as AWS documents it for a
custom runtime (https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html): get the next
invocation, call the handler with its event, post the answer, or post the error as
`{"errorMessage", "errorType"}`. The Lambda tests run a team's Python function through it under
`cargo lambda watch` (tests/src/bin/python-lambda.rs); in AWS the managed Python runtime does the same.

AWS's own runtime interface client (`awslambdaric` 4.2.2, PyPI) crashes with a segmentation fault
in its native `next` call against the emulator's answer, so the tests do not use it.

Usage: python_runtime.py MODULE.FUNCTION (the module importable from the working directory).
"""

import importlib
import json
import os
import sys
import urllib.request


def main(handler_name):
    module_name, function_name = handler_name.rsplit(".", 1)
    sys.path.insert(0, os.getcwd())
    handler = getattr(importlib.import_module(module_name), function_name)
    # Lambda gives `host:port`; `cargo lambda watch` a URL with a path of its own.
    runtime_api = os.environ["AWS_LAMBDA_RUNTIME_API"]
    if "://" not in runtime_api:
        runtime_api = "http://" + runtime_api
    api = runtime_api.rstrip("/") + "/2018-06-01/runtime/invocation"
    while True:
        with urllib.request.urlopen(api + "/next") as next_invocation:
            request_id = next_invocation.headers["Lambda-Runtime-Aws-Request-Id"]
            event = json.loads(next_invocation.read() or b"null")
        try:
            body, path = json.dumps(handler(event, None)).encode(), "/response"
        except Exception as error:  # the handler's error is the invocation's, as Lambda reports it
            answer = {"errorMessage": str(error), "errorType": type(error).__name__}
            body, path = json.dumps(answer).encode(), "/error"
        post = urllib.request.Request(api + "/" + request_id + path, data=body, method="POST")
        post.add_header("Content-Type", "application/json")
        if path == "/error":
            post.add_header("Lambda-Runtime-Function-Error-Type", "Unhandled")
        urllib.request.urlopen(post).close()


if __name__ == "__main__":
    main(sys.argv[1])
