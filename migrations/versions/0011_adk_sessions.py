"""Session state, per-user and per-app state, and full event payloads for agent frameworks (ADK).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-30

DDL in the .sql files beside this one; the API functions
are in db/functions/112_sessions.sql.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
