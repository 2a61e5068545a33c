"""Fail closed: a restricted role is a property of the role (its OID), and ADK app: state merges without a shared lock.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01

DDL in the .sql files beside this one. bound_roles holds one row per role
that bind_role_to_scope restricted, keyed by the role's OID, and survives
the role's last scope binding (erase_scope, unbind), so such a role reaches
nothing instead of everything. scope_bindings is keyed by that OID too. ADK's
app: state becomes append-only entries (one row per key written) merged on
read, so no user's call waits for another user's open transaction.
"""

from alembic import op

from membank.paths import run_sql_file

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "upgrade")


def downgrade() -> None:
    run_sql_file(op.get_bind(), __file__, "downgrade")
