"""Erasure and retention: retention settings, indexes for the retention sweep.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30

DDL in the .sql files beside this one; erase_scope, the retention procedure
and the redaction of forgotten memories are in db/functions/085_erasure.sql
and db/procedures/020_retention.sql.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
