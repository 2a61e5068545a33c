"""Plan stamps: a consolidation plan re-checks its candidates only when what they were searched in changed.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-01

DDL in the .sql files beside this one. scope_stats.last_write is the
transaction id of the last statement that wrote the scope's memories (the
lexicon trigger sets it, under the scope's write lock);
generation_jobs.plan_stamp is what prepare_consolidation read before it
searched the candidates (093_consolidation.sql, candidates_stamp).
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
