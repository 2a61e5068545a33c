"""Scope keys: every scoped table carries a plain scope_id and every key includes it.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01

DDL in the .sql files beside this one. Citus distributes a table by one
plain column and needs that column in every primary key, unique constraint
and foreign key; scope_id is that column (one scope, one shard). The
GENERATED scope_id columns become plain columns that a check constraint ties
to the scope, so single node keeps the guarantee. Keys lead with the old
columns and end in scope_id: a name-only lookup keeps its index and a
single-node bank keeps the same number of indexes.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
