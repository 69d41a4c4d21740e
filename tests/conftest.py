import pytest

import dask_bacc.config

pytest_plugins = ["distributed.utils_test"]


@pytest.fixture(autouse=True)
def _bacc_defaults():
    """distributed.utils_test resets dask.config; put the bacc: defaults back."""
    dask_bacc.config.load_defaults()
    yield
