"""Offline question sets (MMLU, JSONL): lists of scorer questions with gold answers, for `jetgym-qa`. LIBERO's
frames live with their env (`jetgym.envs.libero.questions`), registered here by name."""

from .sets import SUBSETS, available_question_sets, load_question_set

__all__ = ["SUBSETS", "available_question_sets", "load_question_set"]
