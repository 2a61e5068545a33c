"""Memory source position: the session and turn order a memory was drawn from, for retrieval's session neighbours.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-02

DDL in the .sql files beside this one. A memory created from events
(create_memory's source_event_ids, or generated from a session) keeps the
session id, event time and append order of its earliest source event, so
retrieval can find the memories said just before and after it in the same
session (070_retrieve_memories.sql, 069_session_neighbours.sql) with one
index probe each, without reading revisions or events at query time.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
