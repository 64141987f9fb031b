"""Guardrails (SPEC §20): a request step with one interface, ``check(stage, texts) → verdict``, over three
matchers (regex and PII from ``relay.domain.guardrails``, a webhook here), and the stream window that
redacts or blocks an answer as it arrives. A policy without guardrails never reaches this package."""
