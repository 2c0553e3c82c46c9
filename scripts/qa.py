"""`jetgym-qa`: score a question set, write responses.jsonl, summary.json and report.md.

Responses are appended per chunk (flushed and fsynced), so a killed run loses at most one chunk;
rerunning into the same folder resumes where it stopped. `wall_seconds` runs from the start of the
process (interpreter start-up, imports, model load included) for the console command, from the call
of `run_qa` otherwise; it ends when the summary is written.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
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

from jetgym.questions.sets import load_question_set  # noqa: E402
from jetgym.scripts.benchmarks_doc import write_section  # noqa: E402
from jetgym.scripts.config import CONFIG_PATH, QAConfig, build_scorer, to_config  # noqa: E402

RESPONSES = "responses.jsonl"
SUMMARY = "summary.json"
REPORT = "report.md"
RUN = "run.json"


def run_qa(cfg: Any, output_dir: str | os.PathLike | None = None, started: float | None = None) -> dict:
    """Score every question of `cfg.dataset` into `output_dir` (default `cfg.output_dir`); return the summary."""
    started = time.monotonic() if started is None else started
    config: QAConfig = to_config(cfg)
    if not (output_dir or config.output_dir):
        raise ValueError("run_qa needs an output folder: set output_dir")
    out = Path(output_dir or config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    check_same_run(out / RUN, run_settings(config))

    questions = load_question_set(config.dataset)
    ids = {q.id for q in questions}
    done = read_responses(out / RESPONSES)
    unknown = [i for i in done if i not in ids]
    if unknown:
        raise ValueError(
            f"{out / RESPONSES} holds {len(unknown)} responses for questions outside this question set "
            f"(e.g. {unknown[0]!r}); use a fresh output_dir"
        )
    pending = [q for q in questions if q.id not in done]

    scorer = build_scorer(config)
    chunks = [pending[start : start + config.chunk_size] for start in range(0, len(pending), config.chunk_size)]
    with open(out / RESPONSES, "a", encoding="utf-8") as sink, tqdm(
        total=len(questions), initial=len(questions) - len(pending), unit="q", desc="scoring"
    ) as bar:
        for chunk, decisions in zip(chunks, decide_chunks(scorer, chunks, config.pipeline)):
            rows = [response_row(q, d) for q, d in zip(chunk, decisions, strict=True)]
            sink.write("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
            sink.flush()
            os.fsync(sink.fileno())
            done.update((row["id"], row) for row in rows)
            bar.update(len(chunk))

    responses = [done[q.id] for q in questions]
    summary = summarize(responses, config, scorer.describe(), len(pending), time.monotonic() - started)
    (out / SUMMARY).write_text(json.dumps(summary, sort_keys=True, indent=2) + "\n", encoding="utf-8")
    (out / REPORT).write_text(render_report(summary), encoding="utf-8")
    if config.record:
        command = "jetgym-qa " + " ".join(sys.argv[1:])
        write_section(f"qa-{config.record}", f"{render_report(summary)}\nCommand: `{command}`\n".replace("# QA:", "## QA:", 1))
    accuracy = "n/a" if summary["accuracy"] is None else f"{summary['accuracy']:.4f}"
    print(f"accuracy {accuracy} ({summary['correct']}/{summary['graded']}); results in {out.resolve()}")
    return summary


def decide_chunks(scorer, chunks: list, pipeline: bool) -> Iterator[list]:
    """Decisions chunk by chunk. With `pipeline`, one persistent worker prepares (`Scorer.prepare`) the next
    chunk while the current one is scored (`Scorer.score`): at most one chunk ahead."""
    if not pipeline:
        for chunk in chunks:
            yield scorer.decide_many(chunk)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="prepare") as worker:
        ahead = worker.submit(scorer.prepare, chunks[0]) if chunks else None
        for index in range(len(chunks)):
            prepared = ahead.result()
            if index + 1 < len(chunks):
                ahead = worker.submit(scorer.prepare, chunks[index + 1])
            yield scorer.score(prepared)


def response_row(question, decision) -> dict:
    """The response object of one decision; its id must be the question's."""
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


