"""The Workers page's route controls: the permission to pause and resume a route."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("reconciliation", "0004_compensation_permission"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="workerprocess",
            options={
                "default_permissions": ("view",),
                "permissions": [("pause_route", "Can pause and resume a route")],
                "verbose_name": "worker",
            },
        ),
    ]
