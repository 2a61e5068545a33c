"""Relevance: retrieved memories carry a calibrated relevance; retrieve_memories and build_context take min_relevance.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-02

DDL in the .sql files beside this one. The composite type retrieved_memory
gains the attribute relevance (the last one, so that callers reading the
columns by position keep theirs); retrieve_memories and build_context take
min_relevance as their last argument, so their old signatures are dropped and
the functions re-created from db/functions at head (073_relevance.sql and
the fitted 072_relevance_model.sql hold the model).
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
