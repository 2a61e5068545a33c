"""Tool-permission tiers (rules, their change log, decisions, exempt tools) and compaction operations.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30

DDL in the .sql files beside this one; the API functions are in
db/functions/096_compaction.sql and db/functions/100_tool_permissions.sql.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
