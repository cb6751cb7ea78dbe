"""Checkpoint rows keep room on their page for their next version (migration 0024)."""

import pytest

from tests.support.worker import action, enqueue

pytestmark = pytest.mark.django_db(transaction=True)

# A RUNNING checkpoint as CHECKPOINT_START inserts it (the columns it fills).
INSERT_RUNNING = """
INSERT INTO action_execution (execution_id, action_id, sequence, capability, capability_version,
                              effect, status, input_hash, external_key, attempt, fencing_token,
                              started_at)
VALUES (%(execution_id)s, %(action_id)s, %(sequence)s, 'NO_OP', 1, 'READ_ONLY', 'RUNNING',
        repeat('0', 64), %(external_key)s, 1, 1, clock_timestamp())
RETURNING (ctid::text::point)[0]::integer
"""
# Its success as CHECKPOINT_SUCCEED writes it: status, output and finished_at.
SUCCEED = """
UPDATE action_execution
   SET status = 'SUCCEEDED', output = '{"ok": true}', error_code = NULL, error_detail = NULL,
       finished_at = clock_timestamp()
 WHERE execution_id = %(execution_id)s AND action_id = 'a0'
RETURNING (ctid::text::point)[0]::integer
"""


def test_checkpoint_success__is_a_hot_update_on_a_page_filled_by_inserts(conn, make_flow):
    accepted = enqueue(conn, make_flow([action("a0", "NO_OP")]))
    ids = {"execution_id": accepted.execution_id}
    with conn.transaction(force_rollback=True):
        # Fill the page of the first checkpoint as inserts fill it: until a row goes elsewhere.
        def insert(sequence: int) -> int:
            action_id = f"a{sequence}"
            key = f"{accepted.execution_id}:{action_id}"
            row = {**ids, "action_id": action_id, "sequence": sequence, "external_key": key}
            return conn.execute(INSERT_RUNNING, row).fetchone()[0]

        first = insert(0)
        sequence = 1
        while insert(sequence) == first:
            sequence += 1
        assert sequence > 2, "the page held at most two checkpoints"

        assert conn.execute(SUCCEED, ids).fetchone()[0] == first, "the new version left its page"
        hot = conn.execute(
            "SELECT pg_stat_get_xact_tuples_hot_updated('action_execution'::regclass)"
        ).fetchone()[0]
        assert hot == 1
