"""An Alembic migration that creates ``orbit_outbox``, in the dialect of the database it runs
on. Copy it into your ``versions/`` folder and set ``revision``/``down_revision``."""

from __future__ import annotations

from alembic import op

from orbit_sdk import outbox

revision = "0001_orbit_outbox"
down_revision = None


def upgrade() -> None:
    for statement in outbox.ddl_statements(op.get_bind().dialect.name):
        op.execute(statement)


def downgrade() -> None:
    op.drop_table("orbit_outbox")
