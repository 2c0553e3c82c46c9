"""A `jetgym calibrate` run published into the checkout: the calibration file shipped with jetgym and its plot in
docs/calibration/.

    python -m benchmarks.calibration output_dir=outputs/calibrate [key=value ...]
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from benchmarks.doc import docs_dir
from jetgym.scorers.fastjev.pruning import SHIPPED_CALIBRATIONS, slug
from jetgym.scripts.calibrate import run_calibrate
from jetgym.scripts.config import compose


def main(argv: list[str] | None = None) -> None:
    config = compose("calibrate", list(sys.argv[1:] if argv is None else argv))
    if not config.output_dir:
        raise SystemExit("usage: python -m benchmarks.calibration output_dir=FOLDER [key=value ...]")
    run_calibrate(config)
    out, name = Path(config.output_dir), slug(config.model.spec)
    (docs_dir() / "calibration").mkdir(exist_ok=True)
    shutil.copyfile(out / f"{name}_J.png", docs_dir() / "calibration" / f"{name}_J.png")
    SHIPPED_CALIBRATIONS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out / f"{name}.json", SHIPPED_CALIBRATIONS / f"{name}.json")


if __name__ == "__main__":
    main()
