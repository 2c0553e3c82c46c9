"""`jetgym-qa`: score a question set, write responses.jsonl, summary.json and report.md.

Responses are appended per chunk (flushed and fsynced), so a killed run loses at most one chunk;
rerunning into the same folder resumes where it stopped. `wall_seconds` runs from the start of the
process (interpreter start-up, imports, model load included) for the console command, from the call
of `run_qa` otherwise; it ends when the summary is written. Each run appends its record to runs.jsonl and
the summary's timing covers every run that scored something. One run at a time per folder (a lock); all
JSON is strict (no NaN/Infinity). Promises and their tests: docs/reliability.md.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor, wait
import datetime
from typing import Any, Iterator



def process_start() -> float:
    """`time.monotonic()` at this process's start (read from /proc on Linux; the import time elsewhere)."""
    try:
        started_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.monotonic() - (uptime - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.monotonic()


PROCESS_START = process_start()

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402
from tqdm import tqdm  # noqa: E402

from jetgym.questions.metrics import calibration_summary  # noqa: E402
from jetgym.questions.sets import load_question_set  # noqa: E402
from jetgym.scripts.benchmarks_doc import write_section  # noqa: E402
from jetgym.scripts.config import CONFIG_PATH, QAConfig, build_scorer, to_config  # noqa: E402
from jetgym.scripts import distributed  # noqa: E402
from jetgym.scripts.run_folder import LOCK, check_output_dir_argument, dumps, folder_lock, make_folder  # noqa: E402

RESPONSES = "responses.jsonl"
SUMMARY = "summary.json"
REPORT = "report.md"
RUN = "run.json"
RUNS = "runs.jsonl"
# gold NLLs are clipped here for `clipped_mean_gold_nll` (a gold probability floor of 1e-15), so one
# question whose gold answer is all but impossible cannot dominate the mean
GOLD_NLL_CLIP = -math.log(1e-15)


def run_qa(cfg: Any, output_dir: str | os.PathLike | None = None, started: float | None = None) -> dict:
    """Score every question of `cfg.dataset` into `output_dir` (default `cfg.output_dir`); return the summary.

    One run at a time per folder (a lock; a second run is refused). `run.json` is written once the question
    set and the scorer are ready, so a run that fails before it can start leaves the folder reusable.
    Questions are scored in fixed chunks of `chunk_size` consecutive questions of the set, whatever was
    done before: a resumed run re-scores a partly written chunk whole and writes only its missing rows,
    so the responses do not depend on where an earlier run stopped (see docs/reliability.md).

    Under torchrun (WORLD_SIZE > 1) rank R scores the chunks k with k % WORLD_SIZE == R into its own
    `responses.rank-R-of-N.jsonl` (resumed on its own); after every rank is done, rank 0 merges them into
    `responses.jsonl` in dataset order: the same chunks, so the same bytes as one process (docs/scaling.md)."""
    started = time.monotonic() if started is None else started
    config: QAConfig = to_config(cfg)
    if not (output_dir or config.output_dir):
        raise ValueError("run_qa needs an output folder: set output_dir")
    ranks = distributed.current()
    out = make_folder(output_dir or config.output_dir)
    try:
        with folder_lock(out, "jetgym-qa", ranks.suffix(LOCK)):
            return _run_qa(config, out, started, ranks)
    finally:
        distributed.finish(ranks)


def _run_qa(config: QAConfig, out: Path, started: float, ranks: distributed.Ranks) -> dict:
    settings = run_settings(config, ranks)
    check_same_run(out / RUN, settings)
    distributed.init(ranks, config.rank_timeout_s, gpu=config.placement.device == "cuda")
    distributed.agree(ranks, settings)  # before any work
    questions = load_question_set(config.dataset)
    if not questions:
        raise ValueError(f"question set {config.dataset.name!r} holds no questions")
    ids = {q.id for q in questions}
    responses_file, runs_file = out / ranks.suffix(RESPONSES), out / ranks.suffix(RUNS)
    done = read_responses(responses_file)
    unknown = [i for i in done if i not in ids]
    if unknown:
        raise ValueError(
            f"{responses_file} holds {len(unknown)} responses for questions outside this question set "
            f"(e.g. {unknown[0]!r}); use a fresh output_dir"
        )
    skipped_before = {i for i, row in done.items() if row.get("skipped")}
    size = config.chunk_size
    # fixed chunks of the set; a chunk with a missing row is scored whole (less the questions skipped before)
    fixed = [questions[at : at + size] for at in range(0, len(questions), size)]
    chunks = [chunk for k, chunk in enumerate(fixed)
              if k % ranks.world_size == ranks.rank and any(q.id not in done for q in chunk)]
    chunks = [[q for q in chunk if q.id not in skipped_before] for chunk in chunks]
    pending = sum(q.id not in done for chunk in chunks for q in chunk)

    scorer = build_scorer(config)
    if ranks.rank == 0:
        record_run(out / RUN, settings)  # the run can start
    begun = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    counts = {"requests": 0, "skipped": 0}
    resumed = len(done) > 0

    def record(**extra) -> None:
        wall = time.monotonic() - started
        run = {"started": begun, **counts, "resumed": resumed, "wall_seconds": round(wall, 3),
               "requests_per_second": counts["requests"] / wall if wall > 0 else None, **extra}
        with open(runs_file, "a", encoding="utf-8") as sink:
            sink.write(dumps(run, what="the run record") + "\n")

    try:
        mine = sum(len(chunk) for k, chunk in enumerate(fixed) if k % ranks.world_size == ranks.rank)
        with open(responses_file, "a", encoding="utf-8") as sink, tqdm(
            total=mine, initial=mine - pending, unit="q",
            desc=f"scoring (rank {ranks.rank}/{ranks.world_size})" if ranks.distributed else "scoring"
        ) as bar:
            for chunk, (decisions, errors) in zip(chunks, decide_chunks(scorer, chunks, config.pipeline, config.on_error)):
                by_id = {d.id: d for d in decisions}
                rows = []
                for q in chunk:
                    if q.id in done:
                        continue  # written by an earlier run; re-scored only to keep the chunk's composition
                    if q.id in errors:
                        rows.append(skipped_row(q, errors[q.id]))
                    else:
                        rows.append(response_row(q, by_id.get(q.id)))
                sink.write("".join(dumps(row, what=f"the response to question {row['id']!r}") + "\n" for row in rows))
                sink.flush()
                os.fsync(sink.fileno())
                done.update((row["id"], row) for row in rows)
                counts["requests"] += sum(not row.get("skipped") for row in rows)
                counts["skipped"] += sum(bool(row.get("skipped")) for row in rows)
                bar.update(len(rows))
    except BaseException as error:  # a failed run's record keeps the work it did (a killed one has none)
        record(error=f"{type(error).__name__}: {error}")
        raise
    record()
    if ranks.distributed:
        distributed.wait_for_all(ranks, config.rank_timeout_s)
        if ranks.rank != 0:
            return {"rank": ranks.rank, "requests_this_run": counts["requests"]}
        distributed.merge_jsonl(out, RESPONSES, ranks.world_size, [q.id for q in questions], key="id")
        done = read_responses(out / RESPONSES)

    responses = [done[q.id] for q in questions]
    runs = {r: read_runs(path) for r, path in enumerate(distributed.rank_files(out, RUNS, ranks.world_size))}
    summary = summarize(responses, config, scorer.describe(), runs)
    summary["calibration"] = calibration_summary(responses, out, getattr(scorer.options, "temperature", None))
    (out / SUMMARY).write_text(dumps(summary, indent=2, what="the summary") + "\n", encoding="utf-8")
    (out / REPORT).write_text(render_report(summary), encoding="utf-8")
    if config.dataset.name == "libero":  # per-type accuracy, baselines, episode-bootstrap intervals, examples
        from jetgym.questions.libero_report import write_libero_report

        write_libero_report(questions, responses, out, path=config.dataset.path)
    if config.record:
        command = "jetgym-qa " + " ".join(sys.argv[1:])
        write_section(f"qa-{config.record}", f"{render_report(summary)}\nCommand: `{command}`\n".replace("# QA:", "## QA:", 1))
    accuracy = "n/a" if summary["accuracy"] is None else f"{summary['accuracy']:.4f}"
    skipped_note = f"; {summary['skipped']} question(s) skipped (see 'skipped' in {RESPONSES})" if summary["skipped"] else ""
    print(f"accuracy {accuracy} ({summary['correct']}/{summary['graded']}){skipped_note}; results in {out.resolve()}")
    return summary


class QuestionError(ValueError):
    """A question the scorer refused; the message names its id and where it came from."""


def where(question) -> str:
    return f"question {question.id!r}" + (f" ({question.source})" if question.source else "")


def skippable(error: BaseException) -> bool:
    """Errors about one question's input (too long for the window, bad text, out of memory on it): the
    ones `on_error=skip` skips. Other errors (a broken model or machine) always stop the run."""
    return isinstance(error, (ValueError, MemoryError)) or type(error).__name__ == "OutOfMemoryError"


def decide_chunks(scorer, chunks: list, pipeline: bool, on_error: str = "stop") -> Iterator[tuple[list, dict[str, str]]]:
    """(decisions, skipped {id: reason}) chunk by chunk. With `pipeline`, one persistent worker prepares
    (`Scorer.prepare`) the next chunk while the current one is scored (`Scorer.score`): at most one chunk
    ahead. A chunk that fails is settled question by question (`settle`)."""
    if not pipeline:
        for chunk in chunks:
            try:
                decisions = scorer.decide_many(chunk)
            except Exception as error:
                yield settle(scorer, chunk, error, on_error)
                continue
            yield decisions, {}
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="prepare") as worker:
        ahead = worker.submit(scorer.prepare, chunks[0]) if chunks else None
        for index in range(len(chunks)):
            failed = ahead.exception()
            prepared = None if failed else ahead.result()
            if index + 1 < len(chunks):
                ahead = worker.submit(scorer.prepare, chunks[index + 1])
            if failed is None:
                try:
                    yield scorer.score(prepared), {}
                    continue
                except Exception as error:
                    failed = error
            if index + 1 < len(chunks):
                wait([ahead])  # the tokenizer is not shared between threads while a chunk is settled
            yield settle(scorer, chunks[index], failed, on_error)


