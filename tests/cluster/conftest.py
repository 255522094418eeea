"""Fixtures of the cluster tests: small traces on small clusters, and the ITP traces extracted to a temp dir."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pandas as pd
import pytest

from cluster_helpers import small_trace


@pytest.fixture
def trace() -> pd.DataFrame:
    """A small trace with deadlines."""
    return small_trace()


@pytest.fixture(scope="session")
def itp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The raw ITP traces, extracted into a temporary directory (never into the repository)."""
    import os

    env = os.environ.get("TRAINSIM_SHARED")
    repo = Path(__file__).resolve().parents[2]
    shared = next((c for c in ([Path(env)] if env else []) + [repo.parent / "shared"] if (c / "data").is_dir()),
                  None)
    if shared is None:
        pytest.skip("../shared (cluster traces) is not beside the repository")
    tar = shared / "data" / "cluster-traces" / "raw-traces.tar.gz"
    out = tmp_path_factory.mktemp("itp")
    with tarfile.open(tar) as tf:
        tf.extractall(out, filter="data")
    return out


@pytest.fixture(autouse=True, scope="session")
def _private_plan_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep the persistent plan cache of the cluster tests in a temporary directory."""
    import os

    os.environ["TRAINSIM_CACHE_DIR"] = str(tmp_path_factory.mktemp("plan-cache"))
