"""Structured profiles (schemas, field memories) and scoped views with role bindings.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30

DDL in the .sql files beside this one; the API functions
are in db/functions/085-087_*.sql and 110_scoped_views.sql.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