def settle(scorer, chunk: list, error: Exception, on_error: str) -> tuple[list, dict[str, str]]:
    """A chunk failed with `error`: score its questions one at a time to find the ones that fail alone.
    `stop`: raise for the first, naming its id and file:line. `skip`: record input errors as skipped and
    score the rest together (one chunk, so the composition is the same on a resumed run)."""
    bad: dict[str, str] = {}
    for question in chunk:
        try:
            scorer.decide_many([question])
        except Exception as alone:
            if on_error == "skip" and skippable(alone):
                bad[question.id] = f"{type(alone).__name__}: {alone}"
                continue
            hint = " (or set on_error=skip to record it as skipped and go on)" if skippable(alone) else ""
            if isinstance(alone, ValueError):
                raise QuestionError(f"{where(question)}: {alone}; fix or remove the question{hint}") from alone
            alone.add_note(f"while scoring {where(question)}{hint}")
            raise
    if not bad:
        raise error  # no question fails alone: the failure is not one question's
    rest = [q for q in chunk if q.id not in bad]
    return (scorer.decide_many(rest) if rest else []), bad


def skipped_row(question, reason: str) -> dict:
    """The response row of a question skipped with `on_error=skip`."""
    return {"id": question.id, "skipped": reason, "source": question.source}


def response_row(question, decision) -> dict:
    """The response object of one decision; its id must be the question's."""
    if decision is None:
        raise RuntimeError(f"the scorer returned no decision for {question.id!r}")
    row = decision.to_dict()
    if row["id"] != question.id:
        raise RuntimeError(f"scorer returned a decision for {row['id']!r} in place of {question.id!r}")
    return row


