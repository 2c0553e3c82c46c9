"""ViZDoom scenarios as Gymnasium envs with nine explicit controls and only visible observations.

Observation: {"screen": (100, 160, 3) uint8 RGB (rendered at 320x200, downscaled 2x with area
interpolation), "status": {name: int32 scalar}} where the status holds the numbers the player's status
bar shows for this scenario (health, ammo of the selected weapon, kills). Nothing else leaves the
engine: no labels/depth/automap buffers, no object or sector info, no enemy positions.

Scenarios: `scenario=<name>` is any `.cfg` bundled with the installed vizdoom (`bundled_scenarios()`, e.g.
`defend_the_line`); `config=/path/my.cfg` is a user's own (its `.wad` named by `doom_scenario_path`, beside it).
The four in `SCENARIOS` carry a written briefing and status; any other cfg shows the variables its
`available_game_variables` lists (`HEALTH` -> health, `KILLCOUNT` -> kills, `SELECTED_WEAPON_AMMO` -> ammo,
others by their lower-case name, e.g. ammo2; a cfg listing none shows health) and the briefing given (`briefing=`, else `NEUTRAL_BRIEFING`).
A cfg the engine cannot load is refused with the engine's message and the path.

Actions: `Discrete(9)` over `CONTROLS`, an explicit table of (label, candidate text, buttons). The
engine's available buttons are overridden to `BUTTONS` for every scenario, and the action vector is
built by button *name* against the engine's reported button order (never by position).

The engine runs as a child process. If it dies mid-episode, `step` returns the last observation with
`truncated=True` and `info["truncated_reason"]`; the engine is restarted on the next `reset`.
`close` ends the engine and reaps its process. A watchdog (`EngineWatchdog`, a tiny shell process) kills
the engine when this process ends however it ends (SIGTERM, SIGKILL, a crash), since the engine ignores
SIGTERM and would otherwise live on, re-parented to PID 1. `vizdoom` is imported only when an env is built.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from jetgym.scorers.registry import check_choice

SCREEN_SHAPE = (100, 160, 3)  # rendered RES_320X200, downscaled 2x (there is no 160x100 resolution)
BUTTONS: tuple[str, ...] = (
    "MOVE_FORWARD",
    "MOVE_BACKWARD",
    "TURN_LEFT",
    "TURN_RIGHT",
    "MOVE_LEFT",
    "MOVE_RIGHT",
    "ATTACK",
    "USE",
)
STATUS_VARIABLES = {"health": "HEALTH", "ammo": "SELECTED_WEAPON_AMMO", "kills": "KILLCOUNT"}  # else NAME.upper()
# bundled cfgs whose first episode never starts in a single-player engine (checked with vizdoom 1.3.2: it hangs)
UNPLAYABLE = {
    "cig": "a multiplayer map (the engine waits for other players)",
    "multi_duel": "a multiplayer map (the engine waits for other players)",
    "freedoom1": "a Doom 1 game (maps E1M1...) while the engine starts map01",
}
EMPTY_STATUS = ("health",)  # shown when a cfg lists no variables (Gymnasium refuses an empty Dict space)
NEUTRAL_BRIEFING = (
    "You play a ViZDoom scenario, seen from the player's eyes. Use the controls to score as many points as you can."
)
STATUS_RANGE = (-(2**20), 2**20)
TICS_PER_SECOND = 35


@dataclass(frozen=True)
class Control:
    """One admissible control: `label` (id), `text` (the candidate text scored), `buttons` pressed."""

    label: str
    text: str
    buttons: tuple[str, ...]


CONTROLS: tuple[Control, ...] = (
    Control("noop", "do nothing", ()),
    Control("move_forward", "move forward", ("MOVE_FORWARD",)),
    Control("move_backward", "move backward", ("MOVE_BACKWARD",)),
    Control("turn_left", "turn left", ("TURN_LEFT",)),
    Control("turn_right", "turn right", ("TURN_RIGHT",)),
    Control("strafe_left", "strafe left", ("MOVE_LEFT",)),
    Control("strafe_right", "strafe right", ("MOVE_RIGHT",)),
    Control("attack", "attack", ("ATTACK",)),
    Control("use", "press use", ("USE",)),
)


@dataclass(frozen=True)
class Scenario:
    """A ViZDoom scenario: its cfg file (a bundled name or an absolute path), the status numbers shown, and the
    player's briefing."""

    config: str
    status: tuple[str, ...]
    briefing: str


