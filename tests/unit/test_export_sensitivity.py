"""export.sensitivity: fake quantization, node naming, the ranking and the exclusion counts,
on a small torch model exported and quantized by the real exporter and onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from export import quantize
from export.parity import fidelity
from export.sensitivity import (
    exclusion_counts,
    fake_quantize_activation,
    fake_quantize_weight,
    linear_sensitivity,
    mean_cosine_loss,
    onnx_node_for,
)
from runtime.runners import onnx_runner

WIDTH, HIDDEN, OUTLIER = 16, 64, 40.0


class Block(nn.Module):
    """A transformer's feed-forward block: up, GELU, down, residual."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(WIDTH, HIDDEN), nn.Linear(HIDDEN, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(x)))


class Body(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.ModuleList(Block() for _ in range(3))


class Tiny(nn.Module):
    """Calls its body's layers directly, as the text recipe calls the encoder, so the
    exporter leaves `body` out of the node names."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = Body()
        with torch.no_grad():  # one unit of layer 1 fires far above the rest: an outlier channel
            self.body.layer[1].up.bias[3] = OUTLIER

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.body.layer:
            x = block(x)
        return x.mean(dim=1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Tiny, Path, list[torch.Tensor]]:
    model = Tiny().eval()
    inputs = [torch.randn(4, 6, WIDTH, generator=torch.Generator().manual_seed(s))
              for s in range(3)]  # fmt: skip
    path = tmp_path_factory.mktemp("tiny") / "tiny.onnx"
    torch.onnx.export(model, (inputs[0],), str(path), input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "b", 1: "l"}}, opset_version=17, dynamo=False)
    return model, path, inputs


def node_names(path: Path) -> list[str]:
    return [n.name for n in onnx.load(str(path)).graph.node]


def test_activation_fake_quantization_keeps_zero_and_the_range() -> None:
    x = torch.tensor([-1.0, 0.0, 0.5, 3.0])
    q = fake_quantize_activation(x)
    assert q[1] == 0.0
    assert torch.allclose(q, x, atol=4.0 / 255)
    assert torch.equal(fake_quantize_activation(torch.zeros(3)), torch.zeros(3))


def test_weight_fake_quantization_is_per_output_channel_and_7_bit_by_default() -> None:
    w = torch.tensor([[1.0, -0.5, 0.25], [100.0, 3.0, 0.0]])
    q7, q8 = fake_quantize_weight(w), fake_quantize_weight(w, reduce_range=False)
    assert torch.equal(q7[:, 0], w[:, 0])  # each row's largest value is exact
    assert torch.allclose(q7[0], w[0], atol=1.0 / 63)  # row 0 keeps its own fine scale
    assert len(torch.unique(torch.round(q7[1] / (100.0 / 63)))) <= 3
    assert (q8 - w).abs().max() <= (q7 - w).abs().max()


def test_each_linear_maps_to_the_matmul_the_exporter_wrote(tiny) -> None:
    model, path, _ = tiny
    nodes = node_names(path)
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            node = onnx_node_for(name, nodes)
            assert node is not None and node.endswith("/MatMul") and node in nodes, name
    assert onnx_node_for("body.layer.1.up", nodes) == "/layer.1/up/MatMul"
    assert onnx_node_for("body.layer.9.up", nodes) is None


def test_the_layer_fed_by_the_outlier_channel_ranks_first(tiny) -> None:
    model, path, inputs = tiny
    ranking = linear_sensitivity(model, [(x,) for x in inputs], node_names(path))
    assert len(ranking) == 6
    assert ranking[0].node == "/layer.1/down/MatMul"
    assert ranking[0].loss > 3 * ranking[1].loss
    assert [s.loss for s in ranking] == sorted((s.loss for s in ranking), reverse=True)
    with torch.inference_mode():  # the model is left as it was
        np.testing.assert_array_equal(model(inputs[0]).numpy(), Tiny().eval()(inputs[0]).numpy())


def test_keeping_the_top_node_in_fp32_brings_onnxruntime_int8_closer(tiny, tmp_path) -> None:
    model, path, inputs = tiny
    ranking = linear_sensitivity(model, [(x,) for x in inputs], node_names(path))
    feeds = [{"x": x.numpy()} for x in inputs]
    reference = np.concatenate([onnx_runner(path, 1)(f)["y"] for f in feeds])

    def cosine_of(variant: quantize.QuantVariant) -> float:
        target = tmp_path / f"{variant.name}.onnx"
        quantize.quantize_int8(path, target, variant)
        run = onnx_runner(target, 1)
        return fidelity(reference, np.concatenate([run(f)["y"] for f in feeds])).mean

    kept = quantize.GUIDED_BASE.keeping((ranking[0].node,))
    assert kept.name.endswith("-fp32-1") and kept.settings()["keep_fp32"] == [ranking[0].node]
    assert 1 - cosine_of(kept) < (1 - cosine_of(quantize.GUIDED_BASE)) / 3


def test_mean_cosine_loss() -> None:
    a = np.array([[1.0, 0.0], [0.0, 2.0]])
    assert mean_cosine_loss(a, a * 3) == pytest.approx(0.0)
    assert mean_cosine_loss(a, np.array([[0.0, 1.0], [0.0, 1.0]])) == pytest.approx(0.5)


@pytest.mark.parametrize(("losses", "budget", "expected"), [
    ([0.5, 0.2, 0.05, 0.01, 0.01, 0.0, 0.0, 0.0], 0.02, [3, 4]),  # tail after 3 is 0.02; 4 = half
    ([0.5, 0.2, 0.05, 0.01, 0.01, 0.0, 0.0, 0.0], 1.0, [1, 2, 3, 4]),  # at least one
    ([0.5, 0.4, 0.3, 0.2], 0.01, []),  # the budget needs more than half in FP32
    ([], 0.01, []),
])
def test_exclusion_counts(losses: list[float], budget: float, expected: list[int]) -> None:
    assert exclusion_counts(losses, budget) == expected


def test_the_scan_reports_a_line_per_tenth_and_the_cli_shows_it_without_verbose(
        caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from cli.export import _logging
    from export.text_embedding import _scan_progress

    _logging(verbose=False)
    assert logging.getLogger("export.progress").isEnabledFor(logging.INFO)
    with caplog.at_level(logging.INFO, logger="export.progress"):
        for done in range(1, 73):
            _scan_progress(done, 72)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 11 and lines[-1] == "int8 sensitivity scan: 72/72 MatMuls"
