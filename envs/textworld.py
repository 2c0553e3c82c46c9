"""TextWorld games as Gymnasium envs with text commands (`pip install 'jetgym[textworld]'`).

`TextWorldEnv(game=PATH)` plays a compiled TextWorld game (`.z8` / `.ulx`, made offline by TextWorld's `tw-make`);
`game=None` makes (once, then reuses) a `tw-simple` game for `game_seed` in the user cache (`make_game`);
`games=N` plays N such games, `game_seed .. game_seed+N-1`, the one of the reset's `seed % N` (each made when first
played): train on one range of game seeds and evaluate on another, games never played in training. Registered as
`jetgym/TextWorld-v0` (100 steps; `max_episode_steps=` to change).

API: observation `spaces.Text` = the state in the game's words (`observation_text`): the objective, the room as
`look` shows it and the inventory, cleaned of TextWorld's banner and prompt line, printable ASCII. The game's answer
to the last command is `info["feedback"]`, not part of the observation: an answer alone ("You open the antique
trunk.") says neither where the player is nor what is left to do, and with it a command that changes nothing
(`examine`, `look`) would lead to a text never seen, where the state is the one the player was in. action
`spaces.Text` = one command string; `info["admissible_commands"]` = the commands admissible now (a different list
at every step), which `jetgym.envs.candidates.CandidateActions` turns into the candidate set. reward = the score
gained by the step; terminated when the game is won or lost (`info["is_success"]` = won, at every step, so an
episode cut by a time limit counts as not won whatever its points); `info["feedback"]`, `info["score"]`,
`info["max_score"]`, `info["objective"]`. A game is deterministic: the seed only picks the game (the env says so,
`deterministic`, so greedy play does not repeat a command where it has been before). `textworld` is imported when
an env is made.
"""

from __future__ import annotations

import os
import re
import shutil
import string
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
from gymnasium import spaces

CHARSET = string.printable
MAX_TEXT = 20_000
TASK = (
    "You play a text adventure game. Read what the game says and reach the goal it sets; "
    "answer with one of the listed commands."
)
_BANNER_LINE = re.compile(r"^[\s_|\\$/<>]*$")


def clean_text(feedback: str) -> str:
    """The game's text without TextWorld's ASCII-art banner, its `>` prompt/status line and non-printable chars."""
    lines = [line.rstrip() for line in feedback.replace("\r", "").split("\n")]
    kept = [line for line in lines if not line.lstrip().startswith(">") and not (line and _BANNER_LINE.match(line))]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()
    return "".join(c for c in text if c in CHARSET)[:MAX_TEXT] or "Nothing happens."


def observation_text(state) -> str:
    """What the player knows, in the game's words: the objective, the room (`look`) and the inventory."""
    return clean_text("\n\n".join(str(state[key] or "") for key in ("objective", "description", "inventory")))


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "jetgym" / "textworld"


def make_game(path: str | os.PathLike | None = None, game_seed: int = 1) -> Path:
    """A `tw-simple` game (dense rewards, detailed goal) for `game_seed`, made with TextWorld's `tw-make` unless
    `path` (default: the user cache) already holds it. Takes ~15 s the first time."""
    path = Path(path) if path is not None else cache_dir() / f"tw-simple-dense-detailed-{int(game_seed)}.z8"
    if path.exists():
        return path
    tool = shutil.which("tw-make") or str(Path(sys.executable).with_name("tw-make"))
    if not Path(tool).exists():
        raise RuntimeError("making a TextWorld game needs TextWorld's tw-make: pip install 'jetgym[textworld]'")
    path.parent.mkdir(parents=True, exist_ok=True)
    command = [
        tool,
        "tw-simple",
        "--rewards",
        "dense",
        "--goal",
        "detailed",
        "--seed",
        str(int(game_seed)),
        "--output",
        str(path),
        "-f",
        "--silent",
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 or not path.exists():
        raise RuntimeError(f"tw-make could not make {path}: {(done.stderr or done.stdout).strip()[-500:]}")
    return path


class TextWorldEnv(gym.Env):
    """TextWorld games; see the module notes. game: a compiled game file (None: `make_game(game_seed=...)`, or
    `games` of them by the reset's seed)."""

    metadata = {"render_modes": []}
    deterministic = True  # a game's next state follows from its state and the command

    def __init__(self, game: str | None = None, game_seed: int = 1, games: int = 1, render_mode: str | None = None):
        if render_mode is not None:
            raise ValueError(f"TextWorld envs render no frames: render_mode must be None, got {render_mode!r}")
        if isinstance(games, bool) or not isinstance(games, int) or games < 1:
            raise ValueError(f"env.kwargs.games must be a whole number >= 1, got {games!r}")
        if game is not None and games != 1:
            raise ValueError("env.kwargs.games plays tw-simple games made by seed: leave env.kwargs.game null")
        if game is not None and not Path(game).is_file():
            raise FileNotFoundError(
                f"env.kwargs.game: no TextWorld game at {game!r}; make one with "
                f"`tw-make tw-simple --rewards dense --goal detailed --seed 1 --output {game}`, "
                "or leave game null to make one in the user cache"
            )
        self.game_seed, self.games = int(game_seed), games
        self.game = str(game) if game is not None else str(make_game(game_seed=self.game_seed))
        self._turn = 0  # resets without a seed play the games in turn
        self.task = TASK
        self.render_mode = None
        self.observation_space = spaces.Text(MAX_TEXT, min_length=1, charset=CHARSET)
        self.action_space = spaces.Text(200, min_length=1, charset=CHARSET)
        self._env = None
        self._score = 0

    def _start(self):
        import textworld

        infos = textworld.EnvInfos(
            admissible_commands=True,
            objective=True,
            description=True,
            inventory=True,
            score=True,
            max_score=True,
            won=True,
            lost=True,
        )
        self._env = textworld.start(self.game, request_infos=infos)

    def _info(self, state) -> dict:
        return {
            "admissible_commands": list(state["admissible_commands"] or []),
            "score": int(state["score"] or 0),
            "max_score": int(state["max_score"] or 0),
            "objective": str(state["objective"] or ""),
            "is_success": bool(state["won"]),  # at every step: an episode the time limit cuts was not won
            "feedback": clean_text(state.feedback),
        }

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if self.games > 1:
            index = (seed if seed is not None else self._turn) % self.games
            self._turn = index + 1
            game = str(make_game(game_seed=self.game_seed + index))
            if game != self.game:
                self.close()
                self.game = game
        if self._env is None:
            self._start()
        state = self._env.reset()
        self._score = int(state["score"] or 0)
        return observation_text(state), self._info(state)

    def step(self, action):
        if self._env is None:
            raise RuntimeError("call reset() before step()")
        if not isinstance(action, str) or not action.strip():
            raise ValueError(f"a TextWorld action is a command string, got {action!r}")
        state, score, done = self._env.step(action)
        reward, self._score = float(int(score) - self._score), int(score)
        return observation_text(state), reward, bool(done), False, self._info(state)

    def close(self):
        if self._env is not None:
            self._env.close()
            self._env = None
