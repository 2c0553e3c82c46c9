"""Objects from a composed job config: the env and the agent of `jetgym-episode` (the scorer: `config.build_scorer`)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from jetgym.scripts.config import EpisodeConfig, build_scorer


def make_env(config: EpisodeConfig, render: bool = False):
    """The configured env (any registered id, with `env.kwargs`; Box actions split by `env.discretize`; an id
    that registers no time limit cut at `StepCap`'s 1,000 steps) with `CandidateActions` on top (texts:
    `env.action_texts`, else the env's own); `env.num_envs > 1`: a vector env of such envs (autoreset disabled:
    the rollout reseeds every episode). render: ask for `rgb_array` frames when the env offers them (single envs
    only, for the GIFs)."""
    from functools import partial

    import gymnasium as gym

    from jetgym.envs import import_env_modules  # importing jetgym.envs registers the jetgym ids
    from jetgym.envs.candidates import CandidateActions, UnsupportedActionSpace, make_vector_env
    from jetgym.envs.time_limit import StepCap, needs_cap

    import_env_modules(config.env.imports)

    kwargs = dict(config.env.kwargs)
    texts = None if config.env.action_texts is None else list(config.env.action_texts)
    bins = config.env.discretize
    wrappers = [] if bins is None else [partial(gym.wrappers.DiscretizeAction, bins=bins)]
    if needs_cap(config.env.id, kwargs):
        wrappers.append(StepCap)
    try:
        if config.env.num_envs > 1:
            return make_vector_env(
                config.env.id,
                config.env.num_envs,
                texts=texts,
                mode=config.env.vectorization,
                env_wrappers=wrappers,
                **kwargs,
            )
        if render and "render_mode" not in kwargs and "rgb_array" in _render_modes(config.env.id):
            kwargs["render_mode"] = "rgb_array"
        env = gym.make(config.env.id, **kwargs)
        for wrap in wrappers:
            env = wrap(env)
        return CandidateActions(env, texts=texts)
    except UnsupportedActionSpace as error:
        fix = (
            "set env.discretize=N to split each of its dimensions into N actions (e.g. env.discretize=5)"
            if isinstance(error.space, gym.spaces.Box) and bins is None
            else "use an env with Discrete or Text actions"
        )
        raise ValueError(
            f"env.id={config.env.id} has the action space {error.space}, which candidates cannot list: {fix}"
        ) from None
    except TypeError as error:
        if "unexpected keyword argument" not in str(error):
            raise
        raise ValueError(
            f"env.kwargs: {config.env.id} does not take {_unexpected_keyword(error)!r} (it takes "
            f"{', '.join(_env_parameters(config.env.id)) or 'no keyword'}); remove it or fix its "
            "name"
        ) from None


def _unexpected_keyword(error: TypeError) -> str:
    return str(error).split("unexpected keyword argument", 1)[1].split("'")[1]


def _env_parameters(env_id: str) -> list[str]:
    """The keyword parameters `gymnasium.make` passes on to the env's constructor, and its own."""
    import inspect

    names = [
        n
        for n, p in inspect.signature(_env_creator(env_id)).parameters.items()
        if n != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    return list(dict.fromkeys(names + ["max_episode_steps", "render_mode"]))


def _env_creator(env_id: str):
    import gymnasium as gym

    from jetgym.envs import split_env_id

    entry = gym.registry[split_env_id(env_id)[1]].entry_point
    return gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry


def _render_modes(env_id: str) -> list[str]:
    return list(getattr(_env_creator(env_id), "metadata", {}).get("render_modes", []))


def build_agent(config: EpisodeConfig, task: str | None = None, scorer: Any = None, env: Any = None):
    """(agent, scorer): the configured agent; `scorer` is built from the config when the agent needs one and
    none is given. task: the briefing (default: `env.task` of the config, else the env's own `task`); env: where
    the scorer agent's describer reads the observation space (and env-provided describers) from."""
    from jetgym.agents import make_agent

    if config.agent.name == "fixed":
        return make_agent("fixed", control=config.agent.control), None
    if config.agent.name == "scripted":
        return make_agent("scripted", env=env, aim=config.agent.aim or "turn"), None
    if config.agent.name != "scorer":
        return make_agent(config.agent.name), None
    if config.env.examples and env is not None:
        _check_examples_against(config.env.examples, env, config.env.id)
    scorer = build_scorer(config) if scorer is None else scorer
    options = {key: value for key, value in asdict(config.agent).items() if key not in ("name", "control", "aim")}
    task = config.env.task if task is None else task
    return make_agent("scorer", scorer=scorer, task=task, env=env, examples=config.env.examples, **options), scorer


def _check_examples_against(examples, env: Any, env_id: str) -> None:
    """The worked examples' controls against the env's full action set (`CandidateActions.candidates`; a vector
    env's first sub-env). Envs whose commands change every step (text games) have no full set: not checked."""
    from jetgym.agents.prompt import check_example_controls, check_examples

    full = getattr(env, "candidates", None)
    if full is None and hasattr(env, "get_attr"):
        try:
            full = env.get_attr("candidates")[0]
        except Exception:  # a vector env whose sub-envs cannot be asked: the agent's own checks remain
            full = None
    if full is not None:
        check_example_controls(check_examples(examples), full.texts, env_id)
