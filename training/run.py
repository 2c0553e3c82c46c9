"""Training runs: `run_ppo` and `run_rft` (from reward) and `run_sft` (from labels) into one results folder.

The folder (one writer at a time, a lock the kernel drops when its holder dies):
- `train.jsonl`: one strict-JSON row per update (rft: per round; env steps or questions seen, mean return,
  success, losses, KL, entropy, decisions `scored` and `cached`, seconds);
- `checkpoint/` + `checkpoint.json`: the trained tensors, the optimizer, the update count, the episode
  counter and the shuffling generator, written every `checkpoint_every` updates (a new folder, then the
  pointer file renamed over the old one, so a kill leaves the last complete checkpoint). The pointer records
  the SHA-256 of the checkpoint's tensor files and the number of log rows, and a digest of itself: a resumed
  run refuses an edited pointer, a damaged or truncated tensor file and a log that lost rows, naming the file;
- at the end `adapter/` (peft format, or full weights; `jetgym.scorers.adapters`), `summary.json`,
  `learning_curve.png`.
A run started into a folder holding a checkpoint of the same configuration continues from it (rows written
after that checkpoint are dropped and redone); episodes that were under way when the run stopped restart
with the next training seeds. A folder holding a finished run, or a checkpoint of another configuration,
is refused.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from tqdm import tqdm

from jetgym.runs.folder import (
    append_jsonl,
    as_json_data,
    dumps,
    folder_lock,
    make_folder,
    read_jsonl,
    write_json,
    write_text,
)

from .data_parallel import Shards
from .evaluation import QUESTIONS, question_digest
from .options import PPOOptions, RFTOptions, SFTOptions, learning_rate_at
from .ppo import Rollout, Rollouts, update
from .sft import check_labelled, evaluate_questions, fit_step, gold_indices, gold_nll

TRAIN_LOG = "train.jsonl"
SUMMARY = "summary.json"
CURVE = "learning_curve.png"
ADAPTER = "adapter"
POINTER = "checkpoint.json"


class TrainingFolder:
    """The results folder of one training run: resume state, log rows, checkpoints, final files."""

    def __init__(self, output_dir: str | os.PathLike, config: dict):
        self.out = make_folder(output_dir)
        self.config = as_json_data(config)  # as checkpoint.json will read it back
        self.log = self.out / TRAIN_LOG

    def check(self) -> dict | None:
        """The checkpoint to resume from (None: a fresh run); refuses a finished run or another config."""
        if (self.out / SUMMARY).exists() or (self.out / ADAPTER).exists():
            raise FileExistsError(
                f"{self.out} already holds a finished training run ({SUMMARY}, {ADAPTER}/); "
                f"choose a new output_dir (nothing was overwritten)"
            )
        pointer = self.out / POINTER
        if not pointer.exists():
            if self.log.exists() and self.log.stat().st_size:
                raise FileExistsError(
                    f"{self.log} holds rows but {POINTER} is missing: the run cannot be resumed; "
                    f"choose a new output_dir"
                )
            return None
        try:
            state = json.loads(pointer.read_text())
        except ValueError as error:
            raise ValueError(f"{pointer} is corrupt ({error}); choose a new output_dir") from None
        if not isinstance(state, dict) or state.get("digest") != _seal(state):
            raise ValueError(
                f"{pointer} was edited or damaged (its contents differ from what jetgym wrote): the checkpoint "
                f"cannot be trusted; {RESTORE}"
            )
        if state.get("config") != self.config:
            raise ValueError(
                f"{self.out} holds a checkpoint of another training configuration (changed: "
                f"{', '.join(changed_settings(state.get('config', {}), self.config))}); rerun with the same settings "
                f"to resume, or choose a new output_dir"
            )
        self._check_files(state)
        return state

    def _check_files(self, state: dict) -> None:
        """Refuse a checkpoint whose tensor files changed or whose log lost rows it had when it was written."""
        from jetgym.scorers.adapters import check_digests

        check_digests(self.out / state["folder"], state["tensors"], f"the checkpoint cannot be resumed; {RESTORE}")
        if not self.log.exists():
            raise FileNotFoundError(
                f"{self.log} is missing beside {POINTER}: the learning curve's first {state['log_rows']} rows "
                f"are lost; {RESTORE}"
            )
        kept = sum(row.get("update", 0) <= state["update"] for row in read_jsonl(self.log))
        if kept < state["log_rows"]:
            raise ValueError(
                f"{self.log} holds {kept} rows up to update {state['update']}, but {state['log_rows']} when "
                f"{POINTER} was written: the learning curve lost rows; {RESTORE}"
            )

    def rows(self, update: int, rewrite: bool = True) -> list[dict]:
        """The log rows up to update `update`; `rewrite`: the file rewritten without any later rows."""
        rows = [row for row in read_jsonl(self.log) if row.get("update", 0) <= update]
        if rewrite:
            write_text(self.log, "".join(dumps(row) + "\n" for row in rows))
        return rows

    def lock(self, shards: Shards):
        """The folder's lock, held by the rank that writes (the others only read the checkpoint)."""
        return folder_lock(self.out, "jetgym-train") if shards.writer else contextlib.nullcontext()

    def save_checkpoint(self, policy, optimizer, progress: dict) -> None:
        name = f"checkpoint-{progress['update']:06d}"
        folder = self.out / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in policy.state().items()}, str(folder / "policy.safetensors"))
        torch.save(optimizer.state_dict(), folder / "optimizer.pt")
        previous = None
        if (self.out / POINTER).exists():
            previous = json.loads((self.out / POINTER).read_text()).get("folder")
        from jetgym.scorers.adapters import file_digests, plain_mode

        plain_mode([folder / "policy.safetensors", folder / "optimizer.pt"])
        state = {
            "config": self.config,
            "folder": name,
            **as_json_data(progress),
            "tensors": file_digests(folder, ["policy.safetensors", "optimizer.pt"]),
            "log_rows": len(read_jsonl(self.log)),
        }
        write_json(self.out / POINTER, {**state, "digest": _seal(state)})
        if previous and previous != name:
            shutil.rmtree(self.out / previous, ignore_errors=True)

    def start(
        self, policy, learning_rate: float, seed: int, shards: Shards, on_start: Callable[[Path], None] | None = None
    ) -> tuple:
        """(optimizer, shuffling generator, checkpoint progress ({} for a fresh run), the log rows kept),
        the policy and optimizer restored from the checkpoint when there is one (on every rank). `on_start(folder)`
        runs on the writing rank once the folder is locked and checked (e.g. the job's record of its config)."""
        from safetensors.torch import load_file

        state = self.check()
        if on_start is not None and shards.writer:
            on_start(self.out)
        torch.manual_seed(seed)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=learning_rate, weight_decay=0.0)
        generator = torch.Generator().manual_seed(seed)
        if state is None:
            return optimizer, generator, {}, []
        folder = self.out / state["folder"]
        policy.load_state(load_file(str(folder / "policy.safetensors")))
        optimizer.load_state_dict(torch.load(folder / "optimizer.pt", weights_only=False))
        generator.set_state(torch.tensor(state["generator"], dtype=torch.uint8))
        return optimizer, generator, state, self.rows(state["update"], rewrite=shards.writer)

    def finish(self, policy, summary: dict, rows: list[dict], x: str, ys: Sequence[str]) -> dict:
        staging = self.out / f".{ADAPTER}-staging"
        shutil.rmtree(staging, ignore_errors=True)
        policy.save(staging)
        os.replace(staging, self.out / ADAPTER)
        summary["curve"] = plot_curve(rows, x, ys, self.out / CURVE)
        write_json(self.out / SUMMARY, summary, indent=2)
        pointer = self.out / POINTER
        if pointer.exists():
            shutil.rmtree(self.out / json.loads(pointer.read_text())["folder"], ignore_errors=True)
            pointer.unlink()
        return summary


