"""Add `action_execution.effect`.

Every checkpoint that exists before this migration is classified NON_IDEMPOTENT_WRITE: nothing
recorded which of those writes were safe to repeat, so none is assumed safe. The column takes that
value as a one-off default for existing rows and keeps no default afterwards: new checkpoints must
carry the effect their trusted adapter declares. Reversing drops the column and its constraint and
leaves migrations 0001 and 0002 as they were.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("executions", "0002_checkpoints")]

    operations = [
        migrations.AddField(
            model_name="actionexecution",
            name="effect",
            field=models.CharField(
                choices=[
                    ("READ_ONLY", "Read Only"),
                    ("IDEMPOTENT_WRITE", "Idempotent Write"),
                    ("NON_IDEMPOTENT_WRITE", "Non Idempotent Write"),
                ],
                default="NON_IDEMPOTENT_WRITE",
                help_text="Declared by the trusted adapter or contract, never by the flow.",
                max_length=24,
            ),
            preserve_default=False,
        ),
        migrations.AddConstraint(
            model_name="actionexecution",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("effect__in", ["READ_ONLY", "IDEMPOTENT_WRITE", "NON_IDEMPOTENT_WRITE"])
                ),
                name="action_execution_effect_valid",
            ),
        ),
    ]
