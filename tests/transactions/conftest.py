"""The `make` fixture of the Partition tests: a Partition over a real log and group commit."""

from tests.replication.test_partition import make  # noqa: F401 (a fixture)
