"""Relay's Alembic environment, shipped inside the package so an installed wheel can migrate itself.

There is no ``alembic.ini``: :func:`relay.store.migrate.alembic_config` builds the configuration in
code, with ``script_location`` pointing at this directory. Applications migrate through
:mod:`relay.store.migrate` (``upgrade_to_head``), which hands ``env.py`` an open connection.

Writing the next revision (``versions/NNNN_<what>.py``, ``revision = "NNNN"``): change
``relay/store/tables.py``, then autogenerate against a database at the current head and clean the
result up by hand::

    from alembic import command
    from relay.store.migrate import alembic_config

    config = alembic_config()
    config.set_main_option("sqlalchemy.url", "postgresql://postgres@127.0.0.1/relay_dev")
    command.revision(config, message="what changed", autogenerate=True, rev_id="0002")

Revisions are frozen history: they spell out every column and constraint name (``op.f``) instead of
importing ``tables.py``, so editing the tables later cannot change what an old revision does.
"""
