"""A fast fake LLM provider (OpenAI Chat/Responses/Embeddings, Anthropic Messages) for demos, tests and
benchmarks of the gateway. See docs/fake-upstream.md."""

from .app import build_app
from .config import FakeConfig, KeyRule
from .server import serve
from .token_counts import Completion, complete, input_tokens

__all__ = ["Completion", "FakeConfig", "KeyRule", "build_app", "complete", "input_tokens", "serve"]
