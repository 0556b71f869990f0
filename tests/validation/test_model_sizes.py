"""What the graph implies for its inputs' sizes: head sizes, position limits, implied sizes."""

from __future__ import annotations

from amp_convert.validation.model_sizes import model_sizes
from models import input_meaning as im
from models.decoders import decoder_model_merged
from models.fused import genai_llama


def test_packed_gqa_head_size_from_the_qkv_width_and_heads() -> None:
    sizes = model_sizes(im.genai_packed_decoder(head_dim=32, max_positions=48))
    assert sizes.head_sizes == {
        f"past_key_values.{i}.{kv}": 32 for i in range(2) for kv in ("key", "value")
    }
    assert sizes.position_limit == 48  # the rotary caches' rows


def test_unpacked_gqa_head_size_from_the_k_projection() -> None:
    sizes = model_sizes(genai_llama(hidden=64, heads=4, kv_heads=2))
    assert set(sizes.head_sizes.values()) == {16}


def test_a_position_table_inside_if_branches_limits_positions() -> None:
    assert model_sizes(decoder_model_merged(max_positions=40)).position_limit == 40


def test_a_recognizers_later_layers_and_constants_give_sizes() -> None:
    sizes = model_sizes(im.vad_state_model())
    assert sizes.position_limit is None and not sizes.head_sizes
    assert all(8 <= v <= 4096 for v in sizes.sizes)


def test_position_tables_as_exporters_name_them() -> None:
    """GPT-2's wpe, BERT's position_embeddings, optimum Whisper's merged embed_positions (seen
    by bench/exporter_patterns.py: 64 positions, 8 decode steps start from 56 tokens)."""
    from amp_convert.validation.model_sizes import _POSITION_TABLES

    for name in (
        "transformer.wpe.weight",
        "embeddings.position_embeddings.weight",
        "model.decoder.embed_positions.weight_merged_0",
        "pos_emb",
    ):
        assert _POSITION_TABLES.search(name), name
    for name in ("transformer.wte.weight", "model.embed_tokens.weight", "lm_head.weight"):
        assert not _POSITION_TABLES.search(name), name
