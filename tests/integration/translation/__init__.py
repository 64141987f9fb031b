"""Cross-shape translation over HTTP (SPEC §7.3): one ``relay serve`` (SQLite: translation does not
depend on the backend) and the session's fake upstream, driven by the official SDKs."""