SCENARIOS: dict[str, Scenario] = {
    "defend_the_center": Scenario(
        "defend_the_center.cfg",
        ("health", "ammo", "kills"),
        "You stand in the middle of a round arena. Monsters come at you from all sides. Shoot as many as you can "
        "before they reach you; ammunition is limited.",
    ),
    "deadly_corridor": Scenario(
        "deadly_corridor.cfg",
        ("health", "ammo", "kills"),
        "You are at the start of a corridor guarded by soldiers on both sides. Reach the armour at the far end "
        "alive; shooting the guards helps.",
    ),
    "basic": Scenario(
        "basic.cfg",
        ("ammo", "kills"),
        "You face the far wall of a square room. One monster stands somewhere along it. Kill it as fast as "
        "you can; every shot that misses costs points.",
    ),
    "health_gathering": Scenario(
        "health_gathering.cfg",
        ("health",),
        "The floor is acid and drains your health. Survive by walking over the medkits lying around.",
    ),
}


def engine_variable(name: str) -> str:
    """The engine's GameVariable name of a status entry (`kills` -> KILLCOUNT, `ammo2` -> AMMO2)."""
    return STATUS_VARIABLES.get(name, name.upper())


def status_name(variable: str) -> str:
    """The status entry of an engine GameVariable name (KILLCOUNT -> kills, AMMO2 -> ammo2)."""
    return next((name for name, engine in STATUS_VARIABLES.items() if engine == variable), variable.lower())


def scenarios_dir() -> str:
    """The installed vizdoom's scenario folder, found without importing vizdoom."""
    import importlib.util

    spec = importlib.util.find_spec("vizdoom")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("ViZDoom scenarios need vizdoom: pip install 'jetgym[vizdoom]'")
    return os.path.join(list(spec.submodule_search_locations)[0], "scenarios")


def bundled_scenarios() -> list[str]:
    """The names of every `.cfg` the installed vizdoom ships (`defend_the_line`, `my_way_home`, ...)."""
    return sorted(name[:-4] for name in os.listdir(scenarios_dir()) if name.endswith(".cfg"))


def _captured(call):
    """(call(), what the engine printed on stdout/stderr meanwhile): its config warnings go to the C streams."""
    import sys

    with tempfile.TemporaryFile() as sink:
        sys.stdout.flush(), sys.stderr.flush()
        saved = [os.dup(1), os.dup(2)]
        os.dup2(sink.fileno(), 1), os.dup2(sink.fileno(), 2)
        try:
            result = call()
        finally:
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
        sink.seek(0)
        return result, sink.read().decode(errors="replace").strip()


