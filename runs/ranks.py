"""Data parallelism on torch.distributed (`torchrun`), for the runners (`run_qa`, `run_episodes`). No scheduler of our own.

Under `torchrun --nproc-per-node=N --no-python jetgym-qa ...` every rank reads RANK / WORLD_SIZE / LOCAL_RANK.
Work is assigned from its ids (`owner`): a fixed hash, so the split never depends on the number of questions, on
their order or on padding, and a rerun gives every rank the same part to resume. Each rank writes its own files
(`name.rank-R-of-N.jsonl`); rank 0 merges them in dataset order once every rank is done. Ranks agree on the
settings before any work (`agree`), and every wait has a timeout that names the ranks it waited for.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable


@dataclass(frozen=True)
class Ranks:
    """This process's place in the job: `rank` of `world_size`, `local_rank` on its machine."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def suffix(self, name: str) -> str:
        """`responses.jsonl` -> `responses.rank-1-of-2.jsonl` (the rank's own file; unchanged for one process)."""
        if not self.distributed:
            return name
        stem, dot, ext = name.rpartition(".")
        return f"{stem}.rank-{self.rank}-of-{self.world_size}{dot}{ext}"


def current() -> Ranks:
    """The ranks torchrun set in the environment (one process when unset)."""

    def read(name: str, default: int) -> int:
        value = os.environ.get(name)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"environment variable {name}={value!r} is not an integer (torchrun sets it)") from None

    ranks = Ranks(read("RANK", 0), read("WORLD_SIZE", 1), read("LOCAL_RANK", 0), read("LOCAL_WORLD_SIZE", 1))
    if not 0 <= ranks.rank < ranks.world_size:
        raise ValueError(f"RANK={ranks.rank} is outside WORLD_SIZE={ranks.world_size}")
    return ranks


def owner(item_id: str, world_size: int) -> int:
    """The rank that handles `item_id`: a stable hash of the id (the same on every machine and Python run)."""
    digest = hashlib.blake2b(str(item_id).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % world_size


def device_for(placement_device: str, ranks: Ranks) -> str:
    """The device a rank's model goes to: `cuda:LOCAL_RANK` for a GPU placement, the CPU otherwise."""
    return f"cuda:{ranks.local_rank}" if placement_device == "cuda" and ranks.distributed else placement_device


def split_threads(ranks: Ranks) -> int | None:
    """Torch threads per rank when several ranks share one machine's cores (None: leave torch's default)."""
    if ranks.local_world_size <= 1 or os.environ.get("OMP_NUM_THREADS"):
        return None
    return max(1, (os.cpu_count() or 1) // ranks.local_world_size)


def init(ranks: Ranks, timeout_s: float, gpu: bool) -> None:
    """Join the process group (gloo on CPU, nccl on GPUs); a no-op for one process."""
    if not ranks.distributed:
        return
    import torch.distributed as dist

    if gpu:  # this rank's GPU: cuda:LOCAL_RANK becomes the "cuda" that placement=cuda loads onto
        import torch

        torch.cuda.set_device(device_for("cuda", ranks))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if gpu else "gloo", timeout=datetime.timedelta(seconds=timeout_s))
    threads = split_threads(ranks)
    if threads:
        import torch

        torch.set_num_threads(threads)


def agree(ranks: Ranks, settings: dict) -> None:
    """Refuse to start when ranks were given different settings (before any work); names the ranks that differ."""
    if not ranks.distributed:
        return
    import torch.distributed as dist

    mine = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
    every: list = [None] * ranks.world_size
    dist.all_gather_object(every, mine)
    differing = [r for r, h in enumerate(every) if h != every[0]]
    if differing:
        raise RuntimeError(
            f"ranks {differing} were started with other settings than rank 0; run every rank with the same command line"
        )


def wait_for_all(ranks: Ranks, timeout_s: float) -> None:
    """Block until every rank arrives; after `timeout_s` fail naming the ranks that did not (gloo monitored barrier)."""
    if not ranks.distributed:
        return
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=timeout_s)
    if dist.get_backend() == "gloo":
        dist.monitored_barrier(timeout=timeout, wait_all_ranks=True)
    else:
        dist.barrier()


def finish(ranks: Ranks) -> None:
    if ranks.distributed:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def rank_files(folder: Path, name: str, world_size: int) -> list[Path]:
    return [folder / Ranks(r, world_size).suffix(name) for r in range(world_size)]


def merge_jsonl(
    folder: Path, name: str, world_size: int, order: Iterable[object] | None, key: str | tuple[str, ...]
) -> Path:
    """Merge the ranks' `name` files into `folder/name`, rows ordered by `order` (their `key` values; a tuple
    of fields joins them with "/"), or, with `order=None`, by the key fields' values.

    Every id must appear exactly once over all ranks; a missing or duplicated row is an error naming it."""
    fields = (key,) if isinstance(key, str) else key
    rows: dict[str, bytes] = {}
    sort_keys: dict[str, tuple] = {}
    for path in rank_files(folder, name, world_size):
        if not path.exists():
            raise FileNotFoundError(
                f"{path} is missing: rank {path.name.split('rank-')[1].split('-')[0]} wrote nothing"
            )
        for line_no, line in enumerate(path.read_bytes().splitlines(keepends=True), 1):
            values = tuple(json.loads(line)[f] for f in fields)
            row_id = "/".join(map(str, values))
            sort_keys[row_id] = values
            if row_id in rows:
                raise ValueError(f"{path}:{line_no}: {key} {row_id!r} appears twice over the ranks' files")
            rows[row_id] = line if line.endswith(b"\n") else line + b"\n"
    ordered = sorted(rows, key=sort_keys.__getitem__) if order is None else [str(i) for i in order]
    missing = [i for i in ordered if i not in rows]
    if missing:
        raise ValueError(f"the ranks' {name} files lack {len(missing)} rows (e.g. {key} {missing[0]!r})")
    extra = sorted(set(rows) - set(ordered))
    if extra:
        raise ValueError(f"the ranks' {name} files hold rows outside this job (e.g. {key} {extra[0]!r})")
    target = folder / name
    partial = target.with_suffix(target.suffix + ".partial")
    partial.write_bytes(b"".join(rows[i] for i in ordered))
    partial.replace(target)
    return target
