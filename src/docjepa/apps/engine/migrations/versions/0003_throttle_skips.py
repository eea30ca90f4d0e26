"""Sign-in throttling (failures per account and per client address) and per-user skip lists.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sign_in_failures",
        sa.Column("key", sa.String(320), primary_key=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_at", sa.Float(), nullable=False),
        sa.Column("blocked_until", sa.Float(), nullable=False),
    )
    op.create_table(
        "skips",
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("task_id", sa.Integer(), sa.ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("until", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("skips")
    op.drop_table("sign_in_failures")
