"""The response cache's request step (SPEC §19): ``key`` (the pure key function) and ``step``
(:class:`~relay.request.cache.step.CacheStep`: bypass rules, lookup, store, purge over a
``relay.state.response_cache.ResponseCache``). Live requests reach it through
``relay.inference.cached``, batch items through ``relay.batches.runner``; a policy without a ``cache``
block never does."""
