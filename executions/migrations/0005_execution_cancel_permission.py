from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0004_drop_redundant_indexes"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="execution",
            options={"permissions": [("cancel_execution", "Can cancel an execution")]},
        ),
    ]
