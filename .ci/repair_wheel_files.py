"""Repair installed WHEEL files whose header block a blank line splits (textworld 1.7.0 writes one before its
`Tag:` line). The parser that `pip check` uses (email headers) stops at that blank line, sees no tag, and reports
the package as "not supported on this platform" although it installed from a wheel built for it. The repair drops
blank lines between headers and leaves every header as it was. Run with the venv's interpreter after installing:
`.venv/bin/python .ci/repair_wheel_files.py` (the Makefile's setup does)."""

from __future__ import annotations

import re
import site
import sys
from pathlib import Path

HEADER = re.compile(r"^[A-Za-z][A-Za-z0-9-]*: ")


def repaired(text: str) -> str | None:
    """`text` (a WHEEL file) with blank lines between its headers dropped; None when no header follows a blank line."""
    lines = text.splitlines()
    blanks = [i for i, line in enumerate(lines) if not line.strip()]
    if not any(HEADER.match(line) for i, line in enumerate(lines) if blanks and i > blanks[0]):
        return None
    return "\n".join(line for line in lines if line.strip()) + "\n"


def repair(folders) -> list[Path]:
    """Rewrite the split WHEEL files of the dist-info folders under `folders`; returns those rewritten."""
    done = []
    for folder in folders:
        for wheel in sorted(Path(folder).glob("*.dist-info/WHEEL")):
            fixed = repaired(wheel.read_text(encoding="utf-8"))
            if fixed is not None:
                wheel.write_text(fixed, encoding="utf-8")
                done.append(wheel)
    return done


if __name__ == "__main__":
    for path in repair(site.getsitepackages()):
        print(f"repaired {path} (a blank line hid its Tag header from pip check)")
    sys.exit(0)
