"""The Lua scripts behind ``RedisState``: each multi-step operation is one atomic EVALSHA.

Kept as Python strings rather than ``.lua`` files so a wheel or container image cannot ship without
them (no package-data to forget). Each script reads the clock with ``redis.call('TIME')`` so replicas
with skewed clocks still agree on window boundaries, lease expiry and breaker deadlines. Redis ≥ 5
replicates script *effects*, so calling TIME before writing is safe.

Key layout (``<p>`` is the instance prefix, e.g. ``relay:``; see docs/state.md):

- ``<p>rl:<key>:<window_s>:<index>`` window counter (string), expires at the window's end + 1 s;
- ``<p>cc:<key>`` concurrency leases (sorted set: lease id → expiry in ms), expires after its newest lease;
- ``<p>br:<key_id>`` breaker record (JSON ``{"o": open_until_ms, "f": failures, "r": reason,
  "v": version, "t": trip_id, "p": probe_held_until_ms}``, no ``o`` when open until the version
  changes, ``p`` only while a half-open probe is held), expires 10 min after ``o`` (7 days when
  permanent);
- ``<p>bf:<key_id>`` the times (ms) of a closed key's latest 5xx/connection failures (list, at most
  the host's ``breaker.threshold`` entries, oldest first), expires ``breaker.window_s`` after the last;
  deleted by the opening it leads to; only written for a threshold above 1;
- ``<p>rr:<name>`` round-robin counter; ``<p>lru:<name>`` last use per member (sorted set);
- channel ``<p>breakers``: every change of a breaker record (trip, reset) publishes its key id there,
  from the same script, so replicas that mirror breaker records (``relay.state.mirror``) drop theirs.

Window counter names are derived inside the scripts from the key passed in KEYS plus the server's
window index, so they are not declared in KEYS. That is fine on a single Redis (and on a cluster
whose prefix carries a hash tag such as ``{relay}:``, since every key then lands in one slot).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from relay.state.base import BreakerRecord


def decode_breaker(raw: str | bytes, *, opened: bool = False) -> BreakerRecord:
    """A breaker record as the scripts store it (``<p>br:<key_id>``, the layout above); ``opened``:
    TRIP's word that it wrote this opening."""
    data = orjson.loads(raw)
    open_ms = data.get("o")
    return BreakerRecord(
        None if open_ms is None else open_ms / 1000,
        int(data.get("f", 0)),
        str(data.get("r", "")),
        str(data.get("v", "")),
        int(data.get("t", 0)),
        opened,
    )


# KEYS[i]: base key of check i (<p>rl:<key> or <p>cc:<key>).
# ARGV: lease_id, lease_ms, slack_ms, then per check: kind, limit, window_s, amount.
# Returns {1, 0, 0} when admitted, else {0, index of the failing check (1-based), retry_after_ms}.
RESERVE = """
local t = redis.call('TIME')
local sec = tonumber(t[1])
local now_ms = sec * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease_id = ARGV[1]
local lease_ms = tonumber(ARGV[2])
local slack_ms = tonumber(ARGV[3])
local n = #KEYS
local wkeys = {}
for i = 1, n do
  local j = 4 + (i - 1) * 4
  local kind = ARGV[j]
  local limit = tonumber(ARGV[j + 1])
  if kind == 'concurrency' then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now_ms)
    if not redis.call('ZSCORE', KEYS[i], lease_id) and redis.call('ZCARD', KEYS[i]) + 1 > limit then
      return {0, i, 1000}
    end
  else
    local window = tonumber(ARGV[j + 2])
    local index = math.floor(sec / window)
    local wkey = KEYS[i] .. ':' .. ARGV[j + 2] .. ':' .. index
    wkeys[i] = wkey
    local used = tonumber(redis.call('GET', wkey) or '0')
    local ok
    if kind == 'window' then
      ok = used + tonumber(ARGV[j + 3]) <= limit
    else
      ok = used < limit
    end
    if not ok then
      local retry_ms = (index + 1) * window * 1000 - now_ms
      if retry_ms < 1000 then retry_ms = 1000 end
      return {0, i, retry_ms}
    end
  end
end
for i = 1, n do
  local j = 4 + (i - 1) * 4
  local kind = ARGV[j]
  if kind == 'concurrency' then
    redis.call('ZADD', KEYS[i], now_ms + lease_ms, lease_id)
    if redis.call('PTTL', KEYS[i]) < lease_ms + slack_ms then
      redis.call('PEXPIRE', KEYS[i], lease_ms + slack_ms)
    end
  elseif kind == 'window' then
    local amount = tonumber(ARGV[j + 3])
    if amount > 0 then
      local window = tonumber(ARGV[j + 2])
      redis.call('INCRBY', wkeys[i], amount)
      redis.call('PEXPIREAT', wkeys[i], (math.floor(sec / window) + 1) * window * 1000 + slack_ms)
    end
  end
end
return {1, 0, 0}
"""