def run_settings(config: QAConfig) -> dict:
    """What must not change between a run and its resumption (all but output_dir, chunk_size, pipeline, record, limit)."""
    settings = asdict(config)
    settings.pop("output_dir")
    settings.pop("chunk_size")
    settings.pop("pipeline")
    settings.pop("record")
    settings["dataset"].pop("limit")
    return settings


def check_same_run(path: Path, settings: dict) -> None:
    """Record the run's settings, or refuse to resume a folder written with other settings."""
    if path.exists():
        before = json.loads(path.read_text(encoding="utf-8"))
        if before != settings:
            changed = sorted(
                f"{group}.{key}"
                for group in settings.keys() | before.keys()
                for key in (settings.get(group) or {}).keys() | (before.get(group) or {}).keys()
                if (settings.get(group) or {}).get(key) != (before.get(group) or {}).get(key)
            )
            raise ValueError(f"{path.parent} holds a run with other settings ({', '.join(changed)}); use a fresh output_dir")
        return
    path.write_text(json.dumps(settings, sort_keys=True, indent=2) + "\n", encoding="utf-8")


def summarize(responses: list[dict], config: QAConfig, scorer_options: dict, new: int, wall: float) -> dict:
    """summary.json: accuracy and gold NLL over all responses; throughput over this process's requests."""
    graded = [r for r in responses if r.get("correct") is not None]
    nlls = [r["gold_nll"] for r in responses if r.get("gold_nll") is not None]
    return {
        "accuracy": sum(r["correct"] for r in graded) / len(graded) if graded else None,
        "correct": sum(r["correct"] for r in graded),
        "graded": len(graded),
        "mean_gold_nll": sum(nlls) / len(nlls) if nlls else None,
        "requests": len(responses),
        "requests_this_run": new,
        "resumed": new < len(responses),
        "wall_seconds": round(wall, 3),
        "requests_per_second": new / wall if wall > 0 else None,
        "model": config.model.spec,
        "placement": asdict(config.placement),
        "scorer": scorer_options,
        "dataset": {**asdict(config.dataset), "questions": len(responses)},
    }


def render_report(summary: dict) -> str:
    """A short markdown report of the summary."""
    dataset = summary["dataset"]
    accuracy = "n/a" if summary["accuracy"] is None else f"{100 * summary['accuracy']:.2f}%"
    nll = "n/a" if summary["mean_gold_nll"] is None else f"{summary['mean_gold_nll']:.5f}"
    rate = "n/a" if summary["requests_per_second"] is None else f"{summary['requests_per_second']:.2f}"
    options = ", ".join(f"{key}={json.dumps(value)}" for key, value in sorted(summary["scorer"].items()))
    return (
        f"# QA: {dataset['name']} ({dataset['subset']})\n\n"
        f"| model | placement | accuracy | mean gold NLL | requests | wall s | requests/s |\n"
        f"|---|---|---|---|---|---|---|\n"
        f"| {summary['model']} | {summary['placement']['device']}/{summary['placement']['dtype']} | {accuracy} "
        f"({summary['correct']}/{summary['graded']}) | {nll} | {summary['requests']} | {summary['wall_seconds']} | {rate} |\n\n"
        f"Scorer: {options}\n\n"
        f"Requests/s counts the {summary['requests_this_run']} requests scored by this process"
        f"{' (resumed run)' if summary['resumed'] else ''}; wall time is the complete process, model load included.\n"
    )


@hydra.main(config_path=CONFIG_PATH, config_name="qa", version_base=None)
def main(cfg: DictConfig) -> None:
    """Console entry: `jetgym-qa key=value ...`."""
    run_qa(cfg, output_dir=HydraConfig.get().runtime.output_dir, started=PROCESS_START)


if __name__ == "__main__":
    main()
