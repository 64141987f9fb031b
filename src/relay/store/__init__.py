"""The only code that runs SQL (SQLAlchemy Core on SQLite and Postgres)."""
