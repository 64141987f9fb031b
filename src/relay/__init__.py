"""Relay, a self-hosted LLM gateway. Importing the package does nothing but expose the version."""

__version__ = "0.1.0"
