"""The queue's fenced protocol (docs/worker-protocol.md): claims, leases, checkpoints, waits,
route limits, finalisation, compensation, cancellation, the operators' writes and the audit trail.

Every write after a claim is fenced (id, fencing token, expected status) and raises a named error
when it finds no row; statements live in executions/sql/, plans of them in steps.py.
"""
