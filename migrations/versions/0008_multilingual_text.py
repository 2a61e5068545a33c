"""Full text in the fact's language: per-fact text search configuration, CJK bigrams, unaccented Latin.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30

DDL in the .sql files beside this one. The tokenizer functions live here,
not in db/functions: the stored fts column is computed by them, so changing
them needs a migration that recomputes the column and the lexicon.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
