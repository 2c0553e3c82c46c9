"""`LiberoFramesEnv`: recorded LIBERO frames replayed as a Gymnasium env.

Observation = {"agentview", "wrist"} upright uint8 images plus the instruction (Text); the action is a candidate
index of the frame's first question (the env does not grade; `info["questions"]` carries every question of the
frame as a candidate set).
"""

from __future__ import annotations

import string

import numpy as np

from .reader import LiberoEpisode


class LiberoFramesEnv:
    """Placeholder replaced below when gymnasium is importable (kept importable without it)."""


try:
    import gymnasium as gym
    from gymnasium import spaces
except ImportError:  # pragma: no cover - gymnasium is an optional extra
    gym = None

if gym is not None:

    class LiberoFramesEnv(gym.Env):  # type: ignore[no-redef]
        """Replay of recorded LIBERO frames, one frame per step, episode after episode.

        episodes: `LiberoEpisode`s (from `read_libero`); questions_for: episode, step -> list of questions
        (e.g. `jetgym.envs.libero.questions.frame_questions`; the env does not import the question sets). reset(seed) picks the starting episode by
        the seed (options={"episode": i} picks one); an episode ends after its last rendered frame.
        The action answers the frame's first question (an index into its candidates); reward 0: the env
        replays, it does not grade. `info`: "questions", "candidates" (the first question's texts),
        "episode", "step", "task", "is_success" (the task's goal predicates hold at this step, from the facts).
        """

        metadata = {"render_modes": ["rgb_array"]}
        MAX_CANDIDATES = 8

        def __init__(self, episodes: list[LiberoEpisode], questions_for, render_mode: str | None = None):
            if not episodes:
                raise ValueError("LiberoFramesEnv needs at least one episode")
            if render_mode not in (None, "rgb_array"):
                raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
            if not callable(questions_for):
                raise TypeError(
                    "LiberoFramesEnv needs questions_for(episode, step) -> list of questions, e.g. "
                    "jetgym.envs.libero.questions.frame_questions"
                )
            self.episodes = list(episodes)
            self.questions_for = questions_for
            self.render_mode = render_mode
            height, width = episodes[0].images[episodes[0].frames[0]][0].shape[:2]
            image = spaces.Box(0, 255, (height, width, 3), np.uint8)
            self.observation_space = spaces.Dict(
                {
                    "agentview": image,
                    "wrist": image,
                    "instruction": spaces.Text(max_length=512, charset=string.printable),
                }
            )
            self.action_space = spaces.Discrete(self.MAX_CANDIDATES)
            self._episode = 0
            self._cursor = 0

        def _observation(self) -> dict:
            episode = self.episodes[self._episode]
            agent, wrist = episode.views(episode.frames[self._cursor])
            text = "".join(c for c in episode.instruction if c in string.printable)[:512]
            return {"agentview": agent, "wrist": wrist, "instruction": text}

        def _info(self) -> dict:
            episode = self.episodes[self._episode]
            step = episode.frames[self._cursor]
            questions = self.questions_for(episode, step)
            success = bool(episode.facts.goal[step]) if episode.facts is not None else None
            return {
                "questions": questions,
                "candidates": list(questions[0].candidates) if questions else [],
                "episode": episode.name,
                "task": episode.task,
                "step": step,
                "is_success": success,
            }

        def reset(self, *, seed: int | None = None, options: dict | None = None):
            super().reset(seed=seed)
            if options and "episode" in options:
                index = int(options["episode"])
                if not 0 <= index < len(self.episodes):
                    raise ValueError(f"options['episode'] must be in [0, {len(self.episodes)}), got {index}")
                self._episode = index
            else:
                self._episode = int(self.np_random.integers(len(self.episodes)))
            self._cursor = 0
            return self._observation(), self._info()

        def step(self, action):
            if not self.action_space.contains(action):
                raise ValueError(f"action {action!r} is not in {self.action_space}")
            episode = self.episodes[self._episode]
            self._cursor = min(self._cursor + 1, len(episode.frames) - 1)
            terminated = self._cursor == len(episode.frames) - 1
            return self._observation(), 0.0, terminated, False, self._info()

        def render(self):
            if self.render_mode != "rgb_array":
                return None
            observation = self._observation()
            return np.concatenate([observation["agentview"], observation["wrist"]], axis=1)
