"""`describe`: a short text about the visible screenshot, computed from its pixels only.

Method (documented, deliberately simple; OpenCV on the 160x100 RGB screen):
1. Background model: for every row, the median colour of that row. Walls, floor and sky are roughly
   uniform along a row in the bundled scenarios, so things standing in the room differ from it.
2. Foreground: pixels whose largest channel difference from their row's median exceeds `threshold`
   (default 48); the player's own weapon (the fixed box at the bottom centre, lower half of the
   screen) is masked out.
3. The foreground is dilated by a 3x3 square to join a sprite's fragments; connected components of
   the dilated mask holding at least `min_area` (6) foreground pixels are the *blobs* (area and centre
   from their foreground pixels). Flat streaks are dropped: a blob must be at least 3 pixels tall and
   at least half as tall as it is wide (this removes the sky's jagged edge; sprites stand upright).
4. With a `horizon` (the ViZDoom screen sentence and expert: `HORIZON`), a blob lying wholly above that fraction
   of the height whose colour, brightness aside, differs from its rows' by less than `MIN_CHROMA` on average (a
   channel's deviation from the pixel's grey level, compared with the background's, averaged over the blob) is a
   pattern of the ceiling or the top of a wall, not a thing, and is dropped: in the bundled `basic` scenario this
   drops about three quarters of the blobs that are no object and keeps about nine in ten of those that are the
   monster (the objects that ViZDoom's labels place there, counted over random play of the four scenarios;
   every object of the other three is kept).
5. Each blob is reported by horizontal place (far left, left, ahead, right, far right: fifths of the
   width), size (small < 0.5% of the screen, medium < 3%, large otherwise), and `in the crosshair`
   when its box covers the centre column, else, for a blob ahead, which side of the crosshair its centre is
   on. At most `max_blobs`, largest first.

It cannot tell a monster from a medkit, a barrel or a wall decoration; it sees only what is on screen.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PLACES = ("far left", "left", "ahead", "right", "far right")
WEAPON_BOX = (0.40, 0.60, 0.50)  # x from, x to (fractions of the width), y from (fraction of the height)
HORIZON = 0.45  # fraction of the height: a first-person view's ceiling and high walls lie above it
MIN_CHROMA = 25  # colour difference (brightness aside) from the rows' background that a thing up there shows


@dataclass(frozen=True)
class Blob:
    """A connected region that stands out from its rows' background colour."""

    x: float  # centre, fraction of the width (0 left, 1 right)
    y: float  # centre, fraction of the height
    area: float  # fraction of the screen
    in_crosshair: bool

    @property
    def place(self) -> str:
        return PLACES[min(int(self.x * len(PLACES)), len(PLACES) - 1)]

    @property
    def size(self) -> str:
        return "small" if self.area < 0.005 else "medium" if self.area < 0.03 else "large"


def find_blobs(
    screen: np.ndarray, threshold: int = 48, min_area: int = 6, max_blobs: int = 3, horizon: float | None = None
) -> list[Blob]:
    """The largest blobs of a (H, W, 3) uint8 RGB screen, largest first; with `horizon`, without the pale patterns
    wholly above it (module notes, step 4)."""
    import cv2

    if screen.ndim != 3 or screen.shape[2] != 3:
        raise ValueError(f"describe needs an (H, W, 3) RGB screen, got shape {screen.shape}")
    height, width = screen.shape[:2]
    pixels = screen.astype(np.int16)
    background = np.median(pixels, axis=1, keepdims=True)
    mask = (np.abs(pixels - background).max(axis=2) > threshold).astype(np.uint8)
    x0, x1, y0 = WEAPON_BOX
    mask[int(y0 * height) :, int(x0 * width) : int(np.ceil(x1 * width))] = 0
    count, components = cv2.connectedComponents(cv2.dilate(mask, np.ones((3, 3), np.uint8)), connectivity=8)
    components = np.where(mask > 0, components, 0)
    blobs = []
    centre = width // 2
    for i in range(1, count):
        ys, xs = np.nonzero(components == i)
        tall, wide = ys.max() - ys.min() + 1, xs.max() - xs.min() + 1
        if len(xs) < min_area or tall < 3 or 2 * tall < wide:
            continue
        if (
            horizon is not None
            and ys.max() + 1 <= horizon * height
            and _chroma(pixels[ys, xs], background[ys, 0]) < MIN_CHROMA
        ):
            continue
        blobs.append(
            Blob(
                x=round(float(xs.mean() + 0.5) / width, 4),
                y=round(float(ys.mean() + 0.5) / height, 4),
                area=round(len(xs) / (width * height), 5),
                in_crosshair=bool(xs.min() - 1 <= centre <= xs.max() + 1),
            )
        )
    blobs.sort(key=lambda b: (-b.area, b.x))
    return blobs[:max_blobs]


def _chroma(pixels: np.ndarray, background: np.ndarray) -> float:
    """The mean over (N, 3) pixels of their largest channel difference from their background's, each taken from
    its own grey level (so a brighter or darker grey is no difference)."""
    colour = pixels - pixels.mean(axis=1, keepdims=True)
    return float(np.abs(colour - (background - background.mean(axis=1, keepdims=True))).max(axis=1).mean())


def _aside(blob: Blob) -> str:
    if blob.in_crosshair:
        return ", in the crosshair"
    if blob.place == "ahead":
        return f", {'left' if blob.x < 0.5 else 'right'} of the crosshair"
    return ""


def describe(screen: np.ndarray, **options) -> str:
    """One sentence about the blobs on screen, e.g. `Seen on screen: a small thing ahead, in the crosshair.`"""
    blobs = find_blobs(screen, **options)
    if not blobs:
        return "Seen on screen: nothing stands out."
    parts = [f"a {b.size} thing {'ahead' if b.place == 'ahead' else 'on the ' + b.place}" + _aside(b) for b in blobs]
    return "Seen on screen: " + "; ".join(parts) + "."
