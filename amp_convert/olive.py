"""amp-convert as an Olive pass (``AmpConvert``), for workflows that ONNX Runtime's docs point to.

Olive's own FP16 passes wrap ORT's ``float16.py`` (weights clamped to 1e4, block lists by op and
node name); none is driven by accuracy. This pass runs amp-convert's conversion, or ``--auto`` when
the workflow gives a ``data_config`` and ``auto`` is set (its batches become the calibration
samples). Olive finds it through the package config shipped next to this module
(``olive_package_config.json``, ``olive run --package-config``); the accelerator's execution
provider picks the target (CUDA -> ``ort-cuda``, CPU -> ``ort-cpu``; others are refused with one
line until a target exists for them). The model is written through Olive's own external-data
helper, and the report as ``amp_report.json`` in the model's folder (Olive carries it along).
The conversion parameters are generated from ConvertOptions' declarations (`conversion_params`):
every conversion flag is a pass parameter of the same name, and a new option is one here too.

Imported by Olive only: ``import amp_convert`` never loads Olive.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from olive.data.config import DataConfig
from olive.hardware.accelerator import AcceleratorSpec
from olive.model import ONNXModelHandler
from olive.model.utils import resolve_onnx_path
from olive.passes import Pass
from olive.passes.onnx.common import get_external_data_config
from olive.passes.pass_config import BasePassConfig, PassConfigParam
from olive.resource_path import LocalFolder
from olive.search.search_parameter import Categorical

from amp_convert.api import convert_ir
from amp_convert.core.user_text import printable, text_problem
from amp_convert.errors import AmpConvertError, OptionError
from amp_convert.files import io
from amp_convert.files import outputs as output_rules
from amp_convert.files.output_set import OutputSet
from amp_convert.options.convert import ConvertOptions
from amp_convert.options.declare import cli_fields, default_of
from amp_convert.reports.base import Report
from amp_convert.targets import providers
from amp_convert.validation.options import AUTO_MIN_COSINE

#: Olive execution provider -> amp-convert target (the targets registry's providers)
EP_TARGETS = providers()
#: the conversion options the pass mirrors: ConvertOptions' command-line fields, but the target
#: (which defaults to the accelerator's)
OPTION_KEYS = tuple(f.name for f in cli_fields(ConvertOptions) if f.name != "target")
#: an Olive parameter's type for each kind of declared option
_OLIVE_TYPES: dict[str, Any] = {"choice": str, "switch": bool, "flag": bool, "path": str}
REPORT_NAME = "amp_report.json"


class OliveOptionError(OptionError, ValueError):
    """A bad pass option, raised as ValueError too: Olive lets ValueError through as a user error
    (anything else it logs and swallows, ending the workflow with no output and no message)."""


class OliveConversionError(AmpConvertError, ValueError):
    """Any other amp-convert error (bad input model, unwritable output), let through likewise."""


class OliveThresholdsNotMet(OliveConversionError):
    """``auto``: the thresholds cannot be met; nothing written (``force_write`` writes the closest
    model), as ``amp-convert --auto`` exits 1 and writes nothing."""


def target_for(accelerator: AcceleratorSpec | None, configured: str | None) -> str:
    """The configured target, else the one the accelerator's execution provider implies."""
    if configured:
        return configured
    provider = getattr(accelerator, "execution_provider", None) or "CPUExecutionProvider"
    target = EP_TARGETS.get(str(provider))
    if target is None:
        known = ", ".join(f"{ep} -> {t}" for ep, t in EP_TARGETS.items())
        raise OptionError(f"AmpConvert: no amp-convert target for {provider} (known: {known})")
    return target


def conversion_params() -> dict[str, PassConfigParam]:
    """One pass parameter per conversion option, from its declaration: a choice keeps its
    default (and ``olive["search"]`` makes it searchable); any other defaults to None, which
    leaves amp-convert's own default in force."""
    params = {}
    for f in cli_fields(ConvertOptions):
        meta, olive = f.metadata, f.metadata.get("olive", {})
        default = default_of(f) if meta["kind"] == "choice" else None
        default = default.value if isinstance(default, enum.Enum) else default
        search = olive.get("search")
        params[f.name] = PassConfigParam(
            type_=_OLIVE_TYPES.get(meta["kind"], list[str]),
            default_value=olive.get("default", default),
            search_defaults=Categorical(list(search)) if search else None,
            description=olive.get("help", meta["help"]),
        )
    return params


def _option_values(config: BasePassConfig, target: str) -> dict[str, Any]:
    values = {key: getattr(config, key) for key in OPTION_KEYS if getattr(config, key) is not None}
    return {**values, "target": target}


def _array(value: Any) -> np.ndarray:
    """A batch entry as NumPy (torch tensors through .numpy())."""
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def _samples(config: BasePassConfig, input_names: list[str]) -> list[dict[str, np.ndarray]]:
    """The data config's batches as {input name: array} samples for --auto (a batch of one
    tensor, as Olive's containers give for a one-input model, feeds that input)."""
    from olive.common.config_utils import validate_config

    data_config = validate_config(config.data_config, DataConfig)
    loader = data_config.to_data_container().create_dataloader()
    samples = []
    for batch in loader:
        feeds = batch[0] if isinstance(batch, tuple | list) else batch
        if not isinstance(feeds, Mapping):
            if len(input_names) != 1:
                raise OptionError(
                    f"AmpConvert: data_config gives one tensor per batch, but the model takes "
                    f"{len(input_names)} inputs ({', '.join(input_names)}); give a dict of them"
                )
            feeds = {input_names[0]: feeds}
        samples.append({str(k): _array(v) for k, v in feeds.items()})
        if len(samples) >= config.auto_samples:
            break
    return samples


