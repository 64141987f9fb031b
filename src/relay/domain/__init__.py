"""Relay's nouns as plain data and validation rules. No I/O: nothing here touches a database,
Redis, the network or the clock beyond minting ids."""
