from django.db import migrations, models


class Migration(migrations.Migration):
    """The failure that started a compensation, whole: its error detail beside its code
    (compensation_cause), so a COMPENSATED execution shows why it compensated, not the last
    error of a compensation step. A nullable column: nothing is rewritten."""

    dependencies = [
        ("executions", "0032_route_park_peers_by_key"),
    ]

    operations = [
        migrations.AddField(
            model_name="execution",
            name="compensation_detail",
            field=models.TextField(
                blank=True,
                help_text="The error detail its forward path failed with, once it compensates.",
                null=True,
            ),
        ),
    ]
