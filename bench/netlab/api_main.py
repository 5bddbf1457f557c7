"""The farm API with the `probe` handler registered: `python -m bench.netlab.api_main HOST PORT`."""

from __future__ import annotations

import sys

import uvicorn

import bench.netlab.probe  # noqa: F401  (registers the handler)

if __name__ == "__main__":
    host, port = sys.argv[1], int(sys.argv[2])
    uvicorn.run(
        "farm.api.app:create_app",
        factory=True,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=75,
    )
