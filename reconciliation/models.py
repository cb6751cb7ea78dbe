"""The operators' view of the queue, as proxies of the execution models (no tables of their own).

`ReconciliationCase` is an execution that needs, or needed, an operator; `BlockedRequest` is a
request held by an execution. Both exist so the admin can list them apart from the plain
read-only execution admin, and so the resolutions have Django permissions of their own
(`reconciliation.<codename>`, granted to users or groups in the admin). Only "view" is a default
permission: cases are never added, changed or deleted through a form; every write is a service in
`reconciliation/services.py`.
"""

from executions.models import Execution, Request

from .permissions import CODENAMES


class ReconciliationCase(Execution):
    class Meta:
        proxy = True
        verbose_name = "reconciliation case"
        default_permissions = ("view",)
        permissions = CODENAMES


class BlockedRequest(Request):
    class Meta:
        proxy = True
        verbose_name = "blocked request"
        default_permissions = ("view",)
