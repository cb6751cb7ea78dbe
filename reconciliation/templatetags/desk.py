"""The admin home's view of the reconciliation desk, for those who may read cases."""

from django import template
from django.contrib.auth.models import AnonymousUser, PermissionsMixin

from reconciliation import selectors

register = template.Library()


@register.simple_tag
def desk_overview(user: PermissionsMixin | AnonymousUser) -> selectors.Overview | None:
    if not user.has_perm("reconciliation.view_reconciliationcase"):
        return None
    return selectors.overview()
