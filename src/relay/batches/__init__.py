"""The Batches API (SPEC §10): submit, track, collect and cancel gateway-run batches; the durable queue
and the worker pool that run every item through the same pipeline as a live request."""
