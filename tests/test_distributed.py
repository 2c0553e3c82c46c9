"""Data-parallel QA on torchrun (gloo, 2 ranks on this CPU): the merged responses are byte-identical to one
process; a killed rank fails the job by name and a rerun completes only what is missing; ranks given other
settings are refused before any scoring; the rank helpers on their own."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jetgym.runs import ranks as distributed
from jetgym.runs.ranks import Ranks, merge_jsonl, owner

BIN = Path(sys.executable).parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def test_rank_files_and_ownership():
    assert Ranks().suffix("responses.jsonl") == "responses.jsonl"
    assert Ranks(1, 3).suffix("responses.jsonl") == "responses.rank-1-of-3.jsonl"
    owners = [owner(f"q{i}", 3) for i in range(300)]
    assert owners == [owner(f"q{i}", 3) for i in range(300)] and set(owners) == {0, 1, 2}


def test_current_reads_torchrun_variables(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert distributed.current() == Ranks(1, 2, 1, 1)
    assert distributed.device_for("cuda", distributed.current()) == "cuda:1"
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ValueError, match="RANK=2 is outside WORLD_SIZE=2"):
        distributed.current()
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ValueError, match="RANK='x' is not an integer"):
        distributed.current()


def test_merge_orders_rows_and_refuses_gaps_and_duplicates(tmp_path):
    (tmp_path / "r.rank-0-of-2.jsonl").write_text('{"id": "c"}\n{"id": "a"}\n')
    (tmp_path / "r.rank-1-of-2.jsonl").write_text('{"id": "b"}\n')
    merge_jsonl(tmp_path, "r.jsonl", 2, ["a", "b", "c"], key="id")
    assert (tmp_path / "r.jsonl").read_text() == '{"id": "a"}\n{"id": "b"}\n{"id": "c"}\n'
    with pytest.raises(ValueError, match="lack 1 rows .*'d'"):
        merge_jsonl(tmp_path, "r.jsonl", 2, ["a", "b", "c", "d"], key="id")
    (tmp_path / "r.rank-1-of-2.jsonl").write_text('{"id": "b"}\n{"id": "a"}\n')
    with pytest.raises(ValueError, match="'a' appears twice"):
        merge_jsonl(tmp_path, "r.jsonl", 2, ["a", "b", "c"], key="id")
    (tmp_path / "r.rank-1-of-2.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="rank 1 wrote nothing"):
        merge_jsonl(tmp_path, "r.jsonl", 2, ["a", "b", "c"], key="id")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def questions(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "q.jsonl"
    rows = [
        {"question": f"What is {n} plus {n}?", "choices": [str(2 * n), str(n + 1), str(3 * n)], "answer": 0}
        for n in range(11)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def qa_args(data: Path, out: Path, *extra: str) -> list[str]:
    return ["dataset=jsonl", f"dataset.path={data}", "chunk_size=2", f"output_dir={out}", *extra]


def torchrun(args: list[str], nproc: int = 2) -> subprocess.Popen:
    command = [
        str(BIN / "torchrun"),
        "--standalone",
        f"--nproc-per-node={nproc}",
        "--no-python",
        str(BIN / "jetgym-qa"),
        *args,
    ]
    return subprocess.Popen(
        command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


@pytest.fixture(scope="module")
def one_process(questions, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("one")
    done = subprocess.run(
        [str(BIN / "jetgym-qa"), *qa_args(questions, out)], env=ENV, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.slow
def test_two_ranks_merge_to_the_one_process_bytes(questions, one_process, tmp_path):
    job = torchrun(qa_args(questions, tmp_path))
    output, _ = job.communicate(timeout=900)
    assert job.returncode == 0, output[-3000:]
    assert (tmp_path / "responses.jsonl").read_bytes() == (one_process / "responses.jsonl").read_bytes()
    ranks = [len((tmp_path / f"responses.rank-{r}-of-2.jsonl").read_text().splitlines()) for r in (0, 1)]
    assert ranks == [6, 5]  # 6 fixed chunks of 2 (the last of 1), alternating: uneven, no padding
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["requests"] == 11 and set(summary["ranks"]) == {"0", "1"}
    assert "| rank | requests |" in (tmp_path / "report.md").read_text()


@pytest.mark.slow
def test_a_killed_rank_fails_the_job_and_a_rerun_completes_it(questions, one_process, tmp_path):
    job = torchrun(qa_args(questions, tmp_path, "pipeline=false"))
    victim_file = tmp_path / "responses.rank-1-of-2.jsonl"
    deadline = time.monotonic() + 600
    while not (victim_file.exists() and victim_file.read_text().count("\n") >= 1) and time.monotonic() < deadline:
        time.sleep(0.05)
    victim = [
        line.split()[0]
        for line in subprocess.run(["pgrep", "-af", "jetgym-qa"], capture_output=True, text=True).stdout.splitlines()
        if f"output_dir={tmp_path}" in line and "torchrun" not in line
    ]
    lock = (tmp_path / ".jetgym.rank-1-of-2.lock").read_text()
    pid = int(lock.split("pid ")[1].rstrip(")\n"))
    assert str(pid) in victim
    os.kill(pid, signal.SIGKILL)
    output, _ = job.communicate(timeout=900)
    assert job.returncode != 0
    assert "rank: 1" in output or "rank 1" in output, output[-3000:]
    assert not (tmp_path / "summary.json").exists()
    again = torchrun(qa_args(questions, tmp_path, "pipeline=false"))
    output, _ = again.communicate(timeout=900)
    assert again.returncode == 0, output[-3000:]
    assert (tmp_path / "responses.jsonl").read_bytes() == (one_process / "responses.jsonl").read_bytes()


@pytest.mark.slow
def test_ranks_with_other_settings_are_refused_before_scoring(questions, tmp_path):
    port = free_port()
    jobs = []
    for rank, template in ((0, "none"), (1, "chat")):
        env = {
            **ENV,
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        jobs.append(
            subprocess.Popen(
                [str(BIN / "jetgym-qa"), *qa_args(questions, tmp_path, f"scorer.template={template}")],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [job.communicate(timeout=600)[0] for job in jobs]
    assert all(job.returncode != 0 for job in jobs)
    assert any("ranks [1] were started with other settings than rank 0" in out for out in outputs), outputs[0][-2000:]
    assert not list(tmp_path.glob("responses*.jsonl")) or all(
        not p.read_text() for p in tmp_path.glob("responses*.jsonl")
    )


@pytest.mark.slow
def test_episodes_split_across_ranks_merge_to_the_one_process_files(tmp_path):
    pytest.importorskip("gymnasium")
    args = ["env=frozenlake", "agent=random", "episodes=5", "seed=3", "video=false"]
    one = subprocess.run(
        [str(BIN / "jetgym-episode"), *args, f"output_dir={tmp_path / 'one'}"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert one.returncode == 0, one.stderr[-3000:]
    command = [
        str(BIN / "torchrun"),
        "--standalone",
        "--nproc-per-node=2",
        "--no-python",
        str(BIN / "jetgym-episode"),
        *args,
        f"output_dir={tmp_path / 'two'}",
    ]
    two = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, (two.stdout + two.stderr)[-3000:]
    for name in ("steps.jsonl", "episodes.jsonl"):
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
    assert [len((tmp_path / "two" / f"episodes.rank-{r}-of-2.jsonl").read_text().splitlines()) for r in (0, 1)] == [
        3,
        2,
    ]
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["episodes"] == 5
