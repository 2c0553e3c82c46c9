"""MMLU-285 decision quality for each `normalization`, with template none and chat (embedded model).

    python -m benchmarks.normalization [--docs] [--limit N] [--out DIR] [--templates none,chat] [--dtype float32]

Per template, two scorer passes over the questions: `contextual` (content-free premise
"Question: N/A\\nAnswer:", the MMLU prompt with the question removed) and `pmi` (default premise "Answer:").
Each pass returns the raw JET log-likelihoods beside its corrected scores; `none`, `token` and `byte` apply
the same decision rule (`make_decision`) to the contextual pass's raw log-likelihoods (token counts from the
tokenizer, as the scorer counts them); a check pass with `normalization=token` on the first 32 questions
confirms they equal the scorer's own. Accuracy, mean gold NLL, ECE (10 bins) and Brier with percentile
bootstrap 95% intervals over questions (2,000 resamples, seed 0); accuracy differences to `none` are paired.
Writes <out>/bench_normalization.{json,md} and, with --docs, the docs/benchmarks.md section.
"""

from __future__ import annotations

import argparse
import platform
import time

from jetgym.questions import metrics as M
from jetgym.questions.bootstrap import bootstrap
from jetgym.scorers.priors import NORMALIZATIONS

PREMISES = {"contextual": "Question: N/A\nAnswer:", "pmi": "Answer:"}
RESAMPLES = 2000