def load_config(game, path: str) -> None:
    """`game.load_config(path)`, refusing a cfg the engine cannot load (or whose .wad is missing) with the engine's
    message and the path."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"env.kwargs.config: no ViZDoom config at {path}")
    try:
        loaded, said = _captured(lambda: game.load_config(path))
    except Exception as error:  # vizdoom's own exceptions (FileDoesNotExistException, ...)
        raise ValueError(f"ViZDoom cannot load the config {path}: {error}") from None
    if not loaded:
        raise ValueError(f"ViZDoom cannot load the config {path}: {said or 'the engine refused it'}")
    wad = game.get_doom_scenario_path()
    if wad and not os.path.isfile(wad):
        raise ValueError(
            f"the ViZDoom config {path} names doom_scenario_path {wad}, which does not exist: put the "
            ".wad beside the cfg (a relative doom_scenario_path is read from the cfg's folder)"
        )
    iwad = game.get_doom_game_path()
    shipped = os.path.join(os.path.dirname(scenarios_dir()), os.path.basename(iwad))  # the engine looks there too
    if iwad and not os.path.isfile(iwad) and not os.path.isfile(shipped):
        raise ValueError(
            f"the ViZDoom config {path} names doom_game_path {iwad}, which does not exist: that game's "
            "IWAD is not shipped with vizdoom; put it there or drop doom_game_path (freedoom2 is the default)"
        )


def config_status(path: str) -> tuple[str, ...]:
    """The status entries of a cfg: its `available_game_variables`, as `status_name`s (loads the cfg, no engine)."""
    import vizdoom as vzd

    game = vzd.DoomGame()
    load_config(game, path)
    listed = tuple(status_name(str(v).split(".")[-1]) for v in game.get_available_game_variables())
    return listed or EMPTY_STATUS


def resolve_scenario(scenario: str | None, config: str | None, briefing: str | None) -> tuple[str, Scenario]:
    """(name, Scenario) of `scenario` (a bundled name; default defend_the_center) or of a user's `config` path."""
    if scenario is not None and config is not None:
        raise ValueError(
            f"give env.kwargs.scenario ({scenario!r}) or env.kwargs.config ({config!r}), not both: a "
            "named Doom id carries its scenario, so play your own cfg with env=doom (jetgym/Doom-v0)"
        )
    if briefing is not None and (not isinstance(briefing, str) or not briefing.strip()):
        raise ValueError(f"env.kwargs.briefing must be a non-empty text or null, got {briefing!r}")
    if config is not None:
        path = os.path.abspath(os.path.expanduser(str(config)))
        return os.path.splitext(os.path.basename(path))[0], Scenario(
            path, config_status(path), briefing or NEUTRAL_BRIEFING
        )
    name = "defend_the_center" if scenario is None else scenario
    if name in SCENARIOS:
        known = SCENARIOS[name]
        return name, Scenario(known.config, known.status, briefing or known.briefing)
    check_choice("ViZDoom scenario (env.kwargs.scenario)", name, bundled_scenarios())
    if name in UNPLAYABLE:
        raise ValueError(
            f"the bundled ViZDoom scenario {name!r} cannot be played here: {UNPLAYABLE[name]}; pick "
            "another env.kwargs.scenario"
        )
    path = os.path.join(scenarios_dir(), f"{name}.cfg")
    return name, Scenario(path, config_status(path), briefing or NEUTRAL_BRIEFING)


class EngineCrash(RuntimeError):
    """The ViZDoom engine process died or stopped answering."""


def engine_processes(parent: int | None = None) -> set[int]:
    """Process ids of the live (not zombie) `vizdoom` children of `parent` (default: this process; Linux /proc,
    empty elsewhere)."""
    me, found = str(os.getpid() if parent is None else parent), set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as file:
                stat = file.read()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        if name == "vizdoom" and rest[1] == me and rest[0] not in "ZX":
            found.add(int(entry))
    return found


