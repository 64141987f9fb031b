"""The control plane: catalog administration over HTTP (SPEC §11)."""
