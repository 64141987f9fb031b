"""Standard Webhooks signing and the retry schedule (SPEC §10.10), as pure functions."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from relay.webhooks.schedule import RetrySchedule
from relay.webhooks.signing import signature, signed_headers, signing_key


def test_the_reference_vector_of_the_standard_webhooks_specification() -> None:
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    got = signature(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}')
    assert got == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_a_secret_without_the_prefix_is_its_utf8_bytes() -> None:
    secret = "plain-secret-ünïcode"
    assert signing_key(secret) == secret.encode()
    expected = hmac.new(secret.encode(), b"evt_1.42.{}", hashlib.sha256).digest()
    assert signature(secret, "evt_1", 42, b"{}") == "v1," + base64.b64encode(expected).decode()


def test_headers_carry_id_timestamp_and_signature_never_the_secret() -> None:
    secret = "whsec_" + base64.b64encode(bytes(range(32))).decode()
    headers = signed_headers(secret, "evt_1", 1700000000, b'{"a":1}')
    assert headers["webhook-id"] == "evt_1" and headers["webhook-timestamp"] == "1700000000"
    assert headers["webhook-signature"] == signature(secret, "evt_1", 1700000000, b'{"a":1}')
    assert headers["content-type"] == "application/json"
    assert all(secret not in value and secret[6:] not in value for value in headers.values())


def test_the_retry_schedule_and_its_window() -> None:
    schedule = RetrySchedule()
    assert [schedule.delay_after(n) for n in range(1, 9)] == [5, 30, 120, 600, 1800, 3600, 3600, 3600]
    assert schedule.retry_in(6, age_s=3600) == 3600
    assert schedule.retry_in(30, age_s=24 * 3600 - 3599) is None  # past 24 h: failed
    small = RetrySchedule(0.001)
    assert small.delay_after(1) == pytest.approx(0.005) and small.window_s == pytest.approx(86.4)
    for bad in (0, -1, 2):
        with pytest.raises(ValueError):
            RetrySchedule(bad)
