"""Expiry that really expires: deleted memories whose TTL passed are found by an index.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-02

DDL in the .sql files beside this one. purge_expired_memories forgets the
text of memories deleted before their expire_time once it passes
(db/procedures/010_expiry.sql, forget_expired_deletions): their DELETED
revisions that still hold text, by expire_time, are what the index holds.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
