"""Usage events (SPEC §8): ``event`` (the value, its attribution and route fields, the pricing rule)
and ``writer`` (the background writer of live events).

Deliberately empty: importing ``relay.usage.event`` must not import the writer, its metrics or the
store (the batch queue carries events and writes them itself).
"""
