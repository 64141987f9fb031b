"""The OpenAI Batches façade over HTTP (SPEC §14 Batches): real ``relay serve`` processes on SQLite and
Postgres, the real fake upstream, reached with the official ``openai`` SDK and raw ``httpx``."""
