"""Annotated episode videos: each frame is the screen (upscaled 2x) with the chosen control and the top
probabilities drawn in a panel below it. Written as GIF with Pillow (no ffmpeg needed). `offscreen(env)`: the
frames of an `rgb_array` env rendered without a display or sound device (SDL's dummy drivers)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from jetgym.runs.folder import atomic_file

PANEL = 40
TOP = 3
OFFSCREEN = {"SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy"}


@contextlib.contextmanager
def offscreen(env: Any) -> Iterator[None]:
    """While the block runs, an `rgb_array` env that draws with SDL (pygame: Taxi, FrozenLake, ...) gets SDL's
    dummy video and audio drivers, so it opens no display and prints no `XDG_RUNTIME_DIR is invalid or not set`
    or ALSA line on stderr. A driver the user chose is kept; the variables are removed again afterwards."""
    if getattr(env, "render_mode", None) != "rgb_array":
        yield
        return
    added = [name for name in OFFSCREEN if name not in os.environ]
    os.environ.update({name: OFFSCREEN[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def annotate(screen: np.ndarray, lines: Sequence[str], scale: int = 2) -> np.ndarray:
    """The screen enlarged `scale` times with up to three text lines in a black panel underneath."""
    import cv2

    big = cv2.resize(screen, (screen.shape[1] * scale, screen.shape[0] * scale), interpolation=cv2.INTER_NEAREST)
    panel = np.zeros((PANEL, big.shape[1], 3), np.uint8)
    for row, line in enumerate(lines[:3]):
        cv2.putText(panel, line, (4, 12 + 12 * row), cv2.FONT_HERSHEY_SIMPLEX, 0.36, (255, 255, 255), 1, cv2.LINE_AA)
    return np.concatenate([big, panel], axis=0)


def step_lines(
    step: int, text: str, reward: float, total: float, texts: Sequence[str], probs: Sequence[float] | None
) -> list[str]:
    """Panel text of one decision: step, chosen control, reward so far, and the top probabilities."""
    lines = [f"step {step}: {text}", f"reward {reward:+g}  return {total:+g}"]
    if probs is not None:
        top = sorted(range(len(probs)), key=lambda i: -probs[i])[:TOP]
        lines.append("  ".join(f"{texts[i]} {probs[i]:.2f}" for i in top))
    return lines


def end_lines(episode: dict) -> list[str]:
    """Panel text of the last frame: how the episode ended and its return."""
    return [f"end after {episode['length']} steps: {episode['end']}", f"return {episode['return']:+g}"]


def write_gif(frames: Sequence[np.ndarray], path: str | Path, fps: float) -> Path:
    from PIL import Image

    if not frames:
        raise ValueError("no frames to write")
    path = Path(path)
    images = [Image.fromarray(frame) for frame in frames]
    with atomic_file(path) as partial:  # a killed run leaves no truncated GIF beside its logs
        images[0].save(
            partial,
            format="GIF",
            save_all=True,
            append_images=images[1:],
            duration=max(20, round(1000 / fps)),
            loop=0,
            optimize=False,
        )
    return path
