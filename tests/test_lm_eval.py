"""The lm-eval model `jetgym` gives lm-eval's HF backend's numbers: per-request log-likelihoods within the fp32
bound, identical is_greedy, rolling windows, generations and task metrics; the offline MMLU tasks; the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

lm_eval = pytest.importorskip(
    "lm_eval", reason="lm-eval is not importable here: install the `lm-eval` extra (and numpy>=2 for pyarrow/datasets)"
)
torch = pytest.importorskip("torch")

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402

from jetgym.integrations.lm_eval import JetgymLM, request_groups  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WINDOW = 64  # the tiny model's max_position_embeddings: lm-eval's max_length for both backends


def bound(tokens: int) -> float:
    return 1e-4 + 1e-5 * tokens


@pytest.fixture(scope="module")
def tokenizer_folder():
    from jetgym.scorers.models import embedded_folder

    try:
        return embedded_folder("smollm2-135m-instruct")
    except Exception as error:  # noqa: BLE001
        pytest.skip(f"the embedded model's tokenizer is not available: {error}")


def save_tiny(folder: Path, tokenizer_folder: Path, zero_head: bool = False) -> Path:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_folder))
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=WINDOW,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    if zero_head:  # every logit equal: the argmax is token 0 everywhere (ties go to the first index)
        with torch.no_grad():
            model.lm_head.weight.zero_()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tokenizer_folder):
    return save_tiny(tmp_path_factory.mktemp("tiny"), tokenizer_folder)


@pytest.fixture(scope="module")
def backends(tiny):
    return HFLM(pretrained=str(tiny), batch_size=4, dtype="float32", device="cpu"), JetgymLM(model=str(tiny))


def instances(kind: str, args: list[tuple]) -> list[Instance]:
    return [Instance(kind, {}, a, i) for i, a in enumerate(args)]


def assert_same_loglikelihoods(reference, ours, token_counts):
    assert len(reference) == len(ours)
    for (ref_value, ref_greedy), (value, greedy), n in zip(reference, ours, token_counts):
        assert abs(ref_value - value) <= bound(n), (ref_value, value, n)
        assert ref_greedy == greedy


REQUESTS = [
    ("The capital of France is ", "Paris"),  # the trailing space moves to the continuation
    ("The capital of France is ", "Banana"),
    ("The capital of France is ", "Paris"),  # a duplicate request
    ("", "Hello world"),  # empty context: the prefix token conditions (acc_mutual_info's unconditional requests)
    ("", " yes"),
    ("Question: is it?\nAnswer:", " yes"),
    ("Question: is it?\nAnswer:", " no"),
    ("word " * 90, "the long tail of a context longer than the window"),  # truncated from the left
    ("a", " b"),
]


def test_loglikelihood_matches_the_hf_backend(backends):
    hf, jet = backends
    counts = [len(jet.tok_encode(c + x)) for c, x in REQUESTS]  # an upper bound of each continuation's tokens
    assert_same_loglikelihoods(
        hf.loglikelihood(instances("loglikelihood", REQUESTS)),
        jet.loglikelihood(instances("loglikelihood", REQUESTS)),
        counts,
    )


def test_requests_sharing_a_context_become_one_question():
    requests = [(None, [1, 2, 3], [4]), (None, [1, 2, 3], [5, 6]), (None, [1, 2, 3], [4]), (None, [7], [8])]
    questions, slots = request_groups(requests, max_length=100)
    assert [q.prefix for q in questions] == [(1, 2, 3), (7,)]
    assert questions[0].continuations == ((4,), (5, 6))
    assert slots == [(0, 0), (0, 1), (0, 0), (1, 0)]


def test_truncation_keeps_the_last_window_as_the_hf_backend():
    # 10 context + 3 continuation tokens into a window of 8: the last 9 are kept, the last one is not fed
    questions, _ = request_groups([(None, list(range(10)), [20, 21, 22])], max_length=8)
    assert questions[0].prefix == (4, 5, 6, 7, 8, 9) and questions[0].continuations == ((20, 21, 22),)


@pytest.mark.parametrize(
    "requests, message",
    [
        ([(None, [1], [])], "encodes to no tokens"),
        ([(None, [1], list(range(9)))], "exceeds max_length 8"),
    ],
)
def test_bad_token_requests_are_refused(requests, message):
    with pytest.raises(ValueError, match=message):
        request_groups(requests, max_length=8)


def test_is_greedy_on_hand_made_cases(backends):
    hf, jet = backends
    context = jet.tok_encode("Once upon a time")
    with torch.no_grad():
        out = hf.model.generate(
            torch.tensor([context]), max_new_tokens=5, do_sample=False, pad_token_id=jet.eot_token_id
        )
    chain = out[0, len(context) :].tolist()
    wrong_last = chain[:-1] + [(chain[-1] + 1) % len(jet.tokenizer)]
    wrong_first = [(chain[0] + 1) % len(jet.tokenizer)] + chain[1:]
    requests = [(("x", "y"), context, c) for c in (chain, chain[:1], wrong_last, wrong_first)]
    ours = jet._loglikelihood_tokens(requests)
    assert [greedy for _, greedy in ours] == [True, True, False, False]
    assert_same_loglikelihoods(hf._loglikelihood_tokens(requests), ours, [5, 1, 5, 5])


def test_is_greedy_ties_go_to_the_first_token(tmp_path, tokenizer_folder):
    folder = save_tiny(tmp_path / "flat", tokenizer_folder, zero_head=True)
    hf, jet = HFLM(pretrained=str(folder), batch_size=2, dtype="float32", device="cpu"), JetgymLM(model=str(folder))
    requests = [(("x", "y"), [5, 6], cont) for cont in ([0], [0, 0], [3], [0, 3])]
    ours = jet._loglikelihood_tokens(requests)
    assert [greedy for _, greedy in ours] == [True, True, False, False]
    assert_same_loglikelihoods(hf._loglikelihood_tokens(requests), ours, [1, 2, 1, 2])


def test_rolling_loglikelihood_matches_the_hf_backend(backends):
    hf, jet = backends
    documents = [("the quick brown fox jumps over the lazy dog " * 20,), ("short text",)]
    reference = hf.loglikelihood_rolling(instances("loglikelihood_rolling", documents))
    ours = jet.loglikelihood_rolling(instances("loglikelihood_rolling", documents))
    for ref, value, (text,) in zip(reference, ours, documents):
        assert abs(ref - value) <= bound(len(jet.tok_encode(text)))


def test_generate_until_matches_the_hf_backend(backends):
    hf, jet = backends
    requests = [
        ("Once upon a time", {"until": ["\n"], "max_gen_toks": 12, "do_sample": False}),
        ("The answer is", {"until": ["the"], "max_gen_toks": 8}),
    ]
    assert jet.generate_until(instances("generate_until", requests)) == hf.generate_until(
        instances("generate_until", requests)
    )


@pytest.mark.parametrize(
    "args, message",
    [
        ({"pretrained": "x"}, "names the model spec model="),
        ({"batch_sizes": 3}, "takes no argument 'batch_sizes'"),
        ({"placement": "gpu"}, "placement 'gpu' is unknown"),
        ({"device": "mps"}, "device 'mps' is not supported"),
        ({"scorer": "fastjev"}, "scorer='fastjev' cannot serve lm-eval; backends that can: jet"),
        ({"max_length": 0}, "max_length=0 in model_args: the window must be >= 1 token; leave max_length out"),
    ],
)
def test_bad_model_args_are_refused_by_name(args, message):
    with pytest.raises(ValueError, match=message):
        JetgymLM(**args)


def test_adapter_goes_to_the_scorer(tiny):
    with pytest.raises(ValueError, match="adapter folder 'some/folder' does not exist"):
        JetgymLM(model=str(tiny), adapter="some/folder")


def write_task(folder: Path) -> Path:
    """A 6-document 3-choice local task with acc, acc_norm and acc_mutual_info (unconditional requests)."""
    rows = [
        {"q": f"Item {k}: which colour is the sky?", "choices": ["blue", "green", "a red one"], "gold": k % 3}
        for k in range(6)
    ]
    data = folder / "tiny.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    metrics = [
        {"metric": m, "aggregation": "mean", "higher_is_better": True} for m in ("acc", "acc_norm", "acc_mutual_info")
    ]
    (folder / "tiny.yaml").write_text(
        json.dumps(
            {
                "task": "jetgym_tiny",
                "dataset_path": "json",
                "dataset_kwargs": {"data_files": {"test": str(data)}},
                "test_split": "test",
                "fewshot_split": "test",
                "output_type": "multiple_choice",
                "doc_to_text": "{{q}}\nAnswer:",
                "doc_to_choice": "{{choices}}",
                "doc_to_target": "gold",
                "metric_list": metrics,
            }
        )
    )
    return folder


def evaluate(model, folder: Path, tasks: list[str], **kwargs) -> dict:
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    return simple_evaluate(
        model=model, tasks=tasks, task_manager=TaskManager(include_path=str(folder)), log_samples=True, **kwargs
    )


def per_request(results: dict, task: str) -> list[tuple[float, bool]]:
    return [tuple(r) for s in sorted(results["samples"][task], key=lambda s: s["doc_id"]) for r in s["filtered_resps"]]


def continuation_tokens(results: dict, task: str, lm) -> list[int]:
    return [
        len(lm.tok_encode(a[0] + a[1]))
        for s in sorted(results["samples"][task], key=lambda s: s["doc_id"])
        for a in s["arguments"]
    ]


def test_simple_evaluate_gives_the_hf_backend_metrics(backends, tmp_path):
    hf, jet = backends
    folder = write_task(tmp_path)
    reference, ours = evaluate(hf, folder, ["jetgym_tiny"]), evaluate(jet, folder, ["jetgym_tiny"])
    assert len(per_request(ours, "jetgym_tiny")) == 6 * 3 * 2  # conditional + unconditional requests
    assert_same_loglikelihoods(
        per_request(reference, "jetgym_tiny"),
        per_request(ours, "jetgym_tiny"),
        continuation_tokens(ours, "jetgym_tiny", jet),
    )
    for metric in ("acc,none", "acc_norm,none", "acc_mutual_info,none"):
        assert ours["results"]["jetgym_tiny"][metric] == reference["results"]["jetgym_tiny"][metric]


def test_offline_mmlu_tasks_hold_jetgyms_285_questions(tmp_path):
    from jetgym.integrations.lm_eval_tasks import TASKS, task_folder
    from jetgym.questions.sets import load_mmlu

    try:
        folder = task_folder(tmp_path)
    except FileNotFoundError as error:
        pytest.skip(str(error))
    assert task_folder(tmp_path) == folder  # written once
    assert sorted(p.stem for p in folder.glob("*.yaml")) == sorted(TASKS)
    documents = [json.loads(line) for line in (folder / "jetgym_mmlu285.jsonl").read_text().splitlines()]
    assert [d["id"] for d in documents] == [q.id for q in load_mmlu("per_subject_5")]
    questions = load_mmlu("per_subject_5")
    assert [" " + d["choices"][d["answer"]].strip() for d in documents] == [
        q.candidates[q.labels.index(q.gold)] for q in questions
    ]
    config = json.loads((folder / "jetgym_mmlu285.yaml").read_text())
    assert config["dataset_kwargs"]["data_files"]["test"] == str(folder / "jetgym_mmlu285.jsonl")
    task_file = folder / "jetgym_mmlu285.jsonl"  # issue 48, item 2: a cut task file was trusted
    task_file.write_text("".join(task_file.read_text().splitlines(keepends=True)[:100]))
    assert task_folder(tmp_path) == folder and len(task_file.read_text().splitlines()) == 285


@pytest.mark.slow
@pytest.mark.parametrize("task", ["jetgym_mmlu285_cloze", "jetgym_mmlu285"])
def test_embedded_model_on_an_mmlu285_slice_matches_the_hf_backend(task):
    from jetgym.integrations.lm_eval_tasks import task_folder
    from jetgym.scorers.models import embedded_folder

    folder = embedded_folder("smollm2-135m-instruct")
    hf = HFLM(pretrained=str(folder), batch_size=8, dtype="float32", device="cpu")
    jet = JetgymLM()  # the embedded default
    reference = evaluate(hf, task_folder(), [task], limit=12)
    ours = evaluate(jet, task_folder(), [task], limit=12)
    assert_same_loglikelihoods(
        per_request(reference, task), per_request(ours, task), continuation_tokens(ours, task, jet)
    )
    for metric in ("acc,none", "acc_norm,none"):
        assert ours["results"][task][metric] == reference["results"][task][metric]


@pytest.mark.slow
def test_cli_runs_offline_with_cache_limit_fewshot_and_samples(tiny, tmp_path):
    command = [
        str(Path(sys.executable).with_name("jetgym-lm-eval")),
        "--model",
        "jetgym",
        "--model_args",
        f"model={tiny}",
        "--tasks",
        "jetgym_mmlu285_cloze",
        "--limit",
        "3",
        "--num_fewshot",
        "2",
        "--log_samples",
        "--output_path",
        str(tmp_path / "out"),
        "--use_cache",
        str(tmp_path / "cache"),
    ]
    runs = [subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
        assert "fatal:" not in run.stderr  # lm-eval asks git for the commit of a folder that is no repository
    assert "acc" in runs[0].stdout and runs[0].stdout.split("|acc")[1] == runs[1].stdout.split("|acc")[1]
    assert "Cached requests: 12, Requests remaining: 0" in runs[1].stderr
    assert list((tmp_path / "out").rglob("samples_jetgym_mmlu285_cloze_*.jsonl"))


def test_chat_template_renders_as_the_hf_backend(backends):
    hf, jet = backends
    question = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    prefill = question + [{"role": "assistant", "content": "Hello"}]
    assert jet.apply_chat_template(question, True) == hf.apply_chat_template(question, True)
    assert jet.apply_chat_template(prefill, False) == hf.apply_chat_template(prefill, False)


@pytest.mark.slow
def test_two_ranks_under_torchrun_give_the_one_process_metrics(tiny, tmp_path):
    folder = write_task(tmp_path)
    script = tmp_path / "evaluate.py"
    script.write_text(
        "import json, os, sys\n"
        "from lm_eval import simple_evaluate\nfrom lm_eval.tasks import TaskManager\n"
        "from jetgym.integrations.lm_eval import JetgymLM\n"
        f"lm = JetgymLM(model={str(tiny)!r})\n"
        f"r = simple_evaluate(model=lm, tasks=['jetgym_tiny'], task_manager=TaskManager(include_path={str(folder)!r}))\n"
        "if lm.rank == 0:\n"
        "    json.dump(r['results']['jetgym_tiny'], open(sys.argv[1], 'w'), default=str)\n"
    )
    environ = {**os.environ, "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    single = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "one.json")],
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert single.returncode == 0, single.stderr[-3000:]
    ranks = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(script),
            str(tmp_path / "two.json"),
        ],
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ranks.returncode == 0, ranks.stderr[-3000:]
    one, two = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("one", "two"))
    for metric in ("acc,none", "acc_norm,none", "acc_mutual_info,none"):
        assert two[metric] == one[metric]


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--model_args", "model=/nope/model", "--tasks", "jetgym_mmlu285_cloze"],
            "model folder '/nope/model' does not exist (resolved to /nope/model); check the path, or write a hub id as "
            "owner/name",
        ),
        (
            ["--model_args", "adapter=/nope/adapter", "--tasks", "jetgym_mmlu285_cloze"],
            "adapter folder '/nope/adapter' does not exist: pass the `adapter/` folder a jetgym-train run wrote "
            "(output_dir/adapter)",
        ),
        (
            ["--tasks", "no_such_task"],
            "Tasks not found: no_such_task; `jetgym-lm-eval ls tasks` lists the tasks it knows (jetgym's offline tasks "
            "included)",
        ),
    ],
    ids=["model", "adapter", "task"],
)
def test_cli_user_errors_are_one_line(tmp_path, args, message):
    command = [str(Path(sys.executable).with_name("jetgym-lm-eval")), "--model", "jetgym", *args, "--limit", "1"]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "0"},
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == f"jetgym-lm-eval: {message}"


def test_the_git_commit_is_recorded_without_gits_stderr(tmp_path, monkeypatch, capfd):
    import lm_eval.evaluator as evaluator

    from jetgym.scripts.lm_eval_cli import git_commit, quiet_git

    monkeypatch.chdir(tmp_path)  # not a git repository
    original = evaluator.get_git_commit_hash
    with quiet_git():
        assert evaluator.get_git_commit_hash is git_commit
        assert evaluator.get_git_commit_hash() is None
    assert evaluator.get_git_commit_hash is original
    assert capfd.readouterr().err == ""
    monkeypatch.chdir(ROOT)
    with quiet_git():
        assert evaluator.get_git_commit_hash() == original()
