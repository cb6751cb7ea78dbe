"""The webhooks in the admin: a tenant's subscriptions (added and deleted through the same
services as the API; the secret is shown once, when added), and every delivery with its attempts,
last answer and error, read-only but for the action "Redeliver", behind its own permission
(`executions.redeliver_webhookdelivery`)."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from orquestador.errors import CodedError

from ..webhooks.config import webhook_config
from ..webhooks.models import (
    MAX_DESCRIPTION_CHARS,
    MAX_URL_CHARS,
    SUBSCRIBABLE,
    DeliveryStatus,
    WebhookDelivery,
    WebhookSubscription,
)
from ..webhooks.services import deliveries_redeliver, webhook_create, webhook_delete, webhook_status
from ..webhooks.targets import url_refusal
from .records import ReadOnlyAdmin

REDELIVER = "executions.redeliver_webhookdelivery"


class SubscriptionForm(forms.ModelForm):
    events = forms.MultipleChoiceField(
        choices=[(t.value, t.value) for t in SUBSCRIBABLE], widget=forms.CheckboxSelectMultiple
    )
    url = forms.CharField(max_length=MAX_URL_CHARS, widget=forms.URLInput(attrs={"size": 80}))
    description = forms.CharField(max_length=MAX_DESCRIPTION_CHARS, required=False)

    class Meta:
        model = WebhookSubscription
        fields = ("tenant", "url", "events", "description")

    def clean_url(self) -> str:
        url: str = self.cleaned_data["url"]
        config = webhook_config()
        refused = url_refusal(
            url,
            allow_http=config.allow_http,
            allow_private_networks=config.allow_private_networks,
        )
        if refused is not None:
            raise forms.ValidationError(f"{refused[1]} (rule: {refused[0]})")
        return url


@admin.register(WebhookSubscription)
class WebhookSubscriptionAdmin(admin.ModelAdmin):
    form = SubscriptionForm
    list_display = ("url", "tenant", "events", "status", "consecutive_failures", "created_at")
    list_filter = ("tenant",)
    search_fields = ("tenant", "url")
    readonly_fields = ("status", "consecutive_failures", "created_at")
    show_full_result_count = False
    list_per_page = 50

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        added = ("tenant", "url", "events", "description")
        return added if obj is None else (*added, *self.readonly_fields)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if obj is None else self.readonly_fields  # the add form: no row yet

    @admin.display(description="status")
    def status(self, obj: WebhookSubscription) -> str:
        return "—" if obj._state.adding else webhook_status(obj)  # the add form: no row yet

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # delete and add again: a subscription's secret is never shown twice

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        try:
            created, secret = webhook_create(
                tenant=obj.tenant, url=obj.url, events=obj.events, description=obj.description
            )
        except CodedError as exc:
            raise PermissionDenied(exc.detail) from None
        obj.pk, obj.created_at = created.pk, created.created_at
        self.message_user(
            request,
            f"Its signing secret, shown this once: {secret}",
            messages.WARNING,
        )

    def delete_model(self, request: HttpRequest, obj: WebhookSubscription) -> None:
        webhook_delete(tenant=obj.tenant, webhook_id=str(obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "event_type",
        "subscription",
        "status",
        "attempts",
        "last_response_code",
        "last_error",
        "next_attempt_at",
        "created_at",
    )
    list_filter = ("status",)
    list_select_related = ("event", "subscription")
    fields = (
        "event",
        "subscription",
        "execution_id",
        "status",
        "attempts",
        "last_response_code",
        "last_error",
        "last_response_body",
    )
    readonly_fields = fields
    uuid_search_fields = ("execution_id", "event_id")
    actions = ("redeliver",)
    ordering = ("-id",)

    @admin.display(description="event")
    def event_type(self, obj: WebhookDelivery) -> str:
        return obj.event.type

    def has_redeliver_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(REDELIVER)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # A POST naming the action without its permission is refused, not silently ignored.
        if request.method == "POST" and "redeliver" in request.POST.getlist("action"):
            if not self.has_redeliver_permission(request):
                raise PermissionDenied
        return super().changelist_view(request, extra_context)

    @admin.action(permissions=["redeliver"], description="Redeliver")
    def redeliver(self, request: HttpRequest, queryset: QuerySet) -> None:
        ids = list(
            queryset.filter(
                status__in=(DeliveryStatus.DELIVERED, DeliveryStatus.FAILED)
            ).values_list("id", flat=True)
        )
        if not ids:
            self.message_user(
                request,
                "Nothing to redeliver: the selected deliveries are still on their way.",
                messages.WARNING,
            )
            return
        count = deliveries_redeliver(ids=ids)
        self.message_user(
            request,
            f"{count} delivery(ies) will be sent again, retried for WEBHOOK_MAX_AGE_HOURS.",
            messages.SUCCESS,
        )
