"""Memories, immutable revisions, roles: the foundation schema.

Revision ID: 0001
Revises:
Create Date: 2026-11-29

Incremental DDL only, in the .sql files beside this one (linted by
sqlfluff). The functions and procedures of the API live in the idempotent
files under db/ and are re-applied by env.py at head.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
