"""The batch API over HTTP: real ``relay serve`` processes, the real fake upstream (SPEC §10)."""
