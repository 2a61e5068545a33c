"""Due expiry: the coordinator's index of due work also knows when each scope's memories expire.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-02

DDL in the .sql files beside this one. membank_private.due_scopes gains the
kind 'expiry': per scope, a time no later than its earliest expire_time, so
that purge_expired_memories on a Citus cluster reads the coordinator's index
for the scopes to purge instead of every shard, and goes to each due scope's
worker alone (db/functions/121_due_work.sql). On one server the table stays
empty. The downgrade drops the expiry rows first (the old check refuses them).
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