# KEYS[i]: base window key of check i (<p>rl:<key>). ARGV: n, slack_ms, then per check: limit,
# window_s, amount. Grants the most (up to n) that fit every check and adds them all; returns {granted,
# 0, 0}, or {0, index of the check with no room (1-based), retry_after_ms}.
RESERVE_MANY = """
local t = redis.call('TIME')
local sec = tonumber(t[1])
local now_ms = sec * 1000 + math.floor(tonumber(t[2]) / 1000)
local grant = tonumber(ARGV[1])
local slack_ms = tonumber(ARGV[2])
local wkeys = {}
local worst, retry_ms = 0, 0
for i = 1, #KEYS do
  local j = 3 + (i - 1) * 3
  local window = tonumber(ARGV[j + 1])
  local amount = tonumber(ARGV[j + 2])
  local index = math.floor(sec / window)
  wkeys[i] = KEYS[i] .. ':' .. ARGV[j + 1] .. ':' .. index
  if amount > 0 then
    local room = math.floor((tonumber(ARGV[j]) - tonumber(redis.call('GET', wkeys[i]) or '0')) / amount)
    if room < grant then
      grant = room
      worst = i
      retry_ms = (index + 1) * window * 1000 - now_ms
    end
  end
end
if grant <= 0 then
  if retry_ms < 1000 then retry_ms = 1000 end
  return {0, worst, retry_ms}
end
for i = 1, #KEYS do
  local j = 3 + (i - 1) * 3
  local amount = tonumber(ARGV[j + 2])
  if amount > 0 then
    local window = tonumber(ARGV[j + 1])
    redis.call('INCRBY', wkeys[i], grant * amount)
    redis.call('PEXPIREAT', wkeys[i], (math.floor(sec / window) + 1) * window * 1000 + slack_ms)
  end
end
return {grant, 0, 0}
"""

# KEYS: base window keys of the adds (<p>rl:<key>), then concurrency keys to release (<p>cc:<key>).
# ARGV: lease_id, slack_ms, number of adds, then per add: window_s, amount.
COMMIT = """
local sec = tonumber(redis.call('TIME')[1])
local lease_id = ARGV[1]
local slack_ms = tonumber(ARGV[2])
local nadds = tonumber(ARGV[3])
for i = 1, nadds do
  local window = tonumber(ARGV[2 + i * 2])
  local amount = tonumber(ARGV[3 + i * 2])
  local index = math.floor(sec / window)
  local wkey = KEYS[i] .. ':' .. ARGV[2 + i * 2] .. ':' .. index
  redis.call('INCRBY', wkey, amount)
  redis.call('PEXPIREAT', wkey, (index + 1) * window * 1000 + slack_ms)
end
for i = nadds + 1, #KEYS do
  redis.call('ZREM', KEYS[i], lease_id)
end
return 0
"""

