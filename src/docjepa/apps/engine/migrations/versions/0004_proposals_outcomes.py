"""Provenance the server owns and four eyes on every change: one row per proposal the model made (its version,
candidates and scores), and for each annotation the proposal it came from, what became of it (accepted as
proposed, refined with clicks, edited, drawn without a proposal, not answerable, automatic), the clicks sent to
the model, and who made its current content (a reviewer may not approve what they changed themselves).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "proposals",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("task_id", sa.Integer(), sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("model_version", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("scores", sa.JSON(), nullable=False),
        sa.Column("best", sa.Integer(), nullable=False),
        sa.Column("candidates", sa.JSON(), nullable=False),
        sa.Column("clicks", sa.Integer(), nullable=False, server_default="0"),
    )
    op.create_index("ix_proposals_task_id", "proposals", ["task_id"])
    with op.batch_alter_table("annotations") as batch:
        batch.add_column(sa.Column("proposal_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("outcome", sa.String(16), nullable=True))
        batch.add_column(sa.Column("clicks", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("edited_by", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_annotations_proposal", "proposals", ["proposal_id"], ["id"], ondelete="SET NULL")
        batch.create_foreign_key("fk_annotations_edited_by", "users", ["edited_by"], ["id"])
    # Rows saved before: what they said of themselves is all there is (the client sent it).
    op.execute(
        "UPDATE annotations SET outcome = CASE "
        "WHEN source = 'machine' THEN 'machine' "
        "WHEN answerable = false THEN 'not-answerable' "
        "WHEN candidate IS NOT NULL THEN 'accepted' "
        "WHEN model_version IS NULL THEN 'drawn' "
        "ELSE 'edited' END, edited_by = user_id"
    )


def downgrade() -> None:
    with op.batch_alter_table("annotations") as batch:
        batch.drop_constraint("fk_annotations_edited_by", type_="foreignkey")
        batch.drop_constraint("fk_annotations_proposal", type_="foreignkey")
        batch.drop_column("edited_by")
        batch.drop_column("clicks")
        batch.drop_column("outcome")
        batch.drop_column("proposal_id")
    op.drop_index("ix_proposals_task_id", "proposals")
    op.drop_table("proposals")
