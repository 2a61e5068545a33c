"""Replica identity: every distributed table can be moved by Citus's rebalancer under writes.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-02

DDL in the .sql files beside this one. citus_rebalance_start() moves shards
by logical replication, which needs a primary key or a replica identity on
every table; the two append-only tables of word counts (scope_lexicon_delta,
scope_stats_delta) have neither, since the same row may be appended twice.
They get REPLICA IDENTITY FULL: their rows are a few integers and live until
the next fold, so the whole-row identity costs little.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
