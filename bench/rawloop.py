"""The raw baseline of bench/worker.py: a plain psycopg SKIP LOCKED queue loop, nothing else.

    python bench/rawloop.py DSN BATCH

Connects, prints "ready", waits for one line on stdin, then loops: claim up to BATCH due jobs
in one CTE (FOR UPDATE SKIP LOCKED, bumping a fencing token and setting a lease from the
database clock), then one fenced completion per job; each statement inside BEGIN/COMMIT, as
PERFORMANCE.md's anchor measured it. Exits when a claim finds nothing.
"""

import os
import sys

import psycopg

SCHEMA = """
CREATE TABLE raw_jobs (
    id bigserial PRIMARY KEY,
    state text NOT NULL DEFAULT 'PENDING',
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    attempts integer NOT NULL DEFAULT 0,
    fencing_token bigint NOT NULL DEFAULT 0,
    lease_owner text,
    lease_expires_at timestamptz,
    finished_at timestamptz
);
CREATE INDEX raw_jobs_due ON raw_jobs (next_attempt_at, id) WHERE state = 'PENDING';
"""
CLAIM = """
WITH c AS (
    SELECT id FROM raw_jobs
     WHERE state = 'PENDING' AND next_attempt_at <= now()
     ORDER BY next_attempt_at, id
     LIMIT %(n)s
       FOR UPDATE SKIP LOCKED
)
UPDATE raw_jobs AS j
   SET state = 'RUNNING', attempts = attempts + 1, fencing_token = fencing_token + 1,
       lease_owner = %(owner)s, lease_expires_at = clock_timestamp() + interval '60 s'
  FROM c
 WHERE j.id = c.id
RETURNING j.id, j.fencing_token
"""
COMPLETE = """
UPDATE raw_jobs
   SET state = 'SUCCEEDED', finished_at = clock_timestamp(), lease_owner = NULL
 WHERE id = %(id)s AND fencing_token = %(token)s AND lease_owner = %(owner)s
"""


def main(argv: list[str]) -> int:
    dsn, batch = argv[1], int(argv[2])
    owner = f"raw-{os.getpid()}"
    with psycopg.connect(dsn) as conn:
        print("ready", flush=True)
        sys.stdin.readline()
        while True:
            with conn.transaction():
                jobs = conn.execute(CLAIM, {"n": batch, "owner": owner}).fetchall()
            if not jobs:
                return 0
            for job_id, token in jobs:
                with conn.transaction():
                    conn.execute(COMPLETE, {"id": job_id, "token": token, "owner": owner})


if __name__ == "__main__":
    sys.exit(main(sys.argv))
