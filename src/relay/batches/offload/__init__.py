"""Provider batch offload (SPEC §22): one module per provider batch API (``openai_api``,
``anthropic_api``) behind one seam (``provider``), mapping a provider's batch into the engine's terms."""