def _data_name(config: BasePassConfig) -> str | None:
    """Olive's ``external_data_name``, refused unless it is a plain file name: the data file is
    written next to the model, and ORT refuses a location that leaves its folder."""
    name = getattr(config, "external_data_name", None)
    if not name or not getattr(config, "save_as_external_data", False):
        return None
    if problem := text_problem(name):
        raise OptionError(f"AmpConvert: external_data_name '{printable(name)}': {problem}")
    if Path(name).name != name or name in (".", "..") or "\\" in name:
        raise OptionError(
            f"AmpConvert: external_data_name {name!r} must be a file name without folder parts "
            "(the data file goes next to the model)"
        )
    return str(name)


class AmpConvert(Pass):
    """Mixed precision (FP16/BF16) by amp-convert: casts by bytes, FP32 only where it matters."""

    @classmethod
    def _default_config(cls, accelerator_spec: AcceleratorSpec) -> dict[str, PassConfigParam]:
        config = {
            **conversion_params(),
            "auto": PassConfigParam(
                type_=bool,
                default_value=False,
                description="Accuracy-driven search (amp-convert --auto) on data_config's batches.",
            ),
            "data_config": PassConfigParam(
                type_=DataConfig | dict,
                default_value=None,
                description="Olive data config whose batches calibrate auto (required with auto).",
            ),
            "auto_samples": PassConfigParam(
                type_=int, default_value=8, description="Batches of data_config used by auto."
            ),
            "min_cosine": PassConfigParam(
                type_=float,
                default_value=None,
                description=f"auto's threshold (default {AUTO_MIN_COSINE}, as amp-convert --auto).",
            ),
            "force_write": PassConfigParam(
                type_=bool,
                default_value=False,
                description="With auto: write the closest model when the thresholds cannot be "
                "met (amp-convert --force-write); otherwise the pass fails and writes nothing.",
            ),
        }
        config.update(get_external_data_config())
        return config

    def _run_for_config(
        self, model: ONNXModelHandler, config: type[BasePassConfig], output_model_path: str
    ) -> ONNXModelHandler:
        try:
            return self._convert(model, config, output_model_path)
        except (OliveOptionError, OliveConversionError):
            raise
        except OptionError as e:
            raise OliveOptionError(str(e)) from None
        except AmpConvertError as e:
            raise OliveConversionError(str(e)) from None

    def _convert(
        self, model: ONNXModelHandler, config: type[BasePassConfig], output_model_path: str
    ) -> ONNXModelHandler:
        target = target_for(getattr(self, "accelerator_spec", None), config.target)
        values = _option_values(config, target)
        data_name = _data_name(config)
        if config.auto and not config.data_config:
            raise OptionError("AmpConvert: auto needs a data_config (its batches calibrate it)")
        src = Path(model.model_path)
        output = Path(resolve_onnx_path(output_model_path, src.name))
        read = output_rules.model_files(src)
        writes = [
            ("output", output),
            (
                "output data file",
                output.with_name(data_name) if data_name else output_rules.data_file_name(output),
            ),
            ("report", output.with_name(REPORT_NAME)),
        ]
        # the same registry as the command line's: never an input, never an existing file
        with output_rules.plan_outputs(writes, [read], force=False) as plan, OutputSet() as out:
            work = io.load_model(src)
            report: Report
            if config.auto:
                from amp_convert.auto import auto_convert

                names = [str(v.name) for v in work.graph.inputs if not v.is_initializer()]
                thresholds = {"min_cosine": config.min_cosine} if config.min_cosine else {}
                work, report = auto_convert(
                    work, inputs=_samples(config, names), **thresholds, **values
                )
                if not report.passed and not config.force_write:
                    raise OliveThresholdsNotMet(
                        "AmpConvert: auto's thresholds cannot be met with these inputs "
                        f"({_worst(report)}); nothing written (force_write writes the closest "
                        "model anyway)"
                    )
            else:
                report = convert_ir(work, ConvertOptions.from_kwargs(**values))
            out.stage(plan["report"], report.json_bytes())
            external = True if config.save_as_external_data else None
            try:
                io.save_model(
                    work,
                    plan["output"],
                    external=external,
                    keep=read,
                    data_name=data_name,
                    before_commit=lambda size: out.commit(),
                )
            except BaseException:
                out.roll_back()
                raise
        # a folder, so that Olive carries the report (and any data file) with the model
        folder = LocalFolder({"path": output.parent})
        return ONNXModelHandler(model_path=folder, onnx_file_name=output.name)


def _worst(report: Any) -> str:
    failing = [o for o in report.outputs if not o.passed and o.status != "skipped"]
    if not failing:
        return "no output compared"
    o = failing[0]
    return f"output '{printable(o.name)}': " + printable("; ".join(o.failures))[:200]


PACKAGE_CONFIG = Path(__file__).with_name("olive_package_config.json")


def merged_package_config(path: str | Path) -> Path:
    """Write Olive's own package config plus AmpConvert to ``path``.

    ``olive run --package-config`` replaces Olive's pass list; a workflow that mixes Olive's passes
    with AmpConvert takes this merged file instead of ``PACKAGE_CONFIG``.
    """
    import json

    from olive.package_config import OlivePackageConfig

    merged = json.loads(Path(OlivePackageConfig.get_default_config_path()).read_text())
    merged["passes"].update(json.loads(PACKAGE_CONFIG.read_text())["passes"])
    out = Path(path)
    out.write_text(json.dumps(merged, indent=2))
    return out