def interval(statistic, n: int, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of `statistic(indices)` over the n questions (`jetgym.questions.bootstrap`)."""
    found = bootstrap(range(n), statistic, samples=RESAMPLES, seed=seed)
    return found.low, found.high


def summarize(decisions, reference=None) -> dict:
    rows = [d.to_dict() for d in decisions]
    scores, gold = M.graded(rows)
    m = M.metrics(scores, gold)
    correct = [r["correct"] for r in rows]
    n = len(rows)
    out = {k: m[k] for k in ("accuracy", "mean_gold_nll", "ece", "brier", "questions")}
    out["accuracy_ci"] = interval(lambda idx: sum(correct[i] for i in idx) / n, n)
    out["mean_gold_nll_ci"] = interval(lambda idx: sum(rows[i]["gold_nll"] for i in idx) / n, n, 1)

    def ece(idx):
        probs = [M.softmax(scores[i]) for i in idx]
        return M.expected_calibration_error([max(p) for p in probs], [correct[i] for i in idx])

    out["ece_ci"] = interval(ece, n, 2)
    if reference is not None:
        ref = [d.correct for d in reference]
        out["accuracy_minus_none"] = (sum(correct) - sum(ref)) / n
        out["accuracy_minus_none_ci"] = interval(lambda idx: sum(correct[i] - ref[i] for i in idx) / n, n, 3)
    return out


def run(limit: int | None, check: int = 32, templates=("none", "chat"), dtype: str = "float32") -> dict:
    from jetgym.questions.sets import load_mmlu
    from jetgym.scorers import make_scorer
    from jetgym.scorers.decision import make_decision

    questions = load_mmlu(subset="per_subject_5", limit=limit)
    results = {"questions": len(questions), "premises": PREMISES, "dtype": dtype, "templates": {}}
    placement = {"device": "cpu", "dtype": dtype}
    for template in templates:
        passes, seconds = {}, {}
        for normalization in ("contextual", "pmi"):
            scorer = make_scorer(
                "jet",
                template=template,
                normalization=normalization,
                neutral_premise=PREMISES[normalization],
                placement=placement,
            )
            started = time.perf_counter()
            passes[normalization] = []
            for start in range(0, len(questions), 16):
                passes[normalization] += scorer.decide_many(questions[start : start + 16])
            seconds[normalization] = time.perf_counter() - started
        tokenizer = scorer.loaded.tokenizer
        derived = {}
        for normalization in ("none", "token", "byte"):
            derived[normalization] = [
                make_decision(
                    q,
                    d.candidates,
                    d.logprobs,
                    d.usage,
                    normalization=normalization,
                    token_counts=[len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in d.candidates],
                )
                for q, d in zip(questions, passes["contextual"])
            ]
        raw_gap = max(
            abs(a - b) for x, y in zip(passes["contextual"], passes["pmi"]) for a, b in zip(x.logprobs, y.logprobs)
        )
        token_scorer = make_scorer("jet", template=template, normalization="token", placement=placement)
        own = token_scorer.decide_many(questions[:check])
        token_gap = max(abs(a - b) for x, y in zip(own, derived["token"]) for a, b in zip(x.corrected, y.corrected))
        decisions = {**derived, **passes}
        results["templates"][template] = {
            "seconds": seconds,
            "raw_logprob_max_gap_between_passes": raw_gap,
            f"token_check_max_gap_first_{check}": token_gap,
            "normalizations": {
                n: summarize(decisions[n], None if n == "none" else decisions["none"]) for n in NORMALIZATIONS
            },
        }
        print(
            template,
            {n: round(v["accuracy"], 4) for n, v in results["templates"][template]["normalizations"].items()},
            flush=True,
        )
    return results


def render(results: dict, command: str) -> str:
    def ci(pair, scale=1.0, fmt="{:.1f}"):
        return f"[{fmt.format(pair[0] * scale)}, {fmt.format(pair[1] * scale)}]"

    lines = [
        "## Decision quality: candidate-prior corrections on MMLU-285 (issue 17)",
        "",
        f"Embedded SmolLM2-135M-Instruct, {results['dtype']}, CPU ({platform.processor() or platform.machine()}), scorer `jet`, "
        f"{results['questions']} questions (5 per subject). Premises: contextual "
        f"`{results['premises']['contextual']!r}`, pmi `{results['premises']['pmi']!r}`. "
        "Intervals: percentile bootstrap 95% over questions (2,000 resamples); the accuracy difference to "
        "`none` is paired. ECE: top-label, 10 equal-width bins; no temperature (T = 1). The JET paper's "
        "Qwen3-0.6B (4.4x larger) reaches 38.25%; chance is 25%.",
        "",
    ]
    for template, block in results["templates"].items():
        lines += [
            f"### template {template}",
            "",
            "| normalization | accuracy % [95% CI] | minus none, pp [95% CI] | mean gold NLL [95% CI] | ECE [95% CI] | Brier |",
            "|---|---|---|---|---|---|",
        ]
        for name, m in block["normalizations"].items():
            diff = (
                "—"
                if name == "none"
                else (f"{100 * m['accuracy_minus_none']:+.1f} {ci(m['accuracy_minus_none_ci'], 100, '{:+.1f}')}")
            )
            lines.append(
                f"| {name} | {100 * m['accuracy']:.1f} {ci(m['accuracy_ci'], 100)} | {diff} | "
                f"{m['mean_gold_nll']:.3f} {ci(m['mean_gold_nll_ci'], 1, '{:.3f}')} | "
                f"{m['ece']:.3f} {ci(m['ece_ci'], 1, '{:.3f}')} | {m['brier']:.3f} |"
            )
        check = next(k for k in block if k.startswith("token_check"))
        lines += [
            "",
            f"Scoring time (one process, shared 2-core CPU; not a timing benchmark): contextual pass "
            f"{block['seconds']['contextual']:.0f} s, pmi pass {block['seconds']['pmi']:.0f} s. Raw "
            f"log-likelihoods of the two passes differ by at most {block['raw_logprob_max_gap_between_passes']:.1e}; "
            f"the scorer's own `token` scores on the first questions match the derived ones within "
            f"{block[check]:.1e}.",
            "",
        ]
    lines += [f"Command: `{command}`"]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--out", default="outputs/bench_normalization")
    parser.add_argument("--docs", action="store_true")
    parser.add_argument("--templates", default="none,chat")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args(argv)
    from benchmarks.doc import write_results

    templates = tuple(args.templates.split(","))
    results = run(args.limit, templates=templates, dtype=args.dtype)
    command = (
        "python -m benchmarks.normalization"
        + (" --docs" if args.docs else "")
        + (f" --limit {args.limit}" if args.limit else "")
        + f" --templates {args.templates} --dtype {args.dtype}"
    )
    name = "bench_normalization" if templates == ("none", "chat") else f"bench_normalization_{'_'.join(templates)}"
    path = write_results(args.out, name, results, render(results, command), docs=args.docs)
    print(path.read_text())


if __name__ == "__main__":
    main()