# KEYS: concurrency keys (<p>cc:<key>). ARGV: lease_ms, slack_ms, then per key the lease id held there.
# Moves each lease that has not expired yet to now + lease_ms (never re-adds one that expired or was
# released: its slot may be another request's). Returns how many were renewed.
RENEW = """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease_ms = tonumber(ARGV[1])
local slack_ms = tonumber(ARGV[2])
local renewed = 0
for i = 1, #KEYS do
  local lease_id = ARGV[2 + i]
  local expires = redis.call('ZSCORE', KEYS[i], lease_id)
  if expires and tonumber(expires) > now_ms then
    redis.call('ZADD', KEYS[i], now_ms + lease_ms, lease_id)
    if redis.call('PTTL', KEYS[i]) < lease_ms + slack_ms then
      redis.call('PEXPIRE', KEYS[i], lease_ms + slack_ms)
    end
    renewed = renewed + 1
  end
end
return renewed
"""

# KEYS: base window keys (<p>rl:<key>). ARGV: per key: window_s, amount.
# Takes amount back from each key's current window, never below zero; DECRBY keeps the counter's TTL.
REFUND = """
local sec = tonumber(redis.call('TIME')[1])
for i = 1, #KEYS do
  local window = tonumber(ARGV[i * 2 - 1])
  local wkey = KEYS[i] .. ':' .. ARGV[i * 2 - 1] .. ':' .. math.floor(sec / window)
  local used = tonumber(redis.call('GET', wkey) or '0')
  local take = math.min(used, tonumber(ARGV[i * 2]))
  if take > 0 then
    redis.call('DECRBY', wkey, take)
  end
end
return 0
"""

# KEYS[1]: <p>br:<key_id>; KEYS[2]: <p>bf:<key_id> (a closed key's recent failure times).
# ARGV: mode ('permanent' | 'retry' | 'backoff'), retry_after_ms, reason, version,
#       ttl_after_open_ms, permanent_ttl_ms, max_backoff_ms, channel, key_id, seen (-1: unconditional),
#       threshold, window_ms.
# Returns {record as JSON (the same encoding as stored; '' when there is none), 1 if this call wrote
# the opening else 0}; publishes key_id on channel if it wrote. A backoff failure of a closed key (no
# record) opens it only as the threshold-th failure within window_ms (SPEC §6 tuning). ``t`` is the
# opening's trip id (ms, rising per key), ``p`` the half-open probe's hold (ms; written by PROBE,
# dropped by any new opening).
TRIP = """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mode = ARGV[1]
local failures = 0
local current = 0
local old_open = nil
local raw = redis.call('GET', KEYS[1])
if raw then
  local ok, old = pcall(cjson.decode, raw)
  if ok and type(old) == 'table' and old.v == ARGV[4] and tonumber(old.f) then
    -- an auth failure is sticky: only a new version (or a reset) reopens the key
    -- (a second 401 of the same version finds it open already: nothing is written or logged)
    if old.o == nil then return {raw, 0} end
    failures = tonumber(old.f)
    current = tonumber(old.t) or 0
    old_open = tonumber(old.o)
  else
    raw = false
  end
end
local seen = tonumber(ARGV[10])
-- a failure of a request that chose the key before its current state: counts for nothing
if mode == 'backoff' and seen >= 0 and seen ~= current then return {raw or '', 0} end
local threshold = tonumber(ARGV[11])
if mode == 'backoff' and not raw and threshold > 1 then
  local window_ms = tonumber(ARGV[12])
  redis.call('RPUSH', KEYS[2], now_ms)
  redis.call('LTRIM', KEYS[2], -threshold, -1)
  redis.call('PEXPIRE', KEYS[2], window_ms)
  local oldest = tonumber(redis.call('LINDEX', KEYS[2], 0))
  if redis.call('LLEN', KEYS[2]) < threshold or now_ms - oldest > window_ms then return {'', 0} end
end
redis.call('DEL', KEYS[2])
local trip_id = now_ms
if trip_id <= current then trip_id = current + 1 end
local record = {f = failures, r = ARGV[3], v = ARGV[4], t = trip_id}
local ttl_ms
if mode == 'permanent' then
  ttl_ms = tonumber(ARGV[6])
else
  local open_ms
  if mode == 'retry' then
    open_ms = tonumber(ARGV[2])
    if old_open and old_open - now_ms > open_ms then open_ms = old_open - now_ms end
  else
    failures = failures + 1
    record.f = failures
    open_ms = tonumber(ARGV[7])
    if failures <= 41 then open_ms = math.min(open_ms, 1000 * 2 ^ (failures - 1)) end
  end
  record.o = now_ms + open_ms
  ttl_ms = open_ms + tonumber(ARGV[5])
end
local encoded = cjson.encode(record)
redis.call('SET', KEYS[1], encoded, 'PX', math.max(1, math.floor(ttl_ms)))
redis.call('PUBLISH', ARGV[8], ARGV[9])
return {encoded, 1}
"""

