"""moto_server with DynamoDB's writes one at a time, as DynamoDB applies them.

moto's server handles requests on threads, and its DynamoDB backend checks a write's condition
and applies it without a lock: two racing `TransactWriteItems` (or conditional `PutItem` /
`UpdateItem`) can both pass a condition that only one may pass on DynamoDB, which serializes
conflicting writes (one of them fails with `TransactionCanceledException` or
`ConditionalCheckFailedException`). The store's contract tests race writers on purpose, so
this launcher makes each write atomic with one lock and then runs moto's own server, with the
same arguments as `moto_server`.
"""

import sys
import threading

from moto.dynamodb.models import DynamoDBBackend
from moto.server import main

_WRITES = threading.RLock()  # a transaction applies its items through the same methods


def _atomic(method):
    def write(self, *args, **kwargs):
        with _WRITES:
            return method(self, *args, **kwargs)

    return write


for _name in ("put_item", "update_item", "delete_item", "transact_write_items", "batch_write_item"):
    setattr(DynamoDBBackend, _name, _atomic(getattr(DynamoDBBackend, _name)))

if __name__ == "__main__":
    sys.exit(main())
