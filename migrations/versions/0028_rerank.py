"""Re-ranking: retrieve_memories takes rerank (a second pass over the fused top 50 by a fitted model).

Revision ID: 0028
Revises: 0026
Create Date: 2026-12-02

DDL in the .sql files beside this one. retrieve_memories gains rerank as its
last argument, so its old signature is dropped and the function re-created
from db/functions at head (076_rerank.sql holds the features, the fitted
074_rerank_model.sql the coefficients). Branch rerank2 was cut while 0027 was
being written elsewhere: down_revision names 0026 here and becomes "0027" when
both land.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0028"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
