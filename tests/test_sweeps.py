"""`-m` sweeps: each job of a sweep writes its results into its own folder under output_dir, with Hydra's basic
launcher and with the submitit launcher's local executor (the one a cluster run uses, minus the cluster)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["basic", "submitit_local"])
def test_sweep_jobs_land_in_their_own_folders(tmp_path, launcher):
    if launcher != "basic":
        pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    data = tmp_path / "q.jsonl"
    data.write_text(
        "".join(
            json.dumps({"question": f"{n} + {n} =", "choices": [str(2 * n), str(n)], "answer": 0}) + "\n"
            for n in range(1, 3)
        )
    )
    out = tmp_path / "sweep"
    command = [
        str(BIN / "jetgym-qa"),
        "-m",
        f"hydra/launcher={launcher}",
        "scorer=jet,fastjev",
        "dataset=jsonl",
        f"dataset.path={data}",
        f"output_dir={out}",
    ]
    if launcher == "submitit_local":
        command.append("hydra.launcher.timeout_min=10")
    done = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summaries = [json.loads((out / str(job) / "summary.json").read_text()) for job in (0, 1)]
    assert [s["scorer"]["scorer"] for s in summaries] == ["jet", "fastjev"]
    assert all(s["requests"] == 2 for s in summaries)
    assert "scorer=fastjev" in (out / "1" / ".hydra" / "overrides.yaml").read_text()
