"""What the provider adds to a client's API tokens: the tenant claim, as an identity provider's
mapper would (Keycloak's hard-coded claim, Auth0's action)."""

from django.db import models
from oauth2_provider.models import Application


class ClientClaims(models.Model):
    application = models.OneToOneField(Application, on_delete=models.CASCADE)
    tenant = models.CharField(max_length=100)

    def __str__(self) -> str:
        return f"{self.application.client_id}: {self.tenant}"
