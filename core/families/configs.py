"""The config.pbtxt of every family model, generated from its family (no copies).

A front or encoder config is Triton's `ModelConfig` built from the family description
plus a small spec of what varies per model (its name, dimension, instances, parameters),
and written with Triton's own protobuf text format. `encoder_spec`/`front_spec` read the
spec back from a config; `tests/unit/test_configs.py` checks that every config of the
repository is exactly what its family generates from its spec, so no two configs can
drift apart, and that the GPU profile differs only where the family says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from google.protobuf import json_format, text_format

from core.families import Family, Tensor, family, warmup
from core.families.lanes import (
    LINKED,
    lane_config,
    lane_header,
    lane_name,
    with_lane_inputs,
)
from core.families.spec import DIM, PRECISION_PARAMETER
from core.files import write_atomically
from core.hardware import BF16, FP32
from core.host_profile import Layout
from core.model_config import mc
from core.params import IDLE_THREADS_PARAMETER
from core.settings import (
    ENCODER_THREADS,
    IN_PROCESS_PARAMETER,
    IN_PROCESS_THREADS_PARAMETER,
    INSTANCE_SHARE,
    INTERACTIVE_WORKERS_PARAMETER,
    SCHEDULING_PARAMETER,
    WORKERS_PARAMETER,
    DynamicBatching,
)
from core.variant import Variant
from core.versions import config_files, parse_config, policy_line, read_config

CPU, GPU = "cpu", "gpu"


@dataclass(frozen=True)
class EncoderSpec:
    """What varies between two encoders of a family."""

    family: str
    base: str  # the model's name: encoders are "<base>_<format>"
    format: str
    dimension: int
    source: str  # what `tmr export` reads (a folder, a package, parts of one)
    input_shape: tuple[int, ...] = ()  # sizes of Family.input_dims (an image's C, H, W)
    version: int | None = 1  # the served version (version_policy), None: latest
    instances: int = 1  # CPU instances, each with `threads` intra-op threads (0: every core)
    threads: int = ENCODER_THREADS
    gpu_instances: int = 1
    gate: Mapping[str, str] = field(default_factory=dict)  # overrides of the family's
    precision: str = FP32  # a host-precision format's (core.hardware.inference_precision)
    idle_session: bool = True  # where the format has one: False leaves it out (memory)
    scheduling: str | None = None  # cpu_scheduling, where a config pins one

    @property
    def name(self) -> str:
        return family(self.family).encoder_name(self.base, self.format)

    @property
    def sizes(self) -> dict[str, int]:
        return sizes_of(self.dimension, self.input_shape, family(self.family).input_dims)


@dataclass(frozen=True)
class FrontSpec:
    """What varies between two front models of a family."""

    family: str
    name: str
    base: str  # the model whose encoders it calls
    dimension: int
    parameters: Mapping[str, str] = field(default_factory=dict)  # the family's + the model's
    instances: int | None = None  # None: the family's
    batching: DynamicBatching | None = None  # None: the family's
    primary: str | None = None  # the format it calls normally; None: the family's


def sizes_of(dimension: int, input_shape: tuple[int, ...] = (),
             input_dims: tuple[str, ...] = ()) -> dict[str, int]:
    """The model's own sizes by name for resolving dims: spec.DIM, and its input's
    (`input_dims`, its family's Family.input_dims, sized by `input_shape`)."""
    return {DIM: dimension, **dict(zip(input_dims, input_shape, strict=True))}


def tensors(specs: tuple[Tensor, ...], sizes: dict[str, int], suffix: str = "") -> list[dict]:
    return [{"name": t.name + suffix, "data_type": t.data_type,
             "dims": list(t.resolved(sizes))} for t in specs]


def params(values: Mapping[str, str]) -> dict[str, dict[str, str]]:
    return {key: {"string_value": str(value)} for key, value in values.items()}


def has_idle_session(spec: EncoderSpec) -> bool:
    """Whether the encoder's CPU config adds the idle session (see encoder_config)."""
    fam = family(spec.family)
    return (spec.idle_session and fam.format(spec.format).idle_session and spec.instances > 1
            and spec.format != fam.serving.fallback)


def encoder_config(spec: EncoderSpec, profile: str = CPU) -> mc.ModelConfig:
    """The encoder's config (CPU), or its GPU profile: KIND_GPU, no CPU thread setting, no
    gate (the gate reads the main config)."""
    fam = family(spec.family)
    fmt = fam.format(spec.format)
    values = {"family": fam.name, "format": fmt.name, "source": spec.source}
    if profile == CPU:
        values |= {fmt.threads_parameter: str(spec.threads), **fmt.gate, **spec.gate,
                   **fmt.parameters}
        if spec.scheduling:  # pinned in the config it was read from
            values[SCHEDULING_PARAMETER] = spec.scheduling
        # A lone request gets every core through a second session (docs/benchmarks.md).
        # Not the fallback's: the ladder sends it traffic only under load, when no instance
        # is idle, and its second session held a second copy of the weights for nothing.
        if has_idle_session(spec):
            values[IDLE_THREADS_PARAMETER] = str(spec.instances * spec.threads)
        if fmt.host_precision:
            values[PRECISION_PARAMETER] = spec.precision
            if spec.precision == BF16:  # what Triton's native OpenVINO backend reads
                values["HINT_BF16"] = "YES"
    plan = fam.serving.warmup
    config = {
        "name": spec.name, "max_batch_size": fam.serving.max_batch_size,
        "input": tensors(fam.contract.encoder_inputs, spec.sizes),
        "output": tensors((fam.contract.encoder_output,), spec.sizes, fmt.output_suffix),
        "instance_group": [{"count": spec.instances, "kind": "KIND_CPU"} if profile == CPU
                           else {"count": spec.gpu_instances, "kind": "KIND_GPU"}],
        "dynamic_batching": {}, "parameters": params(values),
        "default_model_filename": fmt.artifact,
        "model_warmup": warmup.samples(plan, fam.contract.encoder_inputs, spec.sizes,
                                       plan.encoder_batches, plan.encoder_runs),
    }
    config |= {"backend": fmt.backend} if fmt.backend else {"platform": fmt.platform}
    if spec.version is not None:
        config["version_policy"] = {"specific": {"versions": [spec.version]}}
    return json_format.ParseDict(config, mc.ModelConfig())


def front_config(spec: FrontSpec, profile: str = CPU) -> mc.ModelConfig:
    """The front model's config: the family's Python-based backend on the CPU. Its GPU
    profile differs only in routing to the family's default primary, which has one, where
    the chosen primary has none (the openvino format runs on the CPU only)."""
    fam = family(spec.family)
    contract, serving = fam.contract, fam.serving
    primary = serving.primary if profile == GPU else spec.primary or serving.primary
    values = {**serving.front_parameters, **spec.parameters, "family": fam.name,
              "primary_model": fam.encoder_name(spec.base, primary),
              "fallback_model": fam.encoder_name(spec.base, serving.fallback)}
    if profile == GPU:  # the encoder on the GPU, its own instance group (gpu_hosts.md)
        values[IN_PROCESS_PARAMETER] = "false"
        values[IN_PROCESS_THREADS_PARAMETER] = str(INSTANCE_SHARE)
    config = json_format.ParseDict({
        "name": spec.name, "backend": fam.backend, "max_batch_size": serving.max_batch_size,
        "input": tensors(contract.front_inputs, sizes_of(spec.dimension)),
        "output": tensors(contract.front_outputs, sizes_of(spec.dimension)),
        "instance_group": [{"count": spec.instances or serving.front_instances,
                            "kind": "KIND_CPU"}],
        "dynamic_batching": (spec.batching or serving.front_batching).to_config(),
        "parameters": params(values),
        "default_model_filename": contract.front_artifact,
        "model_warmup": warmup.samples(serving.warmup, contract.front_inputs,
                                       sizes_of(spec.dimension), serving.warmup.front_batches),
    }, mc.ModelConfig())
    # a lane served in this process takes its requests on the inputs' twins (lanes.py)
    lane_inside = int(values.get(INTERACTIVE_WORKERS_PARAMETER, "0") or 0) > 0
    return with_lane_inputs(config) if lane_inside else config


def parameters_of(config: mc.ModelConfig) -> dict[str, str]:
    return {key: value.string_value for key, value in config.parameters.items()}


def encoder_spec(config: mc.ModelConfig) -> EncoderSpec:
    """Read back what varies from an encoder config (CPU): the inverse of encoder_config."""
    p = parameters_of(config)
    fam = family(p["family"])
    fmt = fam.format(p["format"])
    suffix = "_" + fmt.name
    gate = {k: v for k, v in p.items() if k.startswith("gate_") and fmt.gate.get(k) != v}
    cpu = [g.count for g in config.instance_group if g.kind == mc.ModelInstanceGroup.KIND_CPU]
    policy = config.version_policy
    named = [i for i, d in enumerate(fam.contract.encoder_inputs[0].dims) if d in fam.input_dims]
    spec = EncoderSpec(
        family=fam.name, base=config.name.removesuffix(suffix), format=fmt.name,
        dimension=int(config.output[0].dims[-1]), source=p["source"],
        input_shape=tuple(int(config.input[0].dims[i]) for i in named),
        version=list(policy.specific.versions)[-1] if policy.HasField("specific") else None,
        instances=sum(cpu) or 1, threads=int(p.get(fmt.threads_parameter, ENCODER_THREADS)),
        gate=gate, precision=p.get(PRECISION_PARAMETER, FP32))
    return replace(spec, idle_session=IDLE_THREADS_PARAMETER in p or not has_idle_session(spec),
                   scheduling=p.get(SCHEDULING_PARAMETER))


def front_spec(config: mc.ModelConfig) -> FrontSpec:
    """Read back what varies from a front config: the inverse of front_config."""
    p = parameters_of(config)
    fam = family(p["family"])
    base, primary = fam.split_encoder_name(p["primary_model"])
    derived = ("family", "primary_model", "fallback_model")
    batching = DynamicBatching.from_config(json_format.MessageToDict(
        config.dynamic_batching, preserving_proto_field_name=True))
    return FrontSpec(family=fam.name, name=config.name, base=base,
                     dimension=int(config.output[0].dims[-1]),
                     parameters={k: v for k, v in p.items() if k not in derived},
                     instances=sum(g.count for g in config.instance_group),
                     batching=None if batching == fam.serving.front_batching else batching,
                     primary=None if primary == fam.serving.primary else primary)


def gpu_spec(spec: EncoderSpec, gpu: mc.ModelConfig) -> EncoderSpec:
    """The spec with the GPU profile's instance count."""
    return replace(spec, gpu_instances=sum(g.count for g in gpu.instance_group) or 1)


def render(config: mc.ModelConfig, header: str) -> str:
    """config.pbtxt text: a comment header, then Triton's text format, with the version
    policy (what `tmr promote` and `tmr rollback` edit) and each parameter (what
    `tmr degrade --control-mode poll` edits) on one line of its own."""
    body = mc.ModelConfig()
    body.CopyFrom(config)
    body.ClearField("version_policy")
    body.ClearField("parameters")
    text = text_format.MessageToString(body)
    if config.HasField("version_policy"):
        versions = list(config.version_policy.specific.versions)
        text = text.replace("\ninput {", f"\n{policy_line(versions)}\ninput {{", 1)
    text += "".join(f"parameters {{ key: {json.dumps(key)} value: {{ string_value: "
                    f"{json.dumps(value)} }} }}\n"
                    for key, value in sorted(parameters_of(config).items()))
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    return "\n".join(lines) + "\n" + text


def encoder_header(spec: EncoderSpec, profile: str = CPU) -> str:
    what = "its GPU profile (--model-config-name=gpu)" if profile == GPU else "its config"
    return (f"{spec.name}: the {spec.format} form of the {spec.family} model "
            f"'{spec.base}', {what}.\nGenerated by `tmr add` from core/families/. "
            "The version policy is edited by\n`tmr promote` and `tmr rollback` only: a new "
            "export serves once promoted.")


def front_header(spec: FrontSpec) -> str:
    return (f"{spec.name}: the front model of the {spec.family} model '{spec.base}'.\n"
            "Generated by `tmr add` from core/families/; the parameters are the "
            "model's\nsettings (docs/serving.md has the measurements behind them).")


def family_of(config: mc.ModelConfig) -> Family | None:
    """The config's family, or None for a model outside every family (health, stub_env)."""
    name = parameters_of(config).get("family")
    return family(name) if name else None


def write_encoder(repository: Path, spec: EncoderSpec) -> None:
    """config.pbtxt and, where the format runs on a GPU, configs/gpu.pbtxt."""
    folder = repository / spec.name
    write_atomically(folder / "config.pbtxt", render(encoder_config(spec), encoder_header(spec)))
    if family(spec.family).format(spec.format).gpu:
        write_atomically(folder / "configs" / "gpu.pbtxt",
                   render(encoder_config(spec, GPU), encoder_header(spec, GPU)))


def write_front(repository: Path, spec: FrontSpec) -> None:
    """config.pbtxt and, where its primary has no GPU profile, configs/gpu.pbtxt (removed
    again once the primary has one)."""
    folder = repository / spec.name
    write_atomically(folder / "config.pbtxt", render(front_config(spec), front_header(spec)))
    fam = family(spec.family)
    profile = folder / "configs" / "gpu.pbtxt"
    gpu = front_config(spec, GPU)
    if gpu == front_config(spec):
        profile.unlink(missing_ok=True)
    else:  # a CPU-only primary, or one run in the front's process: the GPU's over BLS
        primary = spec.primary or fam.serving.primary
        why = (f"{primary} runs on the CPU only, so on a GPU host\nthe front calls "
               f"{fam.serving.primary}" if not fam.format(primary).gpu else
               "the front calls its encoder on the GPU\nover BLS rather than in its own "
               "process (docs/gpu_hosts.md)")
        write_atomically(profile, render(gpu, front_header(spec) + (
            f"\nIts GPU profile (--model-config-name=gpu): {why}.")))
    write_lane(repository, spec.name)


def write_lane(repository: Path, front: str) -> list[Path]:
    """The lane's config files, one per config file of the front, and its links to the
    front's version folder and warmup inputs; a lane file whose front file is gone goes
    too. The paths written."""
    folder = repository / lane_name(front)
    written: list[Path] = []
    main: mc.ModelConfig | None = None
    for source in config_files(repository / front):
        if not source.is_file():
            continue
        relative = source.relative_to(repository / front)
        config = lane_config(parse_config(source.read_text(encoding="utf-8")),
                             gpu=relative.stem == GPU)
        if relative.parent.name == "configs" and config == main:
            continue  # an ensemble lane the profile leaves as it is: Triton serves the main
        main = config if relative.name == "config.pbtxt" else main
        written.append(write_atomically(folder / relative,
                                        render(config, lane_header(front, relative))))
    for stale in config_files(folder):
        if stale.is_file() and stale not in written:
            stale.unlink()
    for name in LINKED:
        link = folder / name
        if not link.is_symlink() and not link.exists():  # a repository copy copies it
            link.symlink_to(Path("..") / front / name, target_is_directory=True)
    return written


def profile_header(name: str, profile: str, why: str) -> str:
    return (f"{name}: its {profile} profile (--model-config-name={profile}), written by "
            f"`tmr tune` for\n{why}.\nHost-specific and git-ignored: `tmr tune --show` says "
            "what serves and why.")


def write_variant(repository: Path, front: str, encoders: Mapping[str, str], variant: Variant,
                  primary: str, precision: str, layout: Layout, why: str) -> list[Path]:
    """configs/<profile>.pbtxt for a model's front and every encoder: its reviewed config
    with the front calling `primary`, the formats that run at the host's precision at
    `precision`, and the layout's instances, threads and idle session; with
    `layout.in_process` the front runs the primary itself. The paths written."""
    written = []
    for name in encoders.values():
        spec = encoder_spec(read_config(repository / name))
        fmt = family(spec.family).format(spec.format)
        alone = layout.in_process and spec.format == primary  # BLS calls only: one instance
        spec = replace(spec, instances=1 if alone else layout.encoder_instances,
                       threads=layout.encoder_threads, idle_session=layout.idle_session,
                       precision=precision if fmt.host_precision else spec.precision)
        path = repository / name / "configs" / f"{variant.name}.pbtxt"
        write_atomically(path, render(encoder_config(spec),
                                      profile_header(name, variant.name, why)))
        written.append(path)
    spec = front_spec(read_config(repository / front))
    fam = family(spec.family)
    # The shared path yields to its interactive lanes under the server's bulk CPU policy
    # (core/cpu_policy.py), decided where it starts, as with the reviewed configs.
    # Where the primary runs, with the layout's threads a call (a count, or every core);
    # the workers the layout's, or the reviewed front's (its lane inside it either way).
    parameters = dict(spec.parameters)
    parameters[IN_PROCESS_PARAMETER] = "true" if layout.in_process else "false"
    if layout.in_process:
        parameters[IN_PROCESS_THREADS_PARAMETER] = str(layout.encoder_threads or "every_core")
    if layout.front_workers:
        parameters[WORKERS_PARAMETER] = str(layout.front_workers)
    spec = replace(spec, primary=None if primary == fam.serving.primary else primary,
                   instances=layout.front_instances, parameters=parameters)
    path = repository / front / "configs" / f"{variant.name}.pbtxt"
    write_atomically(path, render(front_config(spec), profile_header(front, variant.name, why)))
    lane = [p for p in write_lane(repository, front) if p.name == path.name]
    return [*written, path, *lane]
