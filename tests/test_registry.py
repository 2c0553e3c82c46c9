import subprocess
import sys

import pytest

from jetgym.scorers import available_scorers, make_scorer
from jetgym.scorers.registry import Registry


def test_duplicate_name_is_an_error():
    registry = Registry("widget")
    registry.register("a")(object)
    with pytest.raises(ValueError, match="widget 'a' is already registered"):
        registry.register("a")(object)


def test_unknown_name_lists_known_and_suggests_closest():
    with pytest.raises(LookupError, match=r"unknown scorer 'jte'; known: .*jet.* Did you mean 'jet'\?"):
        make_scorer("jte")


def test_jet_is_registered():
    assert "jet" in available_scorers()


def test_importing_scorers_does_not_import_torch():
    code = "import sys, jetgym.scorers as scorers; scorers.Question(context='x', candidates=['a']); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_bad_options_fail_before_loading_a_model():
    with pytest.raises(ValueError, match="unknown schedule 'fast'; known: auto, independent, batched, packed"):
        make_scorer("jet", model="does-not-matter", schedule="fast")
    with pytest.raises(ValueError, match="unknown template 'chatml'"):
        make_scorer("jet", model="does-not-matter", template="chatml")
    with pytest.raises(ValueError, match="binary candidate texts must be distinct"):
        make_scorer("jet", model="does-not-matter", binary_texts=("Yes", "Yes"))
    with pytest.raises(ValueError, match="unknown placement.device 'tpu'"):
        make_scorer("jet", model="does-not-matter", placement="tpu")


def test_backends_declare_what_else_may_use_them():
    """Training and lm-eval read the registry: a backend lists its uses, and only jet's scores are differentiable."""
    from jetgym.scorers import available_scorers

    assert available_scorers("train") == ["jet"] and available_scorers("lm-eval") == ["jet"]
    assert set(available_scorers()) >= {"jet", "fastjev"}


def test_training_refuses_a_backend_that_cannot_train():
    from jetgym.scripts.config import compose, to_config

    with pytest.raises(ValueError, match=r"trains the jet scorer's model: set scorer=jet \(got scorer=fastjev\)"):
        to_config(compose("train", ["scorer=fastjev"]))
