"""Trust boundary: the worker role, scope locks as rows, compare-and-set edits.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30

DDL in the .sql files beside this one; the functions are in db/functions
(015_scope_locks.sql, 030_memories.sql, 040_revisions.sql).
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
