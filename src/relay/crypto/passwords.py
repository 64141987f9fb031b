"""User passwords: argon2id with OWASP's minimum parameters (19 MiB, 2 passes, 1 lane).

Hashing is deliberately slow (tens of milliseconds), so it runs in a worker thread: the event loop
keeps serving while one user logs in. The hasher is an immutable parameter set, not state.
"""

from __future__ import annotations

import asyncio

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

_HASHER = PasswordHasher(time_cost=2, memory_cost=19 * 1024, parallelism=1)


async def hash_password(password: str) -> str:
    return await asyncio.to_thread(_HASHER.hash, password)


async def verify_password(password_hash: str | None, password: str) -> bool:
    if not password_hash:
        return False

    def check() -> bool:
        try:
            return bool(_HASHER.verify(password_hash, password))
        except (VerificationError, InvalidHashError):
            return False

    return await asyncio.to_thread(check)
