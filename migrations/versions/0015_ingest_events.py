"""IngestEvents: streams whose events generate memories by themselves when a trigger fires; chat messages in.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01

DDL in the .sql files beside this one. A stream is a session of one exact
scope with a generation rule and a watermark (the last append_seq of the
session's events already given to a GenerateMemories operation); the
functions are in db/functions/088_ingest_events.sql.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
