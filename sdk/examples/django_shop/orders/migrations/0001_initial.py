from typing import Any

from django.db import migrations, models

from orbit_sdk import outbox


def create_outbox(apps: Any, schema_editor: Any) -> None:
    """``orbit_outbox`` in the DDL of the database migrated (postgresql, mysql or sqlite)."""
    for statement in outbox.ddl_statements(schema_editor.connection.vendor):
        schema_editor.execute(statement, params=None)


def drop_outbox(apps: Any, schema_editor: Any) -> None:
    schema_editor.execute("DROP TABLE orbit_outbox", params=None)


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []

    operations = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.CharField(max_length=40, primary_key=True, serialize=False)),
                ("email", models.EmailField(max_length=254)),
                ("total_cents", models.IntegerField()),
                ("outbox_id", models.CharField(max_length=26)),
                ("task_id", models.CharField(max_length=64, null=True)),
            ],
        ),
        migrations.RunPython(create_outbox, drop_outbox),
    ]
