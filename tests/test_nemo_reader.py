"""NeMo 1 configs honour --vocab-size where the tokenizer does not give the vocabulary.
Fixture: tests/data/import/nemo/ (written for this test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.errors import SpecError
from planner.frameworks import load_any

CONFIG = (
    Path(__file__).resolve().parent
    / "data"
    / "import"
    / "nemo"
    / "nemo1_sentencepiece_unknown_vocab.yaml"
)


def test_an_unknown_tokenizer_names_vocab_size_among_the_fixes():
    with pytest.raises(
        SpecError, match="give --vocab-size V, --model or model.override_vocab_size"
    ):
        load_any(CONFIG)


@pytest.mark.parametrize("vocab", [48000, 32000])
def test_vocab_size_gives_a_nemo1_model_its_vocabulary(vocab):
    imported = load_any(CONFIG, vocab_size=vocab)
    assert imported.format == "nemo"
    m = imported.job.model
    assert m.vocab_size == vocab
    assert (m.num_layers, m.hidden_size) == (8, 1024)  # the file's shape, kept
    # trainer.devices 8 x num_nodes 2 = 16 GPUs; dp = 16 / tp 2 = 8
    assert imported.job.num_gpus == 16 and imported.layout.dp == 8


def test_vocab_size_wins_over_override_vocab_size(tmp_path):
    text = CONFIG.read_text().replace("  tokenizer:", "  override_vocab_size: 50000\n  tokenizer:")
    path = tmp_path / "nemo1.yaml"
    path.write_text(text)
    assert load_any(path).job.model.vocab_size == 50000
    assert load_any(path, vocab_size=48000).job.model.vocab_size == 48000
