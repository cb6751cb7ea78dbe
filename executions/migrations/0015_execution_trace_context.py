from django.db import migrations, models


class Migration(migrations.Migration):
    """The trace context an execution's runs continue. A nullable column without a default:
    PostgreSQL adds it without rewriting or scanning the table."""

    dependencies = [
        ("executions", "0014_compensation_status"),
    ]

    operations = [
        migrations.AddField(
            model_name="execution",
            name="trace_context",
            field=models.JSONField(
                blank=True,
                editable=False,
                help_text="The W3C trace context (traceparent, tracestate) of the acceptance; "
                "null when tracing was off.",
                null=True,
            ),
        ),
    ]
