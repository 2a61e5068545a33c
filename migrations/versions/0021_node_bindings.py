"""Node bindings: a restricted role is restricted on every Citus node, whose OIDs of it differ.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-02

DDL in the .sql files beside this one. bound_roles (a reference table on
Citus: the same rows on every node) stays keyed by the coordinator's OID of
the role, and records the role's name and each worker's OID of it
(worker_oids, by Citus group id), so that a login bound to a scope is bound
on whichever node it connects to (110_scoped_views.sql, local_role_oid).
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
