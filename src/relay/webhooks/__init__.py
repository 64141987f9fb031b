"""Completion webhooks (SPEC §10.10): the outbox written when a batch finishes, and its deliverer."""
