"""Size limits: each app: state entry records its size, so that an app's state is bounded without reading it.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02

DDL in the .sql files beside this one. app_state_entries.size is the bytes
of the entry's key and its value as JSON text (membank_private.state_bytes
counts a state the same way); merge_app_state refuses a write that takes
the app past size_limit('app_state') and app_state reads at most that much
(db/functions/112_sessions.sql).
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