class EngineWatchdog:
    """Kills engine `pid` (SIGKILL) when this process ends without `release()`-ing it first.

    A `/bin/sh` child blocks reading a pipe whose only write end this process holds (close-on-exec, so
    the engine and other children never inherit it). The kernel closes that end however this process
    ends, even on SIGKILL; the watchdog then reads end-of-file and kills the engine. `release()` (a clean
    `close`) writes "ok" first, so the watchdog exits without touching a process id that may be reused.
    The watchdog ignores SIGINT/SIGTERM/SIGHUP sent to the whole process group, so it outlives its parent."""

    SCRIPT = 'trap "" INT TERM HUP; read line; [ "$line" = ok ] || kill -9 "$1" 2>/dev/null; exit 0'

    def __init__(self, pid: int):
        read_end, self._write_end = os.pipe()  # both close-on-exec
        try:
            self.process = subprocess.Popen(
                ["/bin/sh", "-c", self.SCRIPT, "jetgym-engine-watchdog", str(pid)],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                start_new_session=True,  # a terminal's Ctrl-C / a group kill does not reach it
            )
        finally:
            os.close(read_end)

    def release(self) -> None:
        """The engine was stopped cleanly: let the watchdog exit without a kill, and reap it."""
        if self._write_end is None:
            return
        try:
            os.write(self._write_end, b"ok\n")
        except OSError:
            pass
        os.close(self._write_end)
        self._write_end = None
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class DoomEnv(gym.Env):
    """A ViZDoom scenario with the nine `CONTROLS`.

    scenario: a bundled scenario's name (`bundled_scenarios()`; default defend_the_center); config: the path of a
    user's own cfg instead; briefing: the text the agent is told (None: the scenario's own, else
    `NEUTRAL_BRIEFING`); frame_skip: tics each action is held (the rewards are summed); episode_timeout: episode
    length in tics (None: the scenario's own); render_mode: `rgb_array` or None.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": TICS_PER_SECOND}

    def __init__(
        self,
        scenario: str | None = None,
        frame_skip: int = 4,
        episode_timeout: int | None = None,
        render_mode: str | None = None,
        config: str | None = None,
        briefing: str | None = None,
    ):
        if int(frame_skip) < 1:
            raise ValueError(f"frame_skip must be >= 1, got {frame_skip}")
        if episode_timeout is not None and int(episode_timeout) < 1:
            raise ValueError(f"episode_timeout must be >= 1 tic or None, got {episode_timeout}")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"unknown render_mode {render_mode!r}; known: {', '.join(self.metadata['render_modes'])}")
        self.scenario_name, self.scenario = resolve_scenario(scenario, config, briefing)
        self.frame_skip = int(frame_skip)
        self.episode_timeout = None if episode_timeout is None else int(episode_timeout)
        self.render_mode = render_mode
        self.metadata = {**self.metadata, "render_fps": TICS_PER_SECOND / self.frame_skip}
        self.controls = CONTROLS
        self.task = self.scenario.briefing  # the text an agent is told before it plays
        self.action_space = spaces.Discrete(len(CONTROLS))
        self.observation_space = spaces.Dict(
            {
                "screen": spaces.Box(0, 255, SCREEN_SHAPE, np.uint8),
                "status": spaces.Dict({name: spaces.Box(*STATUS_RANGE, (), np.int32) for name in self.scenario.status}),
            }
        )
        self.engine_restarts = 0
        self.engine_pid: int | None = None
        self._watchdog: EngineWatchdog | None = None
        self._game = None
        self._vzd = None
        self._action_vectors: list[list[float]] = []
        self._last_obs: dict | None = None
        self._pending_restart = False

    # --- engine lifecycle -------------------------------------------------------------------------------
    def _start(self) -> None:
        import vizdoom as vzd

        self._vzd = vzd
        game = vzd.DoomGame()
        load_config(game, os.path.join(vzd.scenarios_path, self.scenario.config))  # an absolute path stays
        game.set_window_visible(False)
        # the engine writes its settings file into the working directory unless told otherwise
        game.set_doom_config_path(os.path.join(tempfile.gettempdir(), f"jetgym-vizdoom-{os.getuid()}.ini"))
        game.set_mode(vzd.Mode.PLAYER)
        game.set_screen_resolution(vzd.ScreenResolution.RES_320X200)
        game.set_screen_format(vzd.ScreenFormat.RGB24)
        for hidden in (
            "depth_buffer",
            "labels_buffer",
            "automap_buffer",
            "objects_info",
            "sectors_info",
            "audio_buffer",
        ):
            getattr(game, f"set_{hidden}_enabled")(False)
        game.set_available_buttons([getattr(vzd.Button, name) for name in BUTTONS])
        game.set_available_game_variables([getattr(vzd.GameVariable, engine_variable(n)) for n in self.scenario.status])
        if self.episode_timeout is not None:
            game.set_episode_timeout(self.episode_timeout)
        before = engine_processes()
        game.init()
        started = engine_processes() - before
        self.engine_pid = min(started) if started else None
        self._game = game
        if self.engine_pid is not None:
            self._watchdog = EngineWatchdog(self.engine_pid)
        self._action_vectors = self.action_vectors([str(b).split(".")[-1] for b in game.get_available_buttons()])

    def _stop(self) -> None:
        game, pid, watchdog = self._game, self.engine_pid, self._watchdog
        self._game, self.engine_pid, self._watchdog = None, None, None
        if game is not None:
            try:
                game.close()
            except Exception:  # a crashed engine may refuse a clean close
                pass
        if pid is not None:  # a still running engine is killed; a dead one is reaped if `close` did not
            try:
                if os.waitpid(pid, os.WNOHANG) == (0, 0):
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
            except (ChildProcessError, ProcessLookupError):
                pass
        if watchdog is not None:
            watchdog.release()

    def _restart(self) -> None:
        self._stop()
        self.engine_restarts += 1
        self._start()

    def _crashes(self) -> tuple[type[BaseException], ...]:
        vzd = self._vzd
        return (
            vzd.ViZDoomErrorException,
            vzd.ViZDoomIsNotRunningException,
            vzd.ViZDoomUnexpectedExitException,
            EngineCrash,
        )

    @staticmethod
    def action_vectors(engine_buttons: list[str]) -> list[list[float]]:
        """The button vector of every control, in the engine's button order (matched by name)."""
        if sorted(engine_buttons) != sorted(BUTTONS):
            raise RuntimeError(f"the engine reports buttons {engine_buttons}, expected {list(BUTTONS)}")
        return [[1.0 if button in control.buttons else 0.0 for button in engine_buttons] for control in CONTROLS]

    # --- Gymnasium API ----------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if self._game is None:
            self._start()
        elif self._pending_restart:
            self._restart()
        self._pending_restart = False
        engine_seed = int(self.np_random.integers(2**31 - 1))
        for attempt in range(2):  # the engine can crash between episodes (after game over): restart once
            try:
                self._game.set_seed(engine_seed)
                self._game.new_episode()
                break
            except self._crashes():
                if attempt:
                    raise
                self._restart()
        obs = self._observe()
        return obs, {"engine_restarts": self.engine_restarts, "status": _copy(obs)["status"]}

    def step(self, action):
        if self._game is None or self._last_obs is None:
            raise RuntimeError("call reset() before step()")
        if not self.action_space.contains(action):
            raise ValueError(f"invalid action {action!r}; the action space is {self.action_space}")
        if self._pending_restart:
            raise RuntimeError("the episode was truncated by an engine crash; call reset()")
        try:
            reward = float(self._game.make_action(self._action_vectors[int(action)], self.frame_skip))
            finished = self._game.is_episode_finished()
            obs = self._observe()
            timeout = finished and self._game.is_episode_timeout_reached()
            dead = finished and self._game.is_player_dead()
        except self._crashes() as exc:
            self._pending_restart = True
            info = {
                "engine_restarts": self.engine_restarts,
                "truncated_reason": f"engine crash: {exc}",
                "status": _copy(self._last_obs)["status"],
            }
            return _copy(self._last_obs), 0.0, False, True, info
        info: dict[str, Any] = {"engine_restarts": self.engine_restarts, "status": _copy(obs)["status"]}
        if timeout:
            info["truncated_reason"] = "episode timeout"
        elif finished:
            info["terminated_reason"] = "player died" if dead else "scenario ended"
        return obs, reward, finished and not timeout, timeout, info

    def render(self):
        if self.render_mode == "rgb_array" and self._last_obs is not None:
            return self._last_obs["screen"].copy()
        return None

    def close(self):
        self._stop()
        self._last_obs = None

    def __del__(self):
        try:
            self._stop()
        except Exception:
            pass

    # --- observation ------------------------------------------------------------------------------------
    def _observe(self) -> dict:
        """Screen and status of the current state; after the episode ends, the last screen and final status.
        Returns a copy: no two observations handed out share arrays (an episode that ends on its first step
        would otherwise return reset's screen object again)."""
        import cv2

        game, vzd = self._game, self._vzd
        state = game.get_state()
        if state is not None:
            screen = cv2.resize(state.screen_buffer, SCREEN_SHAPE[1::-1], interpolation=cv2.INTER_AREA)
            values = list(state.game_variables)
        else:
            screen = self._last_obs["screen"] if self._last_obs is not None else np.zeros(SCREEN_SHAPE, np.uint8)
            values = [
                game.get_game_variable(getattr(vzd.GameVariable, engine_variable(n))) for n in self.scenario.status
            ]
        status = {
            name: np.array(np.clip(round(v), *STATUS_RANGE), dtype=np.int32)
            for name, v in zip(self.scenario.status, values)
        }
        self._last_obs = {"screen": np.ascontiguousarray(screen, dtype=np.uint8), "status": status}
        return _copy(self._last_obs)


def _copy(obs: dict) -> dict:
    """A fresh copy of an observation (screen array and status scalars)."""
    return {"screen": obs["screen"].copy(), "status": {name: value.copy() for name, value in obs["status"].items()}}
