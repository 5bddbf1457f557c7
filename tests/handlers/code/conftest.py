"""A local (bubblewrap) sandbox runtime rooted in a private directory, for the code handler's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.bwrap import find_bwrap
from containers.local import LocalRuntime


@pytest.fixture(scope="session")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> LocalRuntime:
    if find_bwrap() is None:
        pytest.skip("bubblewrap is not installed")
    root: Path = tmp_path_factory.mktemp("code-sandboxes")
    return LocalRuntime(root=root)
