"""Pinned paths: compact_scopes reports the scopes it skipped because another transaction held their lock.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-01

DDL in the .sql files beside this one. compact_scopes returns a third
column, skipped ('LOCKED' for a scope whose write lock another transaction
held), so its old definition is dropped here and db/functions/096_compaction.sql
creates the new one at head. The maintenance procedures' pinned search_path
(db/procedures/) needs no DDL: the db/ files are re-applied at head.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
