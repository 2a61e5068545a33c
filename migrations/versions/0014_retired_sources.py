"""Retired sources: the events a deleted memory came from, by digest, so that regenerating cannot bring it back.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01

DDL in the .sql files beside this one. A row holds a digest of one source
event (md5 of its id and text), never the text: a purge destroys the text
and the row still blocks re-extraction from the same statement.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
