"""Hybrid retrieval: full text, embeddings with their model, embedding jobs.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29

DDL in the .sql files beside this one; the retrieval and worker functions
are in db/functions/050_embeddings.sql, 055_lexicon.sql and 061-070.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
