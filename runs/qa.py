"""`run_qa`: score a list of questions into a run folder, resumably; write responses, summary and report.

    from jetgym import run_qa
    summary = run_qa(questions, scorer, "results/mmlu")   # questions: jetgym.scorers.Question with ids

Files in the folder: `responses.jsonl` (one strict-JSON object per question, sorted keys, in the order of the
questions), `run.json` (the settings a resumption must keep), `runs.jsonl` (one record per run: requests,
skipped, wall seconds), `summary.json`, `report.md`, `reliability.png` (with matplotlib). Responses are appended
per chunk (flushed and fsynced), so a killed run loses at most one chunk; calling `run_qa` again on the same
folder resumes where it stopped. One run at a time per folder (a lock); a folder another kind of job wrote
(episodes, training), or one holding a summary or report but no `run.json`, is refused. Promises and their tests:
docs/reliability.md. Imports neither Hydra nor torch.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from tqdm import tqdm

from jetgym.runs import identity
from jetgym.runs import ranks as ranks_
from jetgym.runs.folder import (
    LOCK,
    append_jsonl,
    atomic_file,
    check_settings,
    folder_lock,
    make_folder,
    read_jsonl,
    refuse_other_jobs,
    refuse_results,
    write_json,
    write_text,
)

RESPONSES = "responses.jsonl"
SUMMARY = "summary.json"
REPORT = "report.md"
RUN = "run.json"
RUNS = "runs.jsonl"
ON_ERROR = ("stop", "skip")
# gold NLLs are clipped here for `clipped_mean_gold_nll` (a gold probability floor of 1e-15), so one
# question whose gold answer is all but impossible cannot dominate the mean
GOLD_NLL_CLIP = -math.log(1e-15)

Report = Callable[[Sequence[Any], list[dict], Path], None]


def run_qa(
    questions: Sequence[Any],
    scorer: Any,
    output_dir: str | os.PathLike,
    *,
    chunk_size: int = 16,
    pipeline: bool = True,
    on_error: str = "stop",
    settings: dict | None = None,
    about: dict | None = None,
    reports: Sequence[Report] = (),
    started: float | None = None,
    gpu: bool = False,
    rank_timeout_s: float = 1800.0,
    quiet: bool = False,
    allow_single_choice: bool = False,
    on_start: Callable[[Path], None] | None = None,
) -> dict:
    """Score every question into `output_dir` and return the summary (what `summary.json` holds).

    questions: `Question`s with distinct string ids (the resumption key). scorer: a built scorer (anything
    with `decide_many`, `describe` and, for `pipeline`, `prepare`/`score`), or a function of no arguments that
    builds one: it is called once the folder is locked and checked, so a refused run loads no model.
    chunk_size: questions scored and flushed together. The chunks are fixed slices of `questions`, whatever
    was done before: a resumed run re-scores a partly written chunk whole and writes only its missing rows, so
    the responses do not depend on where an earlier run stopped. pipeline: prepare the next chunk in a worker
    thread while the current one is scored. on_error: `stop` (raise naming the question) or `skip` (record
    input errors as skipped rows). settings: what must not change between a run and its resumption (written to
    `run.json`; default: the scorer's `describe()`); `chunk_size` and the number of ranks are always added.
    about: extra summary fields (e.g. `model`, `placement`, `dataset` = {name, subset, ...}). reports:
    functions `(questions, responses, folder)` that write further reports after the summary. started:
    `time.monotonic()` at which the run's wall time starts (default: now). quiet: no progress bar.
    allow_single_choice: score questions with a single distinct candidate text (always chosen, so always graded
    correct); refused by default. on_start: called (rank 0) with the folder once it is locked and checked and
    the scorer is built, before any response is written (the console job writes `.hydra/` then).

    Under torchrun (WORLD_SIZE > 1) rank R scores the chunks k with k % WORLD_SIZE == R into its own
    `responses.rank-R-of-N.jsonl` (resumed on its own); after every rank is done, rank 0 merges them into
    `responses.jsonl` in question order: the same chunks, so the same bytes as one process
    (docs/scaling.md). gpu: join with nccl and use `cuda:LOCAL_RANK` (build the scorer after it: pass a
    function); rank_timeout_s: how long a finished rank waits for the others."""
    started = time.monotonic() if started is None else started
    if not output_dir:
        raise ValueError("run_qa needs an output folder: set output_dir")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {', '.join(ON_ERROR)}, got {on_error!r}")
    questions = list(questions)
    _check_ids(questions)
    if not allow_single_choice:
        _refuse_single_choice(questions)
    ranks = ranks_.current()
    out = make_folder(output_dir)
    try:
        with folder_lock(out, "jetgym-qa", ranks.suffix(LOCK)):
            refuse_other_jobs(out, "jetgym-qa")
            if not (out / RUN).exists() and not any(out.glob("responses*.jsonl")):  # responses: _run names them
                refuse_results(out, (SUMMARY, REPORT), what=f"results but no {RUN}")
            return _run(
                questions,
                scorer,
                out,
                chunk_size,
                pipeline,
                on_error,
                settings,
                about or {},
                reports,
                started,
                gpu,
                rank_timeout_s,
                quiet,
                ranks,
                on_start,
            )
    finally:
        ranks_.finish(ranks)


def _check_ids(questions: list) -> None:
    if not questions:
        raise ValueError("run_qa got no questions")
    seen: set = set()
    for index, question in enumerate(questions):
        if not isinstance(getattr(question, "id", None), str):
            raise ValueError(
                f"questions[{index}] has no string id: run_qa keys responses by id (Question(..., id='q{index}'))"
            )
        if question.id in seen:
            raise ValueError(f"questions[{index}] repeats the id {question.id!r}: ids must be distinct")
        seen.add(question.id)


def _refuse_single_choice(questions: list) -> None:
    """A question with one distinct candidate text (one choice, or one text repeated) cannot be answered wrong: it
    would inflate accuracy."""
    for question in questions:
        candidates = getattr(question, "candidates", None)
        if candidates is None or len(set(candidates)) >= 2:
            continue
        what = (
            f"a single choice {candidates[0]!r}"
            if len(candidates) == 1
            else f"{len(candidates)} identical choices, each {candidates[0]!r} (the same text repeated)"
        )
        raise ValueError(
            f"{where(question)} has {what}: it is always chosen, so always graded correct; give it at "
            f"least two different choices, or set allow_single_choice=true to score it anyway"
        )


def _is_factory(scorer: Any) -> bool:
    return callable(scorer) and not hasattr(scorer, "decide_many")


def _run(
    questions: list,
    scorer: Any,
    out: Path,
    size: int,
    pipeline: bool,
    on_error: str,
    settings: dict | None,
    about: dict,
    reports: Sequence[Report],
    started: float,
    gpu: bool,
    rank_timeout_s: float,
    quiet: bool,
    ranks: ranks_.Ranks,
    on_start: Callable[[Path], None] | None = None,
) -> dict:
    if settings is None:
        scorer = scorer() if _is_factory(scorer) else scorer
        settings = {"scorer": scorer.describe()}
    settings = {**settings, "chunk_size": size, "world_size": ranks.world_size}
    check_settings(out / RUN, settings, defaults={"chunk_size": size, "world_size": 1})
    ranks_.init(ranks, rank_timeout_s, gpu=gpu)
    ranks_.agree(ranks, settings)  # before any work
    ids = {q.id for q in questions}
    responses_file, runs_file = out / ranks.suffix(RESPONSES), out / ranks.suffix(RUNS)
    done = read_responses(responses_file)
    if done and ranks.rank == 0 and not (out / RUN).exists():
        raise ValueError(
            f"{out} holds {responses_file.name} but no {RUN}: the settings its responses were scored "
            f"with are unknown, so the run cannot resume; restore {RUN} or use a fresh output_dir"
        )
    unknown = [i for i in done if i not in ids]
    if unknown:
        raise ValueError(
            f"{responses_file} holds {len(unknown)} responses for questions outside this question set "
            f"(e.g. {unknown[0]!r}); use a fresh output_dir"
        )
    identity.check_unchanged(responses_file, done, questions)
    skipped_before = {i for i, row in done.items() if row.get("skipped")}
    # fixed chunks of the set; a chunk with a missing row is scored whole (less the questions skipped before)
    fixed = [questions[at : at + size] for at in range(0, len(questions), size)]
    chunks = [
        chunk
        for k, chunk in enumerate(fixed)
        if k % ranks.world_size == ranks.rank and any(q.id not in done for q in chunk)
    ]
    chunks = [[q for q in chunk if q.id not in skipped_before] for chunk in chunks]
    pending = sum(q.id not in done for chunk in chunks for q in chunk)

    scorer = scorer() if _is_factory(scorer) else scorer
    if ranks.rank == 0 and not (out / RUN).exists():
        write_json(out / RUN, settings, what="run.json")  # the run can start
    if ranks.rank == 0 and on_start is not None:
        on_start(out)
    begun = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    counts = {"requests": 0, "skipped": 0}
    resumed = len(done) > 0
    written_before = set(done)

    def record(**extra) -> None:
        wall = time.monotonic() - started
        run = {
            "started": begun,
            **counts,
            "resumed": resumed,
            "wall_seconds": round(wall, 3),
            "requests_per_second": counts["requests"] / wall if wall > 0 else None,
            **extra,
        }
        append_jsonl(runs_file, [run], what="the run record")

    responses_file.touch()  # the run has started: its responses file exists, empty or not
    try:
        mine = sum(len(chunk) for k, chunk in enumerate(fixed) if k % ranks.world_size == ranks.rank)
        with tqdm(
            total=mine,
            initial=mine - pending,
            unit="q",
            disable=quiet,
            desc=f"scoring (rank {ranks.rank}/{ranks.world_size})" if ranks.distributed else "scoring",
        ) as bar:
            for chunk, (decisions, errors) in zip(chunks, decide_chunks(scorer, chunks, pipeline, on_error)):
                by_id = {d.id: d for d in decisions}
                rows = []
                for q in chunk:
                    if q.id in done:
                        continue  # written by an earlier run; re-scored only to keep the chunk's composition
                    if q.id in errors:
                        rows.append(skipped_row(q, errors[q.id]))
                    else:
                        rows.append(response_row(q, by_id.get(q.id)))
                append_jsonl(responses_file, rows, what=lambda row: f"the response to question {row['id']!r}")
                done.update((row["id"], row) for row in rows)
                counts["requests"] += sum(not row.get("skipped") for row in rows)
                counts["skipped"] += sum(bool(row.get("skipped")) for row in rows)
                bar.update(len(rows))
    except BaseException as error:  # a failed run's record keeps the work it did (a killed one has none)
        _count_written(responses_file, written_before, counts)  # an interrupt may land between a write and its count
        record(error=f"{type(error).__name__}: {error}")
        raise
    record()
    if ranks.distributed:
        ranks_.wait_for_all(ranks, rank_timeout_s)
        if ranks.rank != 0:
            return {"rank": ranks.rank, "requests_this_run": counts["requests"]}
        ranks_.merge_jsonl(out, RESPONSES, ranks.world_size, [q.id for q in questions], key="id")
        done = read_responses(out / RESPONSES)

    from jetgym.questions.metrics import RELIABILITY_PNG, calibration_summary, plot_reliability, reliability_curves

    responses = [done[q.id] for q in questions]
    runs = {
        r: read_jsonl(path, what="run record") for r, path in enumerate(ranks_.rank_files(out, RUNS, ranks.world_size))
    }
    summary = summarize(responses, scorer.describe(), runs, about)
    calibration = calibration_summary(responses, None, getattr(getattr(scorer, "options", None), "temperature", None))
    if calibration is not None:
        with atomic_file(out / RELIABILITY_PNG) as partial:
            plot_reliability(reliability_curves(calibration), partial)
        calibration["diagram"] = RELIABILITY_PNG
    summary["calibration"] = calibration
    write_json(out / SUMMARY, summary, what="the summary")
    write_text(out / REPORT, render_report(summary))
    for report in reports:
        report(questions, responses, out)
    return summary


class QuestionError(ValueError):
    """A question the scorer refused; the message names its id and where it came from."""


def where(question) -> str:
    return f"question {question.id!r}" + (f" ({question.source})" if question.source else "")


def skippable(error: BaseException) -> bool:
    """Errors about one question's input (too long for the window, bad text, out of memory on it): the
    ones `on_error=skip` skips. Other errors (a broken model or machine) always stop the run."""
    return isinstance(error, (ValueError, MemoryError)) or type(error).__name__ == "OutOfMemoryError"


def decide_chunks(
    scorer, chunks: list, pipeline: bool, on_error: str = "stop"
) -> Iterator[tuple[list, dict[str, str]]]:
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
    if not chunks:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="prepare") as worker:
        ahead = worker.submit(scorer.prepare, chunks[0])
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


def settle(scorer, chunk: list, error: BaseException, on_error: str) -> tuple[list, dict[str, str]]:
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
    return {
        "id": question.id,
        "skipped": reason,
        "source": question.source,
        identity.FIELD: identity.fingerprint(question),
    }


def response_row(question, decision) -> dict:
    """The response object of one decision; its id must be the question's."""
    if decision is None:
        raise RuntimeError(f"the scorer returned no decision for {question.id!r}")
    row = decision.to_dict()
    if row["id"] != question.id:
        raise RuntimeError(f"scorer returned a decision for {row['id']!r} in place of {question.id!r}")
    row[identity.FIELD] = identity.fingerprint(question)
    return row


def read_responses(path: Path) -> dict[str, dict]:
    """Responses already written, by id (`read_jsonl`: a torn last line is cut off and not counted). A last row
    that parses but is incomplete (e.g. a hand-cut `{"id": "q9"}`) is cut off too, so its question is scored
    again; an incomplete row before the end is an error naming its line."""
    responses: dict[str, dict] = {}
    rows = read_jsonl(path, what="response")
    if rows and identity.missing_fields(rows[-1]):
        _cut_last_line(path)
        rows.pop()
    for line_no, row in enumerate(rows, 1):
        if not isinstance(row.get("id"), str):
            raise ValueError(f"{path}:{line_no}: a response must be a JSON object with a string 'id'")
        missing = identity.missing_fields(row)
        if missing:
            raise ValueError(
                f"{path}:{line_no}: the response to {row['id']!r} is incomplete (it lacks "
                f"{', '.join(missing)}); delete that line to score the question again, or use a fresh "
                f"output_dir"
            )
        if row["id"] in responses:
            raise ValueError(f"{path}:{line_no}: duplicate response for {row['id']!r}")
        responses[row["id"]] = row
    return responses


def _count_written(path: Path, before: set, counts: dict) -> None:
    """Set the counts of a stopped run from the rows its responses file holds (beyond the ids `before`)."""
    try:
        rows = [row for row in read_jsonl(path, what="response") if row.get("id") not in before]
    except (OSError, ValueError):
        return
    counts["requests"] = sum(not row.get("skipped") for row in rows)
    counts["skipped"] = sum(bool(row.get("skipped")) for row in rows)


def _cut_last_line(path: Path) -> None:
    """Cut the file's last non-blank line (an incomplete row) off."""
    data = path.read_bytes().rstrip()
    with open(path, "r+b") as file:
        file.truncate(data.rfind(b"\n") + 1)


def read_runs(path: Path) -> list[dict]:
    """The per-run records of runs.jsonl (one line per finished run, oldest first)."""
    return read_jsonl(path, what="run record")


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


def summarize(
    responses: list[dict], scorer_options: dict, runs: dict[int, list[dict]], about: dict | None = None
) -> dict:
    """summary.json: accuracy and gold NLL over all responses; timing over every recorded run that scored.

    `runs` are the records of runs.jsonl by rank (this run last; one rank without torchrun):
    `wall_seconds` and `requests_per_second` count the runs that scored at least one question, so rerunning
    a finished folder keeps the first run's figures. Ranks run side by side: the job's wall time is the
    slowest rank's; `ranks` gives each rank's own throughput. about: `model`, `placement`, `dataset` and any
    other fields to record (defaults: the scorer's model and placement, a dataset named `questions`)."""
    about = dict(about or {})
    graded = [r for r in responses if r.get("correct") is not None]
    ties = sum(is_tie(r) for r in graded)
    decided = [r for r in graded if not is_tie(r)]  # a tie is not a win of its first candidate
    nlls = [r["gold_nll"] for r in responses if r.get("gold_nll") is not None]
    per_rank = {}
    for rank, records in runs.items():
        working = [run for run in records if run["requests"]]
        requests_r, wall_r = sum(run["requests"] for run in working), sum(run["wall_seconds"] for run in working)
        per_rank[rank] = {
            "requests": requests_r,
            "wall_seconds": round(wall_r, 3),
            "requests_per_second": requests_r / wall_r if wall_r > 0 else None,
        }
    requests = sum(r["requests"] for r in per_rank.values())
    wall = max((r["wall_seconds"] for r in per_rank.values()), default=0.0)
    latest = [records[-1] for records in runs.values() if records]
    this_run = {
        "requests": sum(r["requests"] for r in latest),
        "wall_seconds": max((r["wall_seconds"] for r in latest), default=0.0),
        "resumed": any(r.get("resumed") for r in latest),
    }
    count = max((len(records) for records in runs.values()), default=0)
    placement = scorer_options.get("placement")
    about.setdefault("model", scorer_options.get("model"))
    about.setdefault("placement", placement if isinstance(placement, dict) else {"device": "n/a", "dtype": "n/a"})
    dataset = {"name": "questions", "subset": "all", **about.pop("dataset", {})}
    return {
        "accuracy": sum(r["correct"] for r in decided) / len(graded) if graded else None,
        "correct": sum(r["correct"] for r in decided),
        "graded": len(graded),
        "ties": ties,
        "warning": tie_warning(ties, len(graded)),
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
        **about,
        "scorer": scorer_options,
        "dataset": {**dataset, "questions": len(responses)},
    }


def is_tie(row: dict) -> bool:
    """Whether every candidate of a scored row got the same probability (the choice is then the first by order,
    not the model's): such a decision earns no credit in `accuracy` and is counted in `ties`."""
    probs = row.get("probs") or []
    return len(probs) > 1 and max(probs) == min(probs)


def tie_warning(ties: int, graded: int) -> str | None:
    """The summary's warning when most graded decisions tie (a uniform, broken or damaged model)."""
    if not graded or 2 * ties <= graded:
        return None
    return (
        f"{ties} of {graded} decisions tie (every candidate equally likely), so the model tells the answers apart "
        f"in few questions: check the model and adapter (a damaged or untrained model scores every candidate alike)"
    )


def render_report(summary: dict) -> str:
    """A short markdown report of the summary."""
    dataset = summary["dataset"]
    accuracy = "n/a" if summary["accuracy"] is None else f"{100 * summary['accuracy']:.2f}%"
    number = lambda key: "n/a" if summary.get(key) is None else f"{summary[key]:.5f}"  # noqa: E731
    rate = "n/a" if summary["requests_per_second"] is None else f"{summary['requests_per_second']:.2f}"
    options = ", ".join(f"{key}={json.dumps(value)}" for key, value in sorted(summary["scorer"].items()))
    skipped = f" ({summary['skipped']} skipped)" if summary.get("skipped") else ""
    warning = f"**Warning:** {summary['warning']}.\n\n" if summary.get("warning") else ""
    ties = f", {summary['ties']} tied" if summary.get("ties") else ""
    return (
        f"# QA: {dataset['name']} ({dataset['subset']})\n\n"
        + warning
        + f"| model | placement | accuracy | gold NLL mean / median / clipped mean | requests | wall s | requests/s |\n"
        f"|---|---|---|---|---|---|---|\n"
        f"| {summary['model']} | {summary['placement']['device']}/{summary['placement']['dtype']} | {accuracy} "
        f"({summary['correct']}/{summary['graded']}{ties}) | {number('mean_gold_nll')} / {number('median_gold_nll')} / "
        f"{number('clipped_mean_gold_nll')} | {summary['requests']}{skipped} | {summary['wall_seconds']} | {rate} |\n\n"
        f"Scorer: {options}\n\n"
        f"Requests/s counts the {summary['requests_timed']} requests scored over {summary['runs']} run(s) of this "
        f"folder{' (resumed)' if summary['resumed'] else ''}, by the wall time of the runs that scored any (model "
        f"load included). The clipped mean caps each gold NLL at {summary['gold_nll_clip']:.2f} (a gold "
        f"probability floor of 1e-15).\n"
        + (
            ""
            if not summary.get("ranks")
            else "\n| rank | requests | wall s | requests/s |\n|---|---|---|---|\n"
            + "".join(
                f"| {rank} | {r['requests']} | {r['wall_seconds']} | "
                f"{'n/a' if r['requests_per_second'] is None else format(r['requests_per_second'], '.2f')} |\n"
                for rank, r in summary["ranks"].items()
            )
        )
        + _calibration_lines(summary.get("calibration"))
    )


def _calibration_lines(calibration: dict | None) -> str:
    """Calibration of the chosen answers' probabilities (ECE, Brier), before and after a temperature."""
    if not calibration:
        return ""
    rows = "".join(
        f"| {when} | {m['ece']:.4f} | {m['brier']:.4f} |\n"
        for when, m in calibration.items()
        if isinstance(m, dict) and m.get("ece") is not None
    )
    return (
        (
            "\n| probabilities | ECE | Brier |\n|---|---|---|\n"
            + rows
            + "\nReliability diagram: reliability.png (see jetgym.questions.metrics).\n"
        )
        if rows
        else ""
    )
