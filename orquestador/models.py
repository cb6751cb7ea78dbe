"""Who an operator is at the identity provider: the (issuer, subject) pair that names one person
whatever their Django username, kept from their first sign-in (orquestador/signin.py). The audit
and the two-person rule record it (reconciliation/services.py, approvals.py)."""

from django.conf import settings
from django.db import models
from django.db.models.functions import Now


class OperatorIdentity(models.Model):
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="provider_identity"
    )
    issuer = models.CharField(
        max_length=500
    )  # the ID token's iss, exactly as the provider wrote it
    subject = models.CharField(max_length=255)  # its sub: stable and unique within the issuer
    created_at = models.DateTimeField(db_default=Now())
    last_sign_in_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "operator_identity"
        verbose_name = "operator identity"
        verbose_name_plural = "operator identities"
        default_permissions = ("view",)
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="operator_identity_unique")
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"

    def as_audit(self) -> dict[str, str]:
        return {"issuer": self.issuer, "subject": self.subject}


def identity_of(operator: object) -> dict[str, str] | None:
    """{issuer, subject} of the provider that signed this Django user in, or None: a local
    account, or the prober (which is no user)."""
    pk = getattr(operator, "pk", None)
    if pk is None:
        return None
    row = OperatorIdentity.objects.filter(user_id=pk).values("issuer", "subject").first()
    return None if row is None else {"issuer": row["issuer"], "subject": row["subject"]}
