"""Offline question sets (MMLU, JSONL): lists of scorer questions with gold answers, for `jetgym-qa`."""

from .sets import SUBSETS, available_question_sets, load_question_set

__all__ = ["SUBSETS", "available_question_sets", "load_question_set"]

from . import libero as _libero  # noqa: E402,F401  (registers the "libero" question set)
