"""Fixtures shared by the backend tests."""
import pytest


@pytest.fixture(scope="module")
def no_disk_cache():
    """Build without the disk cache (for tests that build many throwaway kernels)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TDSL_CACHE_DIR", "off")
        yield
