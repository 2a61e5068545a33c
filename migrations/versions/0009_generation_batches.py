"""GenerateMemories in batches: where a job stands in its extraction and consolidation batches.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30

DDL in the .sql files beside this one; the batching itself is in
db/functions/092_extraction.sql and 093_consolidation.sql.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
