"""What the admin draws and says about flows and executions: a flow's state machine (diagram),
an execution's timeline and its SVG, the safety filter every inline SVG passes, and an execution
in sight (lease, takeovers, next attempt) in words. Pictures are made on the server
(docs/adr/0012)."""
