"""How Relay reaches providers: its HTTP client (``client``) over pooled connections (``connection``).

Nothing here knows about keys, shapes or breakers; the pipeline, the webhook deliverer and the offload
poller call :class:`Upstream` and read its two errors.
"""

from .client import Upstream, UpstreamConnectionError, UpstreamResponse, UpstreamTimeout

__all__ = ["Upstream", "UpstreamConnectionError", "UpstreamResponse", "UpstreamTimeout"]
