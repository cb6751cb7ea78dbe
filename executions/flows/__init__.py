"""Flow definitions: their checks, publication, evaluation, JSON Pointers and canonical JSON."""
