"""Sign-in throttling counts failures only: an account's password checks in flight are kept apart (``pending``,
since ``pending_at``) to bound parallel guesses, instead of being counted as failures until they succeed.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sign_in_failures") as batch:
        batch.add_column(sa.Column("pending", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("pending_at", sa.Float(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("sign_in_failures") as batch:
        batch.drop_column("pending_at")
        batch.drop_column("pending")
