"""``python -m relay.fake_upstream``: the stand-alone entry point (tests and benchmarks spawn this)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .config import ConfigError, FakeConfig, KeyRule
from .server import serve


def parse_key_rule(text: str) -> KeyRule:
    """``GLOB=STATUS[:RETRY_AFTER]`` or ``GLOB=conn``, e.g. ``team-b-*=503:2``."""
    pattern, sep, outcome = text.rpartition("=")
    if not sep or not pattern:
        raise argparse.ArgumentTypeError(f"expected GLOB=STATUS[:RETRY_AFTER] or GLOB=conn, got {text!r}")
    if outcome == "conn":
        return KeyRule(pattern=pattern, disconnect=True)
    status, _, retry_after = outcome.partition(":")
    try:
        seconds = float(retry_after) if retry_after else None
        return KeyRule.from_dict({"pattern": pattern, "status": int(status), "retry_after": seconds})
    except (ValueError, ConfigError):
        raise argparse.ArgumentTypeError(f"bad status or retry-after in {text!r}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m relay.fake_upstream",
        description="A fast fake LLM provider (OpenAI and Anthropic APIs) for demos, tests and benchmarks.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000, help="0 picks a free port (printed on start)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="fixed delay before every response")
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="plus a uniform random 0..jitter delay")
    parser.add_argument("--chunk-delay-ms", type=float, default=0.0, help="delay between stream events")
    parser.add_argument(
        "--key-rule",
        type=parse_key_rule,
        action="append",
        default=[],
        metavar="GLOB=STATUS[:RETRY_AFTER]|GLOB=conn",
        help="make upstream keys matching GLOB fail (repeatable)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        config = FakeConfig(
            latency_ms=args.latency_ms,
            jitter_ms=args.jitter_ms,
            chunk_delay_ms=args.chunk_delay_ms,
            key_rules=args.key_rule,
        )
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}")
    serve(args.host, args.port, config)


if __name__ == "__main__":
    main()