def read_responses(path: Path) -> dict[str, dict]:
    """Responses already written, by id. A trailing partial line (a killed write) is cut off."""
    if not path.exists():
        return {}
    data = path.read_bytes()
    responses: dict[str, dict] = {}
    offset = 0
    lines = data.split(b"\n")
    for line_no, raw in enumerate(lines, 1):
        if raw.strip():
            try:
                row = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                if any(rest.strip() for rest in lines[line_no:]):
                    raise ValueError(f"{path}:{line_no}: corrupt response line before the end of the file") from None
                with open(path, "r+b") as file:  # the partial last line of a killed run
                    file.truncate(offset)
                return responses
            if not isinstance(row, dict) or not isinstance(row.get("id"), str):
                raise ValueError(f"{path}:{line_no}: a response must be a JSON object with a string 'id'")
            if row["id"] in responses:
                raise ValueError(f"{path}:{line_no}: duplicate response for {row['id']!r}")
            responses[row["id"]] = row
        offset += len(raw) + 1
    if data and not data.endswith(b"\n"):
        with open(path, "ab") as file:  # a complete last line whose newline was not written
            file.write(b"\n")
    return responses


def run_settings(config: QAConfig, ranks: distributed.Ranks = distributed.Ranks()) -> dict:
    """What must not change between a run and its resumption: all but output_dir, pipeline, record, on_error,
    rank_timeout_s and dataset.limit. chunk_size stays: it decides which questions share a model call (see
    `_run_qa`); so does the number of ranks, which decides the files each rank resumes."""
    settings = asdict(config)
    for key in ("output_dir", "pipeline", "record", "on_error", "rank_timeout_s"):
        settings.pop(key, None)
    settings["dataset"].pop("limit")
    settings["world_size"] = ranks.world_size
    return settings


