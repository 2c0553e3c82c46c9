"""The label audit of a LIBERO file: restore every recorded state in a fresh simulator and compare with the
labels the file stores (`jetgym-render-libero --audit`)."""

from __future__ import annotations

from pathlib import Path

from .reader import LiberoLabelError

from .sim import label_episodes


def audit(path, demos: int | None = None, progress=None) -> dict:
    """Restore every recorded state of a file (or folder) in a fresh simulator and compare with the stored
    `labels`: the four facts at every step and every question type's label at every rendered frame."""
    from collections import Counter
    from dataclasses import replace

    from .reader import read_libero

    from .questions import QUESTION_TYPES, frame_labels, question_id

    stored = read_libero(path)
    if demos is not None:
        seen = Counter()
        stored = [e for e in stored if (seen.update([e.source]) or seen[e.source] <= demos)]
    unlabelled = [f"{e.source}:{e.name}" for e in stored if e.facts is None]
    if unlabelled:
        raise LiberoLabelError(f"nothing to audit: {', '.join(unlabelled[:3])} store no 'labels' group")
    fresh = label_episodes([replace(episode, facts=None) for episode in stored])
    if progress:
        progress(f"restored every state of {len(stored)} episode(s)")
    by_type = {q: {"agree": 0, "frames": 0} for q in QUESTION_TYPES}
    facts = {name: {"agree": 0, "steps": 0} for name in ("grasp", "hold", "step_holds", "goal")}
    disagreements = []
    for old, new in zip(stored, fresh):
        for name, same in old.facts.equal(new.facts).items():
            facts[name]["agree"] += int(same.sum())
            facts[name]["steps"] += len(same)
        for t in old.frames:
            a, b = frame_labels(old, t), frame_labels(new, t)
            for qtype in QUESTION_TYPES:
                by_type[qtype]["frames"] += 1
                if a[qtype] == b[qtype]:
                    by_type[qtype]["agree"] += 1
                elif len(disagreements) < 20:
                    disagreements.append(
                        {
                            "id": question_id(Path(old.source).stem, old, t, qtype),
                            "stored": a[qtype],
                            "simulator": b[qtype],
                        }
                    )
    agree = all(v["agree"] == v["frames"] for v in by_type.values()) and all(
        v["agree"] == v["steps"] for v in facts.values()
    )
    return {"agree": agree, "episodes": len(stored), "by_type": by_type, "facts": facts, "disagreements": disagreements}
