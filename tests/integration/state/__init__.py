"""The shared-state suite (``tests.fixtures.shared_state``): ``state`` runs each contract test on
MemoryState and on the real Redis at ``RELAY_TEST_REDIS_URL`` (never a mock), with a key prefix of
its own; ``new_redis_state`` and ``redis_admin`` for the Redis-only tests.
"""