def check_same_run(path: Path, settings: dict) -> None:
    """Refuse to resume a folder written with other settings (nothing is written here)."""
    if not path.exists():
        return
    before = json.loads(path.read_text(encoding="utf-8"))
    before.setdefault("chunk_size", settings["chunk_size"])  # folders written before chunk_size was kept
    before.setdefault("world_size", 1)
    changed = _differences(before, settings)
    if changed:
        raise ValueError(f"{path.parent} holds a run with other settings ({', '.join(changed)}); use a fresh output_dir")


def _differences(before: dict, after: dict, prefix: str = "") -> list[str]:
    """Dotted names of the settings that differ."""
    changed = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            changed += _differences(old, new, f"{prefix}{key}.")
        elif old != new:
            changed.append(f"{prefix}{key}")
    return changed


def record_run(path: Path, settings: dict) -> None:
    """Write run.json (the settings a resumption must keep) once the run can start."""
    if not path.exists():
        path.write_text(dumps(settings, indent=2, what="run.json") + "\n", encoding="utf-8")


def read_runs(path: Path) -> list[dict]:
    """The per-run records of runs.jsonl (one line per finished run, oldest first)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def gold_nll_stats(nlls: list[float]) -> dict:
    """Mean, median and clipped mean (each NLL capped at `GOLD_NLL_CLIP`) of the gold NLLs, and the largest."""
    if not nlls:
        return {"mean_gold_nll": None, "median_gold_nll": None, "clipped_mean_gold_nll": None, "max_gold_nll": None}
    return {
        "mean_gold_nll": math.fsum(nlls) / len(nlls),
        "median_gold_nll": statistics.median(nlls),
        "clipped_mean_gold_nll": math.fsum(min(n, GOLD_NLL_CLIP) for n in nlls) / len(nlls),
        "max_gold_nll": max(nlls),
    }


def summarize(responses: list[dict], config: QAConfig, scorer_options: dict, runs: dict[int, list[dict]]) -> dict:
    """summary.json: accuracy and gold NLL over all responses; timing over every recorded run that scored.

    `runs` are the records of runs.jsonl by rank (this run last; one rank without torchrun):
    `wall_seconds` and `requests_per_second` count the runs that scored at least one question, so rerunning
    a finished folder keeps the first run's figures. Ranks run side by side: the job's wall time is the
    slowest rank's; `ranks` gives each rank's own throughput."""
    graded = [r for r in responses if r.get("correct") is not None]
    nlls = [r["gold_nll"] for r in responses if r.get("gold_nll") is not None]
    per_rank = {}
    for rank, records in runs.items():
        working = [run for run in records if run["requests"]]
        requests_r, wall_r = sum(run["requests"] for run in working), sum(run["wall_seconds"] for run in working)
        per_rank[rank] = {"requests": requests_r, "wall_seconds": round(wall_r, 3),
                          "requests_per_second": requests_r / wall_r if wall_r > 0 else None}
    requests = sum(r["requests"] for r in per_rank.values())
    wall = max((r["wall_seconds"] for r in per_rank.values()), default=0.0)
    latest = [records[-1] for records in runs.values() if records]
    this_run = {"requests": sum(r["requests"] for r in latest),
                "wall_seconds": max((r["wall_seconds"] for r in latest), default=0.0),
                "resumed": any(r.get("resumed") for r in latest)}
    count = max((len(records) for records in runs.values()), default=0)
    return {
        "accuracy": sum(r["correct"] for r in graded) / len(graded) if graded else None,
        "correct": sum(r["correct"] for r in graded),
        "graded": len(graded),
        **gold_nll_stats(nlls),
        "gold_nll_clip": GOLD_NLL_CLIP,
        "requests": len(responses),
        "skipped": sum(bool(r.get("skipped")) for r in responses),
        "requests_this_run": this_run["requests"],
        "wall_seconds_this_run": this_run["wall_seconds"],
        "resumed": bool(this_run.get("resumed")) or count > 1,
        "runs": count,
        "ranks": per_rank if len(per_rank) > 1 else None,
        "requests_timed": requests,
        "wall_seconds": round(wall, 3),
        "requests_per_second": requests / wall if wall > 0 else None,
        "model": config.model.spec,
        "placement": asdict(config.placement),
        "scorer": scorer_options,
        "dataset": {**asdict(config.dataset), "questions": len(responses)},
    }


def render_report(summary: dict) -> str:
    """A short markdown report of the summary."""
    dataset = summary["dataset"]
    accuracy = "n/a" if summary["accuracy"] is None else f"{100 * summary['accuracy']:.2f}%"
    number = lambda key: "n/a" if summary.get(key) is None else f"{summary[key]:.5f}"  # noqa: E731
    rate = "n/a" if summary["requests_per_second"] is None else f"{summary['requests_per_second']:.2f}"
    options = ", ".join(f"{key}={json.dumps(value)}" for key, value in sorted(summary["scorer"].items()))
    skipped = f" ({summary['skipped']} skipped)" if summary.get("skipped") else ""
    return (
        f"# QA: {dataset['name']} ({dataset['subset']})\n\n"
        f"| model | placement | accuracy | gold NLL mean / median / clipped mean | requests | wall s | requests/s |\n"
        f"|---|---|---|---|---|---|---|\n"
        f"| {summary['model']} | {summary['placement']['device']}/{summary['placement']['dtype']} | {accuracy} "
        f"({summary['correct']}/{summary['graded']}) | {number('mean_gold_nll')} / {number('median_gold_nll')} / "
        f"{number('clipped_mean_gold_nll')} | {summary['requests']}{skipped} | {summary['wall_seconds']} | {rate} |\n\n"
        f"Scorer: {options}\n\n"
        f"Requests/s counts the {summary['requests_timed']} requests scored over {summary['runs']} run(s) of this "
        f"folder{' (resumed)' if summary['resumed'] else ''}, by the wall time of the runs that scored any (model "
        f"load included). The clipped mean caps each gold NLL at {summary['gold_nll_clip']:.2f} (a gold "
        f"probability floor of 1e-15).\n"
        + ("" if not summary.get("ranks") else "\n| rank | requests | wall s | requests/s |\n|---|---|---|---|\n" + "".join(
            f"| {rank} | {r['requests']} | {r['wall_seconds']} | "
            f"{'n/a' if r['requests_per_second'] is None else format(r['requests_per_second'], '.2f')} |\n"
            for rank, r in summary["ranks"].items()))
        + _calibration_lines(summary.get("calibration"))
    )


def _calibration_lines(calibration: dict | None) -> str:
    """Calibration of the chosen answers' probabilities (ECE, Brier), before and after a temperature."""
    if not calibration:
        return ""
    rows = "".join(f"| {when} | {m['ece']:.4f} | {m['brier']:.4f} |\n" for when, m in calibration.items()
                   if isinstance(m, dict) and m.get("ece") is not None)
    return ("\n| probabilities | ECE | Brier |\n|---|---|---|\n" + rows
            + "\nReliability diagram: reliability.png (see jetgym.questions.metrics).\n") if rows else ""


@hydra.main(config_path=CONFIG_PATH, config_name="qa", version_base=None)
def hydra_main(cfg: DictConfig) -> None:
    """Console entry: `jetgym-qa key=value ...`."""
    run_qa(cfg, output_dir=HydraConfig.get().runtime.output_dir, started=PROCESS_START)


def main() -> None:
    """Console entry `jetgym-qa key=value ...`: output_dir is checked before Hydra writes into it."""
    check_output_dir_argument(sys.argv[1:], "jetgym-qa")
    hydra_main()


if __name__ == "__main__":
    main()
