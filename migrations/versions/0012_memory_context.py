"""A memory's context: the text around a fact (e.g. the conversation turn before it), searched but not returned.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-30

DDL in the .sql files beside this one. The stored fts column now holds the
fact's lexemes with weight A and the context's with weight D, so the text
leg can score a word met only in the context below one met in the fact;
the column and the lexicon are recomputed.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
