"""Due scopes: which scopes have queued work, readable on the Citus coordinator without a shard scan.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-02

DDL in the .sql files beside this one. membank_private.due_scopes holds, per
scope and kind of job (embedding, generation), the earliest time a job of
that scope may be due. On a Citus cluster it stays a table of the
coordinator's own (neither distributed nor a reference table, so a write to
it never waits for a worker): the claims read it instead of every shard and
go to each due scope's worker alone (db/functions/121_due_work.sql). On one
server it stays empty: the claims there read the queues in one statement.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
