"""Fixtures for the command tests (helpers live in ``tests.helpers.http_server``)."""

from tests.helpers.http_server import standin_server  # noqa: F401  (a fixture)