# KEYS[1]: <p>br:<key_id>. ARGV: channel, key_id, seen (-1: unconditional).
# Closes the breaker (only the opening ``seen`` when given); publishes and returns 1 if it deleted a
# record, else 0.
RESET = """
local seen = tonumber(ARGV[3])
if seen >= 0 then
  local raw = redis.call('GET', KEYS[1])
  if not raw then return 0 end
  local ok, old = pcall(cjson.decode, raw)
  if ok and type(old) == 'table' and (tonumber(old.t) or 0) ~= seen then return 0 end
end
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('PUBLISH', ARGV[1], ARGV[2])
  return 1
end
return 0
"""

# KEYS[1]: <p>br:<key_id>. ARGV: trip_id, hold_ms.
# Returns 1 if the caller took the half-open probe of that opening, else 0. The record keeps its TTL
# and nothing is published: the hold matters only to this script, and any trip or reset replaces it.
PROBE = """
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local ok, rec = pcall(cjson.decode, raw)
if not ok or type(rec) ~= 'table' or (tonumber(rec.t) or 0) ~= tonumber(ARGV[1]) then return 0 end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local open_until = tonumber(rec.o)
if open_until == nil or open_until > now_ms then return 0 end
if rec.p and tonumber(rec.p) > now_ms then return 0 end
rec.p = now_ms + tonumber(ARGV[2])
redis.call('SET', KEYS[1], cjson.encode(rec), 'KEEPTTL')
return 1
"""

# KEYS: breaker keys (<p>br:<key_id>), then the counter key (<p>rr:<name>).
# Returns the breaker values (nil where absent) followed by the incremented counter.
# KEYS[1] breaker record; ARGV[1] the opening whose probe is given back. A probe that ended without
# tripping or closing the key (a short 429, a cancelled attempt) frees the key for the next probe at
# once instead of holding it for the probe's whole deadline.
RELEASE_PROBE = """
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local ok, rec = pcall(cjson.decode, raw)
if not ok or type(rec) ~= 'table' or not rec.p then return 0 end
if (tonumber(rec.t) or 0) ~= tonumber(ARGV[1]) then return 0 end
rec.p = nil
redis.call('SET', KEYS[1], cjson.encode(rec), 'KEEPTTL')
return 1
"""

PICK = """
local nb = #KEYS - 1
local out = {}
if nb > 0 then out = redis.call('MGET', unpack(KEYS, 1, nb)) end
out[nb + 1] = redis.call('INCR', KEYS[nb + 1])
return out
"""


class Script(AsyncScript):
    """A script run by EVALSHA that outlasts a script cache emptied again between redis-py's reload and
    its retry (a second ``SCRIPT FLUSH``, a Redis restarted twice): NOSCRIPT means the script did not
    run, so loading it and trying again cannot apply it twice. No pipeline calls it; the success path
    is one EVALSHA, as redis-py's own."""

    async def __call__(  # type: ignore[override]
        self, keys: Sequence[Any] | None = None, args: Iterable[Any] | None = None, client: Any = None
    ) -> Any:
        client = client if client is not None else self.registered_client
        keys = keys or ()
        argv = (*keys, *(args or ()))
        for _ in range(3):
            try:
                return await client.evalsha(self.sha, len(keys), *argv)
            except NoScriptError:
                self.sha = await client.script_load(self.script)
        return await client.evalsha(self.sha, len(keys), *argv)
