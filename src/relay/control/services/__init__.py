"""The control plane's logic, one module per noun, behind the ``/api`` routes and the dashboard alike:
services validate, mint ids and timestamps and render; the store writes what they give it as is.
Nothing here knows HTTP (no FastAPI, no Starlette)."""
