"""dtype=auto: native bf16 detection, resolution per device, and bf16 choices against the fp32 reference."""

from __future__ import annotations

import pytest

from jetgym.scorers.placement import Placement, cpu_has_native_bf16

AMX = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
AVX2_ONLY = "processor\t: 0\nflags\t\t: fpu sse avx2 fma\n"


def test_native_bf16_is_read_from_the_cpu_flags():
    assert cpu_has_native_bf16(AMX)
    assert cpu_has_native_bf16("flags : avx512f avx512_bf16\n")
    assert not cpu_has_native_bf16(AVX2_ONLY)
    assert not cpu_has_native_bf16("")


@pytest.mark.parametrize("native,expected", [(True, "bfloat16"), (False, "float32")])
def test_auto_on_the_cpu_follows_the_hardware(monkeypatch, native, expected):
    monkeypatch.setattr("jetgym.scorers.placement.cpu_has_native_bf16", lambda: native)
    assert Placement(device="cpu", dtype="auto").resolved_dtype() == expected
    assert Placement(device="cpu", dtype="float32").resolved_dtype() == "float32"  # an explicit dtype is kept


def test_auto_is_a_placement_dtype_on_the_command_line():
    from jetgym.scripts.config import compose, to_config

    assert to_config(compose("qa", ["placement.dtype=auto"])).placement.dtype == "auto"


# Questions whose fp32 margin between the best and the second candidate is large (> 2 nats).
CLEAR = [
    ("The capital of France is", [" Paris", " Banana", " Tuesday"]),
    ("Two plus two equals", [" four", " purple", " seventeen thousand"]),
    ("The opposite of hot is", [" cold", " spoon", " democracy"]),
    ("Water freezes at zero degrees", [" Celsius", " Fahrenheit users", " of happiness"]),
]


@pytest.mark.slow
def test_bf16_keeps_fp32_choices_where_the_margin_is_large():
    """bf16 rounds every matmul to 8 mantissa bits, so log-likelihoods move; the documented tolerance for a
    candidate's summed log-prob is 0.05 * |fp32 value| + 0.25 nats. Where fp32's margin exceeds that, the choice holds."""
    from jetgym.scorers import Question, make_scorer

    fp32 = make_scorer("jet", template="none")
    bf16 = make_scorer("jet", template="none", placement={"device": "cpu", "dtype": "bfloat16"})
    questions = [Question(context=c, candidates=k) for c, k in CLEAR]
    for reference, fast in zip(fp32.decide_many(questions), bf16.decide_many(questions)):
        ranked = sorted(reference.logprobs, reverse=True)
        assert ranked[0] - ranked[1] > 2
        assert fast.choice == reference.choice
        for a, b in zip(reference.logprobs, fast.logprobs):
            assert abs(a - b) <= 0.05 * abs(a) + 0.25, (a, b)
    assert bf16.describe()["dtype_used"] == "bfloat16"


def test_bench_dtype_methods_parse_their_trials():
    from benchmarks.dtype import BenchDtypeConfig, MethodSpec

    assert MethodSpec.parse("bfloat16+compile+threads:1+batch:4096+reuse") == MethodSpec(
        "bfloat16", True, 1, 4096, True
    )
    assert MethodSpec.parse("int8") == MethodSpec("int8")
    BenchDtypeConfig(methods=["float32", "bfloat16+batch:2048"])


@pytest.mark.parametrize(
    "methods,message",
    [
        (["float32", "fp16"], "methods: 'fp16' must start with one of float32, bfloat16, int8"),
        (
            ["float32", "bfloat16+threads:0"],
            "unknown trial 'threads:0' in 'bfloat16+threads:0'; use compile, reuse, threads:N or batch:N",
        ),
        (["float32", "bfloat16+fast"], "unknown trial 'fast'"),
        (["bfloat16"], "methods must include float32 (the reference)"),
        (["float32", "float32"], "methods lists a method twice"),
    ],
)
def test_bench_dtype_refuses_bad_methods(methods, message):
    from benchmarks.dtype import BenchDtypeConfig

    with pytest.raises(ValueError) as error:
        BenchDtypeConfig(methods=methods)
    assert message in str(error.value)


def test_bench_dtype_question_sets_name_their_missing_inputs(tmp_path):
    from benchmarks.dtype import BenchDtypeConfig, recorded_questions

    with pytest.raises(ValueError, match="questions must be one of mmlu, libero, doom, got 'atari'"):
        BenchDtypeConfig(questions="atari")
    with pytest.raises(ValueError, match="questions=doom needs steps=PATH"):
        BenchDtypeConfig(questions="doom")
    assert BenchDtypeConfig(questions="libero").template == "chat" and BenchDtypeConfig().template == "none"
    with pytest.raises(FileNotFoundError, match="steps='nowhere.jsonl': no such file"):
        recorded_questions("nowhere.jsonl")
    unrecorded = tmp_path / "steps.jsonl"
    unrecorded.write_text('{"episode": 0, "step": 0, "question": null}\n')
    with pytest.raises(ValueError, match="records no question"):
        recorded_questions(str(unrecorded))


def test_bench_dtype_reads_the_questions_a_run_recorded(tmp_path):
    pytest.importorskip("vizdoom")
    import json

    from jetgym.envs.vizdoom.env import CONTROLS
    from benchmarks.dtype import recorded_questions

    chat = [{"role": "system", "content": "Shoot."}, {"role": "user", "content": "Seen on screen: nothing."}]
    rows = [
        {"episode": 0, "step": 0, "question": chat},
        {"episode": 0, "step": 1, "question": "one message"},
        {"episode": 1, "step": 0, "question": "again"},
    ]
    steps = tmp_path / "steps.jsonl"
    steps.write_text("".join(json.dumps(row) + "\n" for row in rows))
    questions = recorded_questions(str(steps), limit=2)
    assert [q.id for q in questions] == ["e0/s0", "e0/s1"]
    assert questions[0].context == tuple(chat) and questions[1].context == "one message"
    assert questions[0].candidates == tuple(c.text for c in CONTROLS)
