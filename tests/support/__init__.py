"""Test doubles and helpers shared across the suite."""
