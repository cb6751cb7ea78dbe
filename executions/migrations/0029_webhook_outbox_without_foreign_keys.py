"""The outbox's references to the execution and to the event, kept without constraints in the
database (docs/adr/0020).

Each was checked at the commit of every finalising transaction that wrote an event: a lookup
that also locked the referenced row (the execution just ended, the event just written), one WAL
record each. Together a sixth of what the outbox trigger costs the finalising transaction: 73 µs
of PostgreSQL CPU per event with them, 61 without (the backend's CPU over 2,000 executions
finalised five per statement, medians of 15 alternated rounds).
What they guarded holds by construction: events and deliveries are written only together, by the
outbox trigger (or a ping), for the execution whose change is reported, deleted together by
purgehistory, and executions are never deleted. The Django relations and their cascades stay.
The reference to the subscription keeps its constraint: a subscription can be deleted while a
delivery to it is being written.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0028_route_rate_moments"),
    ]

    operations = [
        migrations.AlterField(
            model_name="webhookdelivery",
            name="event",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="deliveries",
                to="executions.webhookevent",
            ),
        ),
        migrations.AlterField(
            model_name="webhookevent",
            name="execution",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="executions.execution",
            ),
        ),
    ]
