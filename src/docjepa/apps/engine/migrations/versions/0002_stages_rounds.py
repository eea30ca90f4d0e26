"""Proposal stages and retraining rounds: who made an annotation (a person or the model), task priority
(uncertainty ranking), and one row per retraining round.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("annotations") as batch:
        batch.add_column(sa.Column("source", sa.String(16), nullable=False, server_default="human"))
    op.create_index("ix_annotations_source", "annotations", ["source"])
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("priority", sa.Float(), nullable=False, server_default="0"))
    op.create_table(
        "rounds",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("out", sa.String(1024), nullable=False),
        sa.Column("base_checkpoint", sa.String(1024), nullable=False),
        sa.Column("base_version", sa.String(128), nullable=False),
        sa.Column("new_checkpoint", sa.String(1024), nullable=True),
        sa.Column("new_version", sa.String(128), nullable=True),
        sa.Column("promoted", sa.Boolean(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("rounds")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("priority")
    op.drop_index("ix_annotations_source", "annotations")
    with op.batch_alter_table("annotations") as batch:
        batch.drop_column("source")
