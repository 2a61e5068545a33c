"""GenerateMemories operations and the generation job queue.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29

DDL in the .sql files beside this one; the API functions
are in db/functions/09x_*.sql.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
