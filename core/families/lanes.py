"""The interactive lane of a front: priority-1 traffic that the kernel serves first.

Triton orders its queues by priority but never preempts an execution, and a Python model
cannot see a request's priority. So each front has a lane, `<front>_interactive`, derived
from each of the front's config files (the reviewed one, the GPU profile, a host profile).

Where the front has interactive workers (every shipped front: one model, one process,
docs/serving.md), the lane is an ensemble into the front's own process (`ensemble_lane`):
no process and no copy of the model. Triton maps each input to the front's optional
`<input>_INTERACTIVE` twin (`with_lane_inputs`), and the front hands such a request to its
interactive worker, at normal CPU priority, while its bulk workers take the server's bulk
CPU policy (core/cpu_policy.py); the request's parameters, priority and timeout travel
with it. A full lane queue refuses at once as a full queue ("Exceeds maximum queue
size", `lane_full`), and the SDK and the front door send the request to the front at
priority 1 instead.

Where it has none (a family that does not ask for workers), the lane is a front model of
its own (`lane_config`): one instance that runs the primary encoder's served version in
its own process on the lane's share of the cores, at normal CPU scheduling, serving at
most `LANE_QUEUE` requests an execution and refusing the rest at once the same way. Its
bound is the stub's, not a Triton queue policy: with one instance, a queue policy turns
off Triton 2.51's prefetching of the next batch, and a request that arrives during an
execution then waits for the batcher's 500 ms timeout or the next arrival.

Its version folder and warmup are links to the front's; `lane_of` names the front.
"""

from __future__ import annotations

from pathlib import Path

from tmr_client.contract import INTERACTIVE_PRIORITY, LANE_SUFFIX, lane_name

from core.model_config import mc
from core.settings import (
    IN_PROCESS_PARAMETER,
    IN_PROCESS_THREADS_PARAMETER,
    INTERACTIVE_INPUT_SUFFIX,
    INTERACTIVE_WORKERS_PARAMETER,
    LANE_SHARE,
    SCHEDULING_PARAMETER,
    WORKERS_PARAMETER,
)

LANE_PARAMETER = "lane_of"  # a lane's config: the front it is the interactive lane of
LANE_INSTANCES = 1
LANE_QUEUE = 8  # requests one lane execution serves; the rest are refused (UNAVAILABLE)
LANE_REQUESTS_PARAMETER = "lane_requests"  # LadderSettings.lane_requests
# What only the front answers to: the family's default front (core/families/catalog.py)
# and the names the OpenAI route knows it by (server/openai_models.py).
FRONT_ONLY = ("default_front", "openai_names", WORKERS_PARAMETER)
LINKED = ("1", "warmup")  # the front's version folder and warmup inputs, shared


def lane_config(front: mc.ModelConfig, gpu: bool = False) -> mc.ModelConfig:
    """The lane of `front` (one of its config files; `gpu`: its GPU profile): an ensemble
    into the front's own process where the front has interactive workers, else a front
    model of its own."""
    workers = front.parameters.get(INTERACTIVE_WORKERS_PARAMETER)
    if workers is not None and int(workers.string_value or 0) > 0:
        return ensemble_lane(front)
    lane = mc.ModelConfig()
    lane.CopyFrom(front)
    lane.name = lane_name(front.name)
    kind = front.instance_group[0].kind if front.instance_group else mc.ModelInstanceGroup.KIND_CPU
    del lane.instance_group[:]
    lane.instance_group.add(count=LANE_INSTANCES, kind=kind)
    # No preferred size and no queue policy: an execution takes every waiting request, and
    # the stub serves `lane_requests` of them and refuses the rest at once.
    lane.dynamic_batching.Clear()
    lane.parameters[LANE_PARAMETER].string_value = front.name
    lane.parameters[LANE_REQUESTS_PARAMETER].string_value = str(LANE_QUEUE)
    lane.parameters[SCHEDULING_PARAMETER].string_value = "normal"  # the shared path yields
    for key in (*FRONT_ONLY, *((IN_PROCESS_PARAMETER, IN_PROCESS_THREADS_PARAMETER) * gpu)):
        if key in lane.parameters:
            del lane.parameters[key]
    if not gpu:
        lane.parameters[IN_PROCESS_PARAMETER].string_value = "true"
        lane.parameters[IN_PROCESS_THREADS_PARAMETER].string_value = str(LANE_SHARE)
    return lane


def with_lane_inputs(front: mc.ModelConfig) -> mc.ModelConfig:
    """`front` taking its lane's requests in its own process: every input optional, and an
    optional `<input>_INTERACTIVE` twin of each, which only its ensemble lane feeds
    (python_backends/base.py input_array reads either; a request carries one of them)."""
    config = mc.ModelConfig()
    config.CopyFrom(front)
    inputs = [t for t in config.input if not t.name.endswith(INTERACTIVE_INPUT_SUFFIX)]
    del config.input[:]
    for tensor in inputs:
        config.input.add().CopyFrom(tensor)
        config.input[-1].optional = True
    for tensor in inputs:
        twin = config.input.add()
        twin.CopyFrom(tensor)
        twin.name = tensor.name + INTERACTIVE_INPUT_SUFFIX
        twin.optional = True
    return config


def ensemble_lane(front: mc.ModelConfig) -> mc.ModelConfig:
    """The lane as an ensemble over `front`: no process of its own, so no copy of the
    model. Triton's core maps each input to the front's `_INTERACTIVE` twin, where the
    front's interactive workers (normal CPU priority) take it, and each output back; the
    request's parameters, priority and timeout travel with it (core r24.10 EnsembleContext)."""
    lane = mc.ModelConfig(name=lane_name(front.name), platform="ensemble",
                          max_batch_size=front.max_batch_size)
    step = lane.ensemble_scheduling.step.add(model_name=front.name, model_version=-1)
    for tensor in front.input:
        if tensor.name.endswith(INTERACTIVE_INPUT_SUFFIX):
            continue
        public = lane.input.add()
        public.CopyFrom(tensor)
        public.optional = False
        step.input_map[tensor.name + INTERACTIVE_INPUT_SUFFIX] = tensor.name
    for tensor in front.output:
        lane.output.add().CopyFrom(tensor)
        step.output_map[tensor.name] = tensor.name
    for key in ("family",):
        lane.parameters[key].string_value = front.parameters[key].string_value
    lane.parameters[LANE_PARAMETER].string_value = front.name
    return lane


def lane_header(front: str, source: Path) -> str:
    """The comment atop a lane's config file derived from the front's `source` file."""
    return (f"{lane_name(front)}: the interactive lane of '{front}' (core/families/lanes.py),"
            f"\nderived from its {source.as_posix()} by `tmr add` and `tmr tune`: edit the "
            "front, not this.")


def lane_full(lane: str, taken: int) -> str:
    """A lane's refusal of the requests past its `taken` of one execution: worded as
    Triton's full queue, which the SDK and the front door send on to the front."""
    return (f"Exceeds maximum queue size: the interactive lane '{lane}' serves {taken} "
            f"requests at once; send this one to '{lane.removesuffix(LANE_SUFFIX)}' at priority "
            f"{INTERACTIVE_PRIORITY}")
