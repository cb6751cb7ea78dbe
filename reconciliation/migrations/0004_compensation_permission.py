from django.db import migrations, models


class Migration(migrations.Migration):
    """The "compensate" resolution's permission, and room for a compensation step's action id
    ("<id>:compensate") on a case's probe."""

    dependencies = [
        ("reconciliation", "0003_case_probe"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="reconciliationcase",
            options={
                "default_permissions": ("view",),
                "permissions": [
                    ("fetch_provider_evidence", "Can ask the provider whether a write happened"),
                    ("resolve_write_happened", "Can resolve a case: the write happened"),
                    ("resolve_write_not_happened", "Can resolve a case: the write did not happen"),
                    ("abandon_execution", "Can abandon an execution in reconciliation"),
                    ("compensate_execution", "Can resolve a case: compensate its writes"),
                ],
                "verbose_name": "reconciliation case",
            },
        ),
        migrations.AlterField(
            model_name="caseprobe",
            name="action_id",
            field=models.CharField(max_length=120),
        ),
    ]
