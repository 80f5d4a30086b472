"""The interop suite runs against a one-worker and a two-worker appliance, unchanged."""

from __future__ import annotations

import pytest


@pytest.fixture(params=[1, 2], ids=["1-worker", "2-workers"])
def appliance(request, appliance_factory):
    return appliance_factory(log_dirs=request.param)
