"""Names vulture cannot see used: read by a framework, a protocol or by name (CI's dead-code check).

    vulture amp_convert tests bench scripts models scripts/vulture_whitelist.py \
        --min-confidence 60 --ignore-decorators "@rule,@pytest.fixture,@*.command"

A name belongs here only with the reason it is live; anything else vulture finds is dead code.
"""

# ruff: noqa: B018, F821
# mypy: ignore-errors

# module __getattr__/__dir__ (PEP 562): lazy attributes of amp_convert and amp_convert.validation
__getattr__
__dir__
# Olive calls a pass's _default_config and _run_for_config
_._default_config
_._run_for_config
# a lazy module's spec, read by importlib
_.__spec__
# click.Choice's hooks, called by click for the help's metavar and an invalid choice's message
_.get_metavar
_.get_invalid_choice_message
# warnings.showwarning's signature (category is passed by the warnings module)
_.showwarning
category
# ONNX Runtime SessionOptions and RunOptions, set for ORT to read
_.log_severity_level
_.graph_optimization_level
_.enable_profiling
_.profile_file_prefix
_.optimized_model_filepath
_.enable_cpu_mem_arena
# re2.Options, read by re2
_.log_errors
_.max_mem
# onnx.ModelProto fields set on models built in code
_.producer_name
_.producer_version
# torch.nn.Module.forward and onnxruntime's CalibrationDataReader.get_next, called by torch and ORT
_.forward
_.get_next
# fixtures asked for their effect (a patched provider list, a smaller chunk size)
no_cuda
cuda_fails_to_start
small_chunks
small_buffer
pytestmark
# dataclass fields read through dataclasses.asdict (reports, JSON, bench tables)
example
# step results' fields, printed by StepResult.summary at -v
qdq_nodes
nodes_checked
# pytest hooks, called by pytest by name (tests/conftest.py)
pytest_collection_modifyitems
