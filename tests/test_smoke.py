import pytest
from django.db import connection


@pytest.mark.django_db
def test_database_is_postgresql_with_the_audience_rule_installed():
    """Tests run on PostgreSQL, with the migration-created disclosure function present."""
    assert connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        cursor.execute("SELECT engram_audience_allows('public', '', '{}', 'workspace', 'slack:acme', '{}')")
        assert cursor.fetchone() == (True,)
