"""Re-ranker: the author the question names replaces shared names; build_context re-ranks by default.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-03

DDL in the .sql files beside this one. The re-ranker's features
(db/functions/076_rerank.sql, re-created at head) no longer split texts into
names: membank_private.proper_nouns goes. Its coefficients
(074_rerank_model.sql) are refitted with the new feature, asked_author.
build_context gains rerank as its last argument (default true: the path that
puts memories into a prompt unasked re-ranks), so its old signature is
dropped and the function re-created from db/functions at head.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
