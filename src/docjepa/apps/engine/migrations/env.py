"""Alembic environment of the data engine: runs on the connection ``Database.migrate`` hands over."""

from alembic import context

from docjepa.apps.engine.tables import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through docjepa.apps.engine.db.Database.migrate (docjepa engine init)")
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