def changed_settings(old: dict, new: dict, prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two settings trees, each with its old and new value."""
    changed = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            changed += changed_settings(a, b, f"{prefix}{key}.")
        elif a != b:
            changed.append(f"{prefix}{key} {json.dumps(a)} -> {json.dumps(b)}")
    return changed


RESTORE = "restore it, or choose a new output_dir (the run cannot resume from this folder)"


def _seal(state: dict) -> str:
    """The digest of a checkpoint pointer's contents (all but the digest itself)."""
    import hashlib

    return hashlib.sha256(dumps({k: v for k, v in state.items() if k != "digest"}).encode()).hexdigest()


def plot_curve(rows: list[dict], x: str, ys: Sequence[str], path: Path) -> str | None:
    """The learning curve (each of `ys` against `x`); None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    ys = [y for y in ys if any(row.get(y) is not None for row in rows)] or list(ys[:1])  # no empty panels
    fig, axes = plt.subplots(len(ys), 1, figsize=(6, 2.4 * len(ys)), sharex=True, squeeze=False)
    for axis, y in zip(axes[:, 0], ys):
        points = [(row[x], row[y]) for row in rows if row.get(y) is not None]
        axis.plot([p[0] for p in points], [p[1] for p in points], marker=".")
        axis.set_ylabel(y.replace("_", " "))
        axis.grid(alpha=0.3)
    axes[-1, 0].set_xlabel(x.replace("_", " "))
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}")
    fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
    return path.name


def run_ppo(
    policy,
    envs: Sequence[Any],
    agent,
    options: PPOOptions,
    output_dir: str | os.PathLike,
    env_steps: int,
    seed: int = 0,
    checkpoint_every: int = 1,
    autocast: bool = False,
    config: dict | None = None,
    progress: bool = True,
    shards: Shards = Shards(),
    on_start: Callable[[Path], None] | None = None,
) -> dict:
    """Train `policy` with PPO on `envs` (played by `agent`, a scorer agent over `policy.scorer` with
    policy='sample') for at least `env_steps` env steps; returns the summary. Env k's j-th training episode uses
    seed `1_000_000 * (seed + 1) + j * num_envs + k`, so training seeds never meet the small evaluation seeds.
    Under data parallelism `envs` are this rank's share (`shards.mine(num_envs)`) and rank 0 writes the folder."""
    slots = shards.mine(options.num_envs)
    if len(envs) != len(slots):
        raise ValueError(
            f"run_ppo got {len(envs)} envs where this process plays {len(slots)} of train.num_envs={options.num_envs}"
        )
    per_update = options.num_envs * options.rollout_steps
    if env_steps < per_update:
        raise ValueError(
            f"train.env_steps={env_steps} is less than one rollout (train.num_envs x train.rollout_steps "
            f"= {options.num_envs} x {options.rollout_steps} = {per_update} env steps): raise "
            f"train.env_steps or lower train.rollout_steps"
        )
    folder = TrainingFolder(output_dir, config or {"algorithm": "ppo", "seed": seed, **options.__dict__})
    with folder.lock(shards):
        optimizer, generator, state, rows = folder.start(policy, options.learning_rate, seed, shards, on_start)
        done, steps = state.get("update", 0), state.get("env_steps", 0)
        rollouts = Rollouts(
            envs, agent, lambda k, j: 1_000_000 * (seed + 1) + j * options.num_envs + k, slots, state.get("started")
        )
        bar = tqdm(
            total=env_steps,
            initial=min(steps, env_steps),
            unit="step",
            disable=not (progress and shards.writer),
            desc="ppo",
        )
        started = time.monotonic()
        while steps < env_steps:
            begun = time.monotonic()
            rollout = Rollout.merge(shards.gather(rollouts.collect(options.rollout_steps)))
            collected = time.monotonic()
            counts = memo_counts(policy)
            rate = set_learning_rate(optimizer, learning_rate_at(options, steps, env_steps))
            losses = update(policy, optimizer, rollout, options, generator, autocast, shards)
            done += 1
            steps += per_update
            returns = [e["return"] for e in rollout.episodes]
            success = [e["success"] for e in rollout.episodes if e["success"] is not None]
            row = {
                "update": done,
                "env_steps": steps,
                "episodes": len(returns),
                "mean_return": sum(returns) / len(returns) if returns else None,
                "success_rate": sum(success) / len(success) if success else None,
                **{k: round(v, 6) for k, v in losses.items()},
                "learning_rate": rate,
                **counts,
                "rollout_seconds": round(collected - begun, 3),
                "update_seconds": round(time.monotonic() - collected, 3),
                "decisions_per_second": round(per_update / max(collected - begun, 1e-9), 3),
            }
            rows.append(row)
            checkpoint = done % checkpoint_every == 0 and steps < env_steps
            counts = [0] * options.num_envs
            for part in shards.gather(rollouts.started) if checkpoint else ():
                for k, n in part.items():
                    counts[k] = n
            if shards.writer:
                append_jsonl(folder.log, [row])
                if checkpoint:
                    folder.save_checkpoint(
                        policy,
                        optimizer,
                        {
                            "update": done,
                            "env_steps": steps,
                            "started": counts,
                            "generator": generator.get_state().tolist(),
                        },
                    )
            bar.update(min(per_update, env_steps - bar.n))
            bar.set_postfix(ret=row["mean_return"], steps_s=round(per_update / (time.monotonic() - begun), 2))
        bar.close()
        summary = {
            "algorithm": "ppo",
            "updates": done,
            "env_steps": steps,
            "seed": seed,
            "ranks": shards.ranks.world_size,
            "seconds_this_process": round(time.monotonic() - started, 3),
            "config": folder.config,
            "last_mean_return": next((r["mean_return"] for r in reversed(rows) if r["mean_return"] is not None), None),
        }
        if not shards.writer:
            return summary
        return folder.finish(policy, summary, rows, "env_steps", ["mean_return", "success_rate", "entropy"])


def run_sft(
    policy,
    questions: Sequence,
    options: SFTOptions,
    output_dir: str | os.PathLike,
    held_out: Sequence = (),
    seed: int = 0,
    checkpoint_every: int = 10,
    autocast: bool = False,
    config: dict | None = None,
    progress: bool = True,
    shards: Shards = Shards(),
    on_start: Callable[[Path], None] | None = None,
) -> dict:
    """Minimize the gold NLL of `questions` for `options.epochs` epochs, or until a share `options.fit` of them
    has its argmax on the gold at its latest measure (each step measures its minibatch before it); `held_out` is
    evaluated (gold NLL, accuracy) before training, after every epoch and after the last step. Returns the
    summary. Under data parallelism every rank gets the same questions, computes its share of each minibatch,
    and rank 0 writes the folder."""
    check_labelled(questions, "the training set")
    folder = TrainingFolder(output_dir, config or {"algorithm": "sft", "seed": seed, **options.__dict__})
    with folder.lock(shards):
        optimizer, generator, state, rows = folder.start(policy, options.learning_rate, seed, shards, on_start)
        per_epoch = -(-len(questions) // options.minibatch)
        done = state.get("update", 0)
        if not state and held_out:
            rows.append(
                {
                    "update": 0,
                    "epoch": 0,
                    "questions_seen": 0,
                    **_prefixed(evaluate_questions(policy.scorer, held_out, shards)),
                }
            )
            if shards.writer:
                append_jsonl(folder.log, rows[-1:])
        total = options.epochs * per_epoch
        bar = tqdm(total=total, initial=done, unit="step", disable=not (progress and shards.writer), desc="sft")
        orders = [
            torch.randperm(len(questions), generator=torch.Generator().manual_seed(seed * 1000 + e)).tolist()
            for e in range(options.epochs)
        ]
        agreed = list(state.get("agreed", [False] * len(questions)))  # each question's argmax at its latest measure
        fitted = False
        while done < total and not fitted:
            epoch, k = divmod(done, per_epoch)
            idx = orders[epoch][k * options.minibatch : (k + 1) * options.minibatch]
            rate = set_learning_rate(optimizer, learning_rate_at(options, done, total))
            begun = time.monotonic()
            step = fit_step(policy, optimizer, [questions[i] for i in idx], options, autocast, shards)
            for i, a in zip(idx, step.agreed):
                agreed[i] = a
            done += 1
            share = sum(agreed) / len(questions)
            fitted = options.fit is not None and share >= options.fit
            row = {
                "update": done,
                "epoch": epoch + (k + 1) / per_epoch,
                "questions_seen": done * options.minibatch,
                "loss": round(step.loss, 6),
                "train_agreement": round(share, 6),
                "fitted": fitted,
                "learning_rate": rate,
                "update_seconds": round(time.monotonic() - begun, 3),
            }
            if (done % per_epoch == 0 or fitted) and held_out:
                row.update(_prefixed(evaluate_questions(policy.scorer, held_out, shards)))
            rows.append(row)
            if shards.writer:
                append_jsonl(folder.log, [row])
                if done % checkpoint_every == 0 and done < total and not fitted:
                    folder.save_checkpoint(
                        policy,
                        optimizer,
                        {"update": done, "generator": generator.get_state().tolist(), "agreed": agreed},
                    )
            bar.update(1)
            bar.set_postfix(loss=round(step.loss, 4), agreement=round(share, 3))
        bar.close()
        final = next((r for r in reversed(rows) if "held_out_accuracy" in r), None)
        summary = {
            "algorithm": folder.config.get("algorithm", "sft"),
            "updates": done,
            "seed": seed,
            "ranks": shards.ranks.world_size,
            "train_questions": len(questions),
            "train_agreement": sum(agreed) / len(questions),
            "stopped": "fitted" if fitted else "epochs",
            "held_out_questions": len(held_out),
            "config": folder.config,
            "held_out_before": {k: rows[0].get(k) for k in ("held_out_gold_nll", "held_out_accuracy")}
            if held_out
            else None,
            "held_out_after": {k: final.get(k) for k in ("held_out_gold_nll", "held_out_accuracy")} if final else None,
        }
        if not shards.writer:
            return summary
        return folder.finish(
            policy,
            summary,
            rows,
            "questions_seen",
            ["loss", "train_agreement", "held_out_gold_nll", "held_out_accuracy"],
        )


def run_rft(
    policy,
    envs: Sequence[Any],
    agent,
    options: RFTOptions,
    output_dir: str | os.PathLike,
    env_steps: int,
    temperature: float = 1.0,
    seed: int = 0,
    checkpoint_every: int = 1,
    autocast: bool = False,
    config: dict | None = None,
    progress: bool = True,
    shards: Shards = Shards(),
    on_start: Callable[[Path], None] | None = None,
) -> dict:
    """Reward-filtered self-imitation (`jetgym.training.rft`) on `envs` (`options.num_envs` envs with
    `CandidateActions`; `agent`: the scorer agent that writes the questions) until `env_steps` env steps have been
    played; returns the summary. Under data parallelism each rank plays its share of a round's episodes (`envs`:
    one rank's envs) and every rank clones the same pool."""
    from . import rft
    from .plan import Transitions

    if len(envs) < 1:
        raise ValueError("run_rft needs at least one env")
    if options.refit and policy.peft is None:
        raise ValueError("train.refit fits a fresh LoRA adapter: set train.finetune=lora, or train.refit=0")
    folder = TrainingFolder(output_dir, config or {"algorithm": "rft", "seed": seed, **options.__dict__})
    with folder.lock(shards):
        optimizer, generator, state, rows = folder.start(policy, options.learning_rate, seed, shards, on_start)
        done, steps = state.get("update", 0), state.get("env_steps", 0)
        pool = rft.Pool(options.replay, state.get("pool", ()))
        transitions = Transitions(state.get("transitions", ()))
        record = FitRecord.from_rows(state)
        asked = set(state.get("questions", ()))  # digests of every question text played
        seen = dict(state.get("seen", {"episodes": 0, "kept": 0, "best_return": None, "success_signal": False}))
        bar = tqdm(
            total=env_steps,
            initial=min(steps, env_steps),
            unit="step",
            desc="rft",
            disable=not (progress and shards.writer),
        )
        started = time.monotonic()
        cloned: list = []  # the last round's labels

        def advance(n: int) -> None:  # this rank's steps, as they are played
            bar.update(min(n, max(env_steps - bar.n, 0)))

        while steps < env_steps:
            begun = time.monotonic()
            seeds = rft.round_seeds(seed, done, options)
            mine = [seeds[i] for i in shards.mine(len(seeds))]
            budget = None if shards.ranks.world_size > 1 else env_steps - steps  # ranks: whole rounds
            explorer = transitions.explorer(options.gamma) if options.advantage == "plan" else None
            played = [
                e
                for part in shards.gather(
                    rft.play_round(
                        envs, agent, policy.scorer, mine, options, temperature, seed, budget, advance, explorer
                    )
                )
                for e in part
            ]
            played.sort(key=lambda e: (e.seed, e.member))
            counts = memo_counts(policy)
            collected = time.monotonic()
            asked.update(question_digest(d.context) for e in played for d in e.decisions)
            kept, stepped, planned, new, cloned = rft.label_round(played, pool, transitions, options)
            rate = set_learning_rate(optimizer, learning_rate_at(options, steps, env_steps))
            played_steps = sum(len(e.rewards) for e in played)
            share = sum(e.ended for e in played) / (options.group * options.seeds_per_round)
            final = steps + played_steps >= env_steps
            fit = (
                Fit(0, 0, 0, None, None)  # the refit starts afresh: the rounds' clone is not fitted again
                if final and options.refit
                else clone_to_fit(
                    policy, optimizer, cloned, record, options, autocast, shards, generator, played_steps, share, final
                )
            )
            fitting = time.monotonic()
            done += 1
            steps += played_steps
            ended = [e for e in played if e.ended]  # not the ones the budget cut
            returns = [e.total for e in ended]
            seen["episodes"] += len(played)
            seen["kept"] += len(kept)
            seen["best_return"] = max(
                returns + ([seen["best_return"]] if seen["best_return"] is not None else []), default=None
            )
            seen["success_signal"] = seen["success_signal"] or any(e.success for e in played)
            row = {
                "update": done,
                "round": done,
                "env_steps": steps,
                "episodes": len(played),
                "cut_episodes": len(played) - len(ended),
                "mean_return": sum(returns) / len(returns) if ended else None,
                "success_rate": sum(e.success for e in ended) / len(ended) if ended else None,
                "best_return": max(returns, default=None),
                "kept_episodes": len(kept),
                "step_group_decisions": len(stepped),
                "planned_decisions": len(planned),
                "new_decisions": new,
                "pool": len(pool.items),
                "cloned": len(cloned),
                **fit.row(),
                "learning_rate": rate,
                **counts,
                "rollout_seconds": round(collected - begun, 3),
                "update_seconds": round(fitting - collected, 3),
                "env_steps_per_second": round(played_steps / max(time.monotonic() - begun, 1e-9), 3),
            }
            rows.append(row)
            if shards.writer:
                append_jsonl(folder.log, [row])
                if done % checkpoint_every == 0 and steps < env_steps:
                    folder.save_checkpoint(
                        policy,
                        optimizer,
                        {
                            "update": done,
                            "env_steps": steps,
                            "seen": seen,
                            "pool": pool.rows(),
                            "transitions": transitions.rows(),
                            **record.rows(),
                            "questions": sorted(asked),
                            "generator": generator.get_state().tolist(),
                        },
                    )
            bar.update(min(steps, env_steps) - bar.n)  # every rank's steps
            success = row["success_rate"]
            bar.set_postfix(
                round=done,
                steps_s=row["env_steps_per_second"],
                success=None if success is None else round(success, 3),
                kept=len(kept),
            )
        bar.close()
        warning = None
        if not pool.items and not planned:
            warning = rft.nothing_kept(
                steps, seen["episodes"], seen["best_return"], options.keep, seen["success_signal"]
            )
        refitted = None
        if options.refit and cloned:
            refitted = refit(policy, cloned, options, autocast, shards, generator, progress and shards.writer)
        last = next((row for row in reversed(rows) if row["success_rate"] is not None), {})
        labels = [k.accepted() for k in cloned]
        agreed = measure(policy, [k.decision for k in cloned], shards, labels, autocast).agreed if cloned else []
        summary = {
            "algorithm": "rft",
            "rounds": done,
            "env_steps": steps,
            "seed": seed,
            "ranks": shards.ranks.world_size,
            "seconds_this_process": round(time.monotonic() - started, 3),
            "config": folder.config,
            "kept_episodes": seen["kept"],
            "episodes": seen["episodes"],
            "best_return": seen["best_return"],
            "last_mean_return": last.get("mean_return"),
            "last_success_rate": last.get("success_rate"),
            "questions_played": len(asked),
            "labels": len(agreed),  # every label of the last round (pool and planned), and the final argmax on them
            "label_agreement": round(sum(agreed) / len(agreed), 4) if agreed else None,
            "refit": refitted,
        }
        if warning:
            summary["warning"] = warning
        if not shards.writer:
            return summary
        write_json(folder.out / QUESTIONS, sorted(asked), indent=None, what="the questions played")
        return folder.finish(policy, summary, rows, "env_steps", ["success_rate", "mean_return"])


@dataclass(frozen=True)
class Fit:
    """What a round's cloning did: its decisions not yet fitted (`fresh`) and `replayed` from the fitted rest,
    optimizer `steps`, and their last measured argmax agreement with the labels and mean gold NLL."""

    fresh: int
    replayed: int
    steps: int
    agreement: float | None
    loss: float | None
    read: int = 0  # of the first measure: read back from the round's decisions
    evaluated: int = 0  # and run through the policy

    def row(self) -> dict:
        return {
            "fresh_decisions": self.fresh,
            "replayed_decisions": self.replayed,
            "clone_steps": self.steps,
            "clone_agreement": None if self.agreement is None else round(self.agreement, 6),
            "loss": None if self.loss is None else round(self.loss, 6),
            "check_cached": self.read,
            "check_scored": self.evaluated,
        }


@dataclass
class FitRecord:
    """Per question key (`rft.state_key`): the label its argmax last agreed with (`fitted`) and, for one not
    fitted, its label and the rounds it was cloned as fresh without fitting (`missed`). A label is the list of
    candidate indices that count as agreeing (`rft.Kept.accepted`), so a label whose ties narrow is a new one."""

    fitted: dict = field(default_factory=dict)
    missed: dict = field(default_factory=dict)

    def rows(self) -> dict:
        return {
            "fitted": [[key.hex(), gold] for key, gold in self.fitted.items()],
            "missed": [[key.hex(), gold, rounds] for key, (gold, rounds) in self.missed.items()],
        }

    @classmethod
    def from_rows(cls, state: dict) -> "FitRecord":
        return cls(
            {bytes.fromhex(key): gold for key, gold in state.get("fitted", ())},
            {bytes.fromhex(key): (gold, rounds) for key, gold, rounds in state.get("missed", ())},
        )

    def is_fresh(self, key: bytes, gold, tries: int) -> bool:
        """Not fitted to `gold`, and not yet missed `tries` rounds with this label."""
        missed_gold, rounds = self.missed.get(key, (gold, 0))
        return not self.is_fitted(key, gold) and (missed_gold != gold or rounds < tries)

    def is_fitted(self, key: bytes, gold) -> bool:
        return self.fitted.get(key) == gold

    def update(self, key: bytes, gold, agreed: bool, was_fresh: bool) -> None:
        if agreed:
            self.fitted[key] = gold
            self.missed.pop(key, None)
            return
        self.fitted.pop(key, None)
        missed_gold, rounds = self.missed.get(key, (gold, 0))
        self.missed[key] = (gold, (rounds if missed_gold == gold else 0) + was_fresh)

    def keep_only(self, keys: set) -> None:
        for book in (self.fitted, self.missed):
            for key in set(book) - keys:  # left the pool
                del book[key]


def clone_to_fit(
    policy,
    optimizer,
    cloned: list,
    record: FitRecord,
    options: RFTOptions,
    autocast,
    shards,
    generator,
    played_steps: int = 0,
    round_share: float = 1.0,
    final: bool = False,
) -> Fit:
    """Clone a round's decisions (`rft.Kept`) until a share `options.fit` of them agree with their labels (those
    missed in all their tries are trained but not waited for): the fresh ones (not yet fitted to their label, and
    cloned as fresh in fewer than `options.tries` rounds; `record` is updated here) and a sample of the rest
    (`options.replay_ratio` times as many, at least a minibatch), so a round costs what it adds, not the whole pool,
    nor every label that never fits. They are measured first (`measure`: free for questions the round played, the
    weights have not moved since); none agreeing short of the target, shuffled passes of `options.minibatch` train
    them, each step measuring its minibatch before it, until the latest measures reach the target or the cap:
    `options.updates` steps (times `round_share`, the share of the round's episodes played to their end, below 1
    when the budget cut the round), or one per `options.env_steps_per_update` of the round's `played_steps`, or one
    pass over the fresh ones, whichever is most. The `final` round replays every fitted label instead of a sample,
    so the labels the clone has drifted off since they were fitted are found and fitted again, and its cap (at least
    one pass over all it takes) is `options.tries` times a round's, the steps its fresh labels would have had in the
    rounds they would have been tried in again: what the run leaves behind agrees with every label it fitted, not
    only the latest round's."""
    from . import rft

    keys = [rft.state_key(k.decision) for k in cloned]
    labels = [k.accepted() for k in cloned]  # a label is what counts as agreeing: narrowed ties make it fresh again
    fresh = [i for i, key in enumerate(keys) if record.is_fresh(key, labels[i], options.tries)]
    rest = sorted(set(range(len(cloned))) - set(fresh))
    if final:
        replayed = [i for i in rest if record.is_fitted(keys[i], labels[i])]
    else:
        wanted = min(len(rest), max(options.minibatch, math.ceil(options.replay_ratio * len(fresh))))
        replayed = [rest[i] for i in torch.randperm(len(rest), generator=generator)[:wanted].tolist()]
    picked = fresh + replayed
    chosen = [cloned[i] for i in picked]
    if not chosen:
        return Fit(0, 0, 0, None, None)
    # the target counts the fresh and the replayed that were fitted; one missed in all its tries is not waited for
    counted = [n < len(fresh) or record.is_fitted(keys[i], labels[i]) for n, i in enumerate(picked)]
    accepted = [labels[i] for i in picked]
    checked = measure(policy, [k.decision for k in chosen], shards, accepted, autocast)
    agreed, nll = checked.agreed, checked.nll

    def short() -> bool:
        return sum(a for a, c in zip(agreed, counted) if c) < options.fit * sum(counted)

    size = min(options.minibatch, len(chosen))
    floor = math.ceil(options.updates * round_share)
    cap = max(floor, -(-played_steps // options.env_steps_per_update), -(-len(picked if final else fresh) // size))
    cap *= options.tries if final else 1  # what the rounds it would have been tried in again may spend
    steps = 0
    while short() and steps < cap:
        order = torch.randperm(len(chosen), generator=generator).tolist()
        for start in range(0, len(order), size):
            batch = order[start : start + size]
            step = clone_step(
                policy, optimizer, [chosen[i] for i in batch], [accepted[i] for i in batch], options, autocast, shards
            )
            for i, a, n in zip(batch, step.agreed, step.nll):
                agreed[i], nll[i] = a, n
            steps += 1
            if not short() or steps >= cap:
                break
    for n, (i, a) in enumerate(zip(picked, agreed)):
        record.update(keys[i], labels[i], a, n < len(fresh))
    record.keep_only(set(keys))
    return Fit(
        len(fresh),
        len(replayed),
        steps,
        sum(agreed) / len(chosen),
        sum(nll) / len(nll),
        checked.read,
        checked.evaluated,
    )


def clone_step(policy, optimizer, kept: list, accepted: list, options: RFTOptions, autocast, shards):
    """`fit_step` on a minibatch of `rft.Kept` decisions, each weighted by its weight, `accepted` its labels."""
    return fit_step(
        policy, optimizer, [k.decision for k in kept], options, autocast, shards, [k.weight for k in kept], accepted
    )


def refit(policy, cloned: list, options: RFTOptions, autocast, shards, generator, progress: bool = False) -> dict:
    """`options.refit`: fit a fresh adapter (`Policy.reset`) to the last round's labels (`rft.Kept`) in shuffled
    passes of `options.minibatch`, the rate decaying linearly from `options.learning_rate` to 0 over `options.refit`
    passes, until a share `options.fit` agrees at its latest measure (each step measures its minibatch before
    it), in place of the last round's sweep. Returns its steps, last agreement and seconds."""
    begun = time.monotonic()
    policy.reset()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=options.learning_rate, weight_decay=0.0)
    accepted = [k.accepted() for k in cloned]
    size = min(options.minibatch, len(cloned))
    per_pass = -(-len(cloned) // size)
    total = options.refit * per_pass
    agreed = [False] * len(cloned)
    steps, order, share = 0, [], 0.0
    bar = tqdm(total=total, unit="step", desc="refit", disable=not progress)
    while steps < total and share < options.fit:
        if steps % per_pass == 0:
            order = torch.randperm(len(cloned), generator=generator).tolist()
        batch = order[(steps % per_pass) * size :][:size]
        set_learning_rate(optimizer, options.learning_rate * (1 - steps / total))
        step = clone_step(
            policy, optimizer, [cloned[i] for i in batch], [accepted[i] for i in batch], options, autocast, shards
        )
        for i, a in zip(batch, step.agreed):
            agreed[i] = a
        steps += 1
        share = sum(agreed) / len(cloned)
        bar.update(1)
        bar.set_postfix(loss=round(step.loss, 4), agreement=round(share, 3))
    bar.close()
    return {
        "steps": steps,
        "agreement": round(share, 4),
        "seconds": round(time.monotonic() - begun, 3),
    }


@dataclass(frozen=True)
class Measured:
    """Per question: its argmax agreement with its gold and its gold NLL; how many were `read` back from the
    memoized decisions and how many `evaluated` through the policy."""

    agreed: list[bool]
    nll: list[float]
    read: int
    evaluated: int


def measure(
    policy, questions: list, shards: Shards, accepted: Sequence[Sequence[int]] | None = None, autocast: bool = False
) -> Measured:
    """Each question's argmax agreement with its gold and gold NLL under the policy's current weights, without
    gradients. A question whose decision the memoized scorer still keeps (the round played it and the weights
    have not moved since) is read back; the rest run through `Policy.evaluate`, where a question trained or
    measured before has its frozen trunk's states kept, so only the trained layers run. `accepted`: per question,
    the candidate indices that count as its gold (default: the gold's text)."""
    golds = accepted if accepted is not None else [gold_indices(q) for q in questions]
    peek = getattr(policy.scorer, "peek", lambda question: None)

    def judge(part: list) -> list[tuple[bool, float, bool]]:
        asked = [replace(q, gold=None) for q, _ in part]
        kept = [peek(q) for q in asked]
        out = [(d.choice in g, d.nll_of(g), True) if d is not None else None for d, (_, g) in zip(kept, part)]
        rest = [i for i, d in enumerate(kept) if d is None]
        if rest:
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                log_q = policy.evaluate([asked[i] for i in rest]).log_q
                nll = gold_nll(log_q, [asked[i] for i in rest], [part[i][1] for i in rest]).tolist()
            for i, lq, n in zip(rest, log_q, nll):
                out[i] = (int(torch.argmax(lq)) in part[i][1], n, False)
        return out

    scored = shards.map(judge, list(zip(questions, golds)))
    read = sum(r for _, _, r in scored)
    return Measured([a for a, _, _ in scored], [n for _, n, _ in scored], read, len(scored) - read)


def memo_counts(policy) -> dict:
    """The rollout decisions scored and read from the kept ones since the last call ({} without memoization)."""
    take = getattr(policy.scorer, "take_counts", None)
    return take() if take is not None else {}


def set_learning_rate(optimizer, rate: float) -> float:
    for group in optimizer.param_groups:
        group["lr"] = rate
    return rate


def _prefixed(metrics: dict) -> dict:
    return {f"held_out_{k}": v for k, v in metrics.items()}
