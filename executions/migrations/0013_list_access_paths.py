from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models
from django.db.models import Q

# Every execution carries its request's scope and owner, set by the database on insert from the
# request itself (whatever the INSERT says), so no writer can make them disagree.
COPY_ACCESS = """
CREATE FUNCTION execution_copy_access() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT r.scope, r.owner INTO NEW.scope, NEW.owner FROM request AS r WHERE r.id = NEW.request_id;
    RETURN NEW;
END
$$;
CREATE TRIGGER execution_copy_access BEFORE INSERT ON execution
    FOR EACH ROW EXECUTE FUNCTION execution_copy_access();
"""
UNCOPY_ACCESS = """
DROP TRIGGER execution_copy_access ON execution;
DROP FUNCTION execution_copy_access();
"""
# The executions written before the trigger. One statement: on a large table, run the migration
# when few executions are being accepted (docs/operations.md#upgrades).
BACKFILL = """
UPDATE execution AS e SET scope = r.scope, owner = r.owner
  FROM request AS r
 WHERE r.id = e.request_id AND (e.scope, e.owner) IS DISTINCT FROM (r.scope, r.owner)
"""


def _listed(*prefix: str) -> list[str]:
    return [*prefix, "created_at", "id"]


class Migration(migrations.Migration):
    """The lists' access paths (GET /api/v1/requests and /api/v1/executions): the executions'
    copies of their request's scope and owner, and the indexes each list filter walks, newest
    first. Built CONCURRENTLY, so writes go on while they build (hence not atomic)."""

    atomic = False

    dependencies = [
        ("executions", "0012_action_attempt_history"),
    ]

    operations = [
        migrations.AddField(
            model_name="execution",
            name="scope",
            field=models.CharField(
                db_default="", editable=False, help_text="Its request's tenant.", max_length=255
            ),
        ),
        migrations.AddField(
            model_name="execution",
            name="owner",
            field=models.CharField(
                db_default="", editable=False, help_text="Its request's owner.", max_length=255
            ),
        ),
        migrations.RunSQL(COPY_ACCESS, reverse_sql=UNCOPY_ACCESS),
        migrations.RunSQL(BACKFILL, reverse_sql=migrations.RunSQL.noop),
        AddIndexConcurrently(
            model_name="request",
            index=models.Index(fields=_listed("scope", "owner"), name="request_owner_list_idx"),
        ),
        RemoveIndexConcurrently(model_name="request", name="request_scope_owner_idx"),
        AddIndexConcurrently(
            model_name="request",
            index=models.Index(fields=_listed("scope"), name="request_tenant_list_idx"),
        ),
        AddIndexConcurrently(
            model_name="request",
            index=models.Index(fields=_listed("scope", "state"), name="request_state_list_idx"),
        ),
        AddIndexConcurrently(
            model_name="request",
            index=models.Index(fields=_listed("scope", "flow"), name="request_flow_list_idx"),
        ),
        AddIndexConcurrently(
            model_name="request",
            index=models.Index(
                fields=_listed("scope"),
                name="request_blocked_list_idx",
                condition=Q(blocked_by__isnull=False),
            ),
        ),
        AddIndexConcurrently(
            model_name="request",
            index=models.Index(fields=["scope", "updated_at"], name="request_updated_list_idx"),
        ),
        AddIndexConcurrently(
            model_name="execution",
            index=models.Index(fields=_listed("scope", "owner"), name="execution_owner_list_idx"),
        ),
        AddIndexConcurrently(
            model_name="execution",
            index=models.Index(fields=_listed("scope"), name="execution_tenant_list_idx"),
        ),
        AddIndexConcurrently(
            model_name="execution",
            index=models.Index(fields=_listed("scope", "status"), name="execution_status_list_idx"),
        ),
        AddIndexConcurrently(
            model_name="execution",
            index=models.Index(
                fields=_listed("scope", "error_code"),
                name="execution_error_list_idx",
                condition=Q(error_code__isnull=False),
            ),
        ),
        AddIndexConcurrently(
            model_name="execution",
            index=models.Index(
                fields=["scope", "finished_at"],
                name="execution_finished_list_idx",
                condition=Q(finished_at__isnull=False),
            ),
        ),
    ]
