"""The audit log (SPEC §21): who changed what in the control plane, chained so that tampering shows.

``context`` carries who is asking (actor, address, user agent, request id) from the HTTP layer to the
services; ``log`` builds entries and appends them in the caller's transaction; ``queries`` serves
``GET /api/audit``, ``/api/audit/verify`` and the export.
"""
