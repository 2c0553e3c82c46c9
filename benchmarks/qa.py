"""A `jetgym qa` run whose report becomes the section `qa-NAME` of docs/benchmarks.md.

python -m benchmarks.qa NAME output_dir=outputs/qa-NAME [key=value ...]
"""

from __future__ import annotations

import sys

from benchmarks.doc import write_section
from jetgym.runs import qa as runner
from jetgym.scripts.cli import process_start
from jetgym.scripts.config import compose
from jetgym.scripts.qa import qa_job

STARTED = process_start()


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or "=" in args[0]:
        raise SystemExit("usage: python -m benchmarks.qa NAME output_dir=FOLDER [key=value ...]")
    name, overrides = args[0], args[1:]
    summary = qa_job(compose("qa", overrides), started=STARTED)
    command = " ".join(["python -m benchmarks.qa", *args])
    report = runner.render_report(summary).replace("# QA:", "## QA:", 1)
    write_section(f"qa-{name}", f"{report}\nCommand: `{command}`\n")


if __name__ == "__main__":
    main()
