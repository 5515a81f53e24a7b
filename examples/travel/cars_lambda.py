"""The travel team's car rental, a Lambda function in Python: the tool `book_car` of
travel.yaml's `lambda_tools:` (docs/tools.md). Its event is the model's arguments; its answer,
JSON, is the tool's result; an exception is the tool's error, of which the model reads only the
message.

Deployed as any Python function (handler `cars_lambda.handler`); the Lambda tests run it under
`cargo lambda watch` through tests/lambda/python_runtime.py (tests/src/bin/python-lambda.rs).
"""

RATE_EUR = {"Lisbon": 39, "Porto": 35, "Madrid": 42}


def handler(event, context):
    city = event.get("city")
    days = event.get("days")
    if city not in RATE_EUR:
        raise ValueError(f"no cars in {city!r}; cities: {', '.join(sorted(RATE_EUR))}")
    if not isinstance(days, int) or not 1 <= days <= 30:
        raise ValueError("days must be a whole number from 1 to 30")
    return {
        "confirmation": f"CAR-{city[:3].upper()}-{days}D",
        "city": city,
        "days": days,
        "price_eur": RATE_EUR[city] * days,
    }
