"""Re-ranking: retrieve_memories takes rerank (a second pass over the fused top 50 by a fitted model).

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-02

DDL in the .sql files beside this one. retrieve_memories gains rerank as its
last argument, so its old signature is dropped and the function re-created
from db/functions at head (076_rerank.sql holds the features, the fitted
074_rerank_model.sql the coefficients).
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
