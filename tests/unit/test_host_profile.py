"""core.host_profile's rules over measured tables, the variants it writes, and staleness.

The tables are this project's measurements: goodput round by round through the real server
(`tmr tune`, docs/benchmarks.md), RSS of the whole server once ready."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from core import host_profile as hp
from core import tune_record as tr
from core import variant
from core.families.catalog import find, served_encoder
from core.families.configs import write_variant
from core.paths import DEFAULT_REPOSITORY
from core.settings import (
    IN_PROCESS_PARAMETER,
    LadderSettings,
    ModelSettings,
    ThreadShare,
)
from core.startup import startup_models
from core.variant import GPU, HOST
from core.variant import REVIEWED as REVIEWED_CONFIGS
from core.versions import served_config
from server.tune import MODES, check_tunable, kinds, text_models

REVIEWED = hp.Layout(1, 0, 2)
# Zen 4 with avx512_bf16, 2 cores (tmr tune, 2026-12-04): reviewed onnxruntime FP32 against
# OpenVINO bf16, three interleaved rounds each.
BF16_BASE = hp.Candidate("reviewed", "onnx", "fp32", REVIEWED, (126, 146, 133), 1302)
BF16 = hp.Candidate("openvino bf16", "openvino", "bf16", REVIEWED, (179, 160, 166), 1350)
# An AVX2 host: OpenVINO FP32 within noise of onnxruntime (docs/benchmarks.md, round 3).
AVX2_BASE = hp.Candidate("reviewed", "onnx", "fp32", REVIEWED, (188, 201, 176), 1266)
AVX2_OV = hp.Candidate("openvino fp32", "openvino", "fp32", REVIEWED, (197, 192, 181), 1290)
BUDGET = 1536.0  # the budget these rounds were measured under (the four-process layout)


def test_the_cores_a_server_may_use_are_its_affinity_bounded_by_the_cgroup_quota() -> None:
    assert hp.usable_cores(16, None) == 16
    assert hp.usable_cores(16, 4.0) == 4  # a container limited to 4 CPUs on a large host
    assert hp.usable_cores(16, 1.5) == 2  # a quota of 1.5 lets two threads run
    assert hp.usable_cores(2, 8.0) == 2  # taskset -c 0,1 under a generous quota
    assert hp.usable_cores(0, 0.2) == 1


def test_the_cgroup_quota_is_read_from_v2_then_v1(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("400000 100000\n")
    assert hp.cgroup_cpu_limit(tmp_path) == 4.0
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert hp.cgroup_cpu_limit(tmp_path) is None
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("150000")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert hp.cgroup_cpu_limit(tmp_path) == 1.5
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    assert hp.cgroup_cpu_limit(tmp_path) is None


@pytest.mark.parametrize(("cores", "layout"), [
    (1, hp.Layout(1, 1, 2)),  # never one front instance: priority queues stall on one
    (2, hp.Layout(2, 1, 3)),
    (4, hp.Layout(4, 1, 5)),
    (16, hp.Layout(4, 4, 8)),  # past 4 instances, threads grow instead
])
def test_instances_and_threads_follow_the_usable_cores(cores: int, layout: hp.Layout) -> None:
    assert hp.layout_for(cores) == layout


def test_on_a_bf16_host_openvino_bf16_wins_beyond_the_rounds_noise() -> None:
    decision = hp.choose(BF16_BASE, [BF16], BUDGET)
    assert decision.chosen is BF16 and decision.verdict == hp.Verdict.SERVES
    assert decision.ratios["openvino bf16"] == pytest.approx(1.248, abs=0.01)
    assert decision.noise["openvino bf16"] == pytest.approx(0.162, abs=0.005)
    assert "1.25x the reviewed goodput" in decision.reason


def test_on_an_avx2_host_a_lead_within_the_noise_keeps_the_reviewed_configs() -> None:
    decision = hp.choose(AVX2_BASE, [AVX2_OV], BUDGET)
    assert decision.chosen is AVX2_BASE and decision.verdict == hp.Verdict.NOTHING_BETTER
    assert "within the rounds' noise" in decision.refused["openvino fp32"]


def test_noise_that_hides_a_gain_keeps_the_reviewed_configs() -> None:
    # The same median gain, but one round the candidate lost: its ratios span 0.9 to 1.6.
    noisy = replace(BF16, goodputs=(113, 234, 166))
    decision = hp.choose(BF16_BASE, [noisy], BUDGET)
    assert decision.chosen is BF16_BASE
    assert decision.noise["openvino bf16"] > decision.ratios["openvino bf16"] - 1


def test_zero_rounds_decide_nothing_and_say_so() -> None:
    decision = hp.choose(replace(BF16_BASE, goodputs=()), [replace(BF16, goodputs=())], BUDGET)
    assert decision.chosen.name == "reviewed" and decision.verdict == hp.Verdict.NO_ROUNDS
    assert decision.ratios == {} and "no round was measured" in decision.reason


def test_one_round_is_no_evidence() -> None:
    single = hp.choose(replace(BF16_BASE, goodputs=(130,)), [replace(BF16, goodputs=(170,))],
                       BUDGET)
    assert single.chosen.name == "reviewed" and single.verdict == hp.Verdict.ONE_ROUND
    assert single.ratios == {} and "no spread" in single.reason


def test_equal_rounds_judge_a_gain_against_the_minimum_margin() -> None:
    base = replace(BF16_BASE, goodputs=(100, 100, 100))
    assert hp.gain_and_noise(hp.paired_ratios(base, base)) == (1.0, hp.MIN_MARGIN)
    steady = hp.choose(base, [replace(BF16, goodputs=(101, 101, 101))], BUDGET)
    assert steady.verdict == hp.Verdict.NOTHING_BETTER  # +1% is under the 2% margin
    assert "1.01x the reviewed goodput is within the rounds' noise (+-2%)" in \
        steady.refused["openvino bf16"]
    better = hp.choose(base, [replace(BF16, goodputs=(110, 110, 110))], BUDGET)
    assert better.verdict == hp.Verdict.SERVES and better.noise["openvino bf16"] == 0.02


def test_a_zero_score_everywhere_says_no_candidate_met_the_objective() -> None:
    zero = hp.choose(replace(BF16_BASE, goodputs=(0, 0)), [replace(BF16, goodputs=(0, 0))],
                     BUDGET)
    assert zero.verdict == hp.Verdict.NONE_MET and zero.chosen.name == "reviewed"
    assert zero.ratios == {} and zero.noise == {}
    assert "no candidate met the objective at any concurrency" in zero.reason


def test_a_baseline_scoring_zero_gives_no_ratio_never_an_infinite_one() -> None:
    decision = hp.choose(replace(BF16_BASE, goodputs=(0, 0, 120)),
                         [replace(BF16, goodputs=(60, 60, 150))], BUDGET)
    assert decision.chosen.name == "reviewed" and decision.ratios == {}
    assert "scored 0 in all but 1 round(s): no ratio to judge by" in \
        decision.refused["openvino bf16"]
    assert hp.paired_ratios(replace(BF16_BASE, goodputs=(0, 100)),
                            replace(BF16, goodputs=(50, 150))) == [1.5]


def test_a_busy_host_is_inconclusive_and_says_re_run() -> None:
    busy = "other work used up to 60% of the cores in 4 round(s)"
    decision = hp.choose(replace(BF16_BASE, goodputs=(130,)), [replace(BF16, goodputs=(170,))],
                         BUDGET, busy=busy)
    assert decision.verdict == hp.Verdict.HOST_BUSY and decision.chosen.name == "reviewed"
    assert decision.reason.startswith(busy) and "1 clean round left" in decision.reason
    assert hp.Verdict.HOST_BUSY.value == "inconclusive: the host was busy, re-run `tmr tune`"
    # Enough clean rounds: the busy ones were left out, and the clean ones decide.
    assert hp.choose(BF16_BASE, [BF16], BUDGET, busy=busy).verdict == hp.Verdict.SERVES


def test_the_objective_is_the_standard_one_unless_a_lone_request_leaves_no_room() -> None:
    assert hp.objective_for([12.0, 14.0, 30.0]) == 60.0  # median 14: room to spare
    assert hp.objective_for([30.0, 31.0]) == 61.0  # twice the lone request's p99
    assert hp.objective_for([80.0, 95.0, 90.0]) == 180.0  # a host that misses 60 ms alone
    assert hp.objective_for([]) == 60.0
    assert hp.objective_for([80.0], fixed_ms=0.5) == 0.5


def test_a_candidate_that_failed_its_gate_never_serves_however_fast() -> None:
    failed = replace(BF16, goodputs=(400, 410, 405), gate_failure="min cosine 0.98 under 0.999")
    decision = hp.choose(BF16_BASE, [failed], BUDGET)
    assert decision.chosen is BF16_BASE
    assert decision.refused["openvino bf16"].startswith("failed the fidelity gate")


def test_the_memory_budget_is_a_ceiling_on_the_whole_server() -> None:
    budget = hp.DEFAULT_MEMORY_BUDGET_MB
    light = replace(BF16, rss_mb=920)
    assert hp.choose(BF16_BASE, [light], budget).chosen is light  # 920 + 10%: within 1024
    heavy = replace(BF16, rss_mb=950, goodputs=(400, 410, 405))
    decision = hp.choose(BF16_BASE, [heavy], budget)
    assert decision.chosen is BF16_BASE  # however fast
    assert decision.refused["openvino bf16"] == (
        "the server held 950 MB RSS after its rounds, 1045 with the 10% a long mixed load "
        "adds: over the 1024 MB budget")
    assert hp.choose(BF16_BASE, [heavy], 4096).chosen is heavy  # a larger budget lets it in


def test_the_best_of_several_winners_serves() -> None:
    faster = replace(BF16, name="onnx fp32 4x1", goodputs=(200, 190, 210))
    assert hp.choose(BF16_BASE, [BF16, faster], 4096).chosen is faster


# -- the variants and their staleness, on a copy of the shipped configs ----------------------
@pytest.fixture
def configs(tmp_path: Path) -> Path:
    """The shipped repository's configs (no artifacts), without any host profile."""
    repo = tmp_path / "repository"
    shutil.copytree(DEFAULT_REPOSITORY, repo, ignore=shutil.ignore_patterns(
        "[0-9]*", "host.pbtxt", "host_profile.*", "warmup", "*.json"))
    for config in repo.glob("*/config.pbtxt"):
        (config.parent / "1").mkdir()  # an (empty) version 1, as every shipped model has
    return repo


def profile_openvino(repo: Path) -> list[Path]:
    model = find(repo, "minilm")
    assert model.front is not None
    return write_variant(repo, model.front, model.encoders, HOST, "openvino", "bf16",
                         hp.Layout(4, 4, 8, idle_session=False), "a test host")


def config_json(config: mc.ModelConfig) -> dict:
    return json_format.MessageToDict(config, preserving_proto_field_name=True)


def parse(path: Path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(), mc.ModelConfig())


def test_a_host_variant_differs_from_its_reviewed_config_only_in_instances_and_parameters(
        configs: Path) -> None:
    written = profile_openvino(configs)
    # the lane, an ensemble into the front, is the same on every profile: not written
    assert {p.parent.parent.name for p in written} == {
        "embed", "minilm_onnx", "minilm_torchscript", "minilm_int8", "minilm_openvino"}
    counts = {"embed": 8}
    for path in written:
        profile, main = parse(path), parse(path.parent.parent / "config.pbtxt")
        assert [(g.count, g.kind) for g in profile.instance_group] == [
            (counts.get(path.parent.parent.name, 4), mc.ModelInstanceGroup.KIND_CPU)]
        for message in (profile, main):
            message.ClearField("instance_group")
            message.ClearField("parameters")
        assert profile == main
    openvino = served_config(configs / "minilm_openvino", HOST).parameters
    assert openvino["inference_precision"].string_value == "bf16"
    assert "idle_intra_op_thread_count" not in openvino
    front = served_config(configs / "embed", HOST).parameters
    assert front["primary_model"].string_value == "minilm_openvino"
    # The shared path yields under the server's bulk CPU policy, decided where it starts
    # (core/cpu_policy.py), on the profile as on the reviewed configs; the lane's worker,
    # in the front's process, stays normal (python_backends/base.py yield_cpu).
    shared = ["embed", "minilm_onnx", "minilm_torchscript", "minilm_int8", "minilm_openvino"]
    for name in shared:
        for served in (HOST, REVIEWED_CONFIGS):
            params = {"parameters": {k: {"string_value": v.string_value} for k, v in
                                     served_config(configs / name, served).parameters.items()}}
            assert ModelSettings.from_parameters(params).cpu_scheduling == "bulk", name
    assert served_config(configs / "embed_interactive", HOST).platform == "ensemble"
    # over BLS here: the front holds no copy, and its workers stay the reviewed ones
    assert front[IN_PROCESS_PARAMETER].string_value == "false"
    assert front["worker_threads"].string_value == "cores"


def test_an_in_process_variant_has_the_front_run_the_primary_and_keeps_one_encoder_instance(
        configs: Path) -> None:
    model = find(configs, "minilm")
    assert model.front is not None
    inside = hp.Layout(2, 2, 1, idle_session=False, in_process=True, front_workers=2)
    write_variant(configs, model.front, model.encoders, HOST, "openvino", "bf16",
                  inside, "a test host")
    front = served_config(configs / "embed", HOST)
    assert front.parameters[IN_PROCESS_PARAMETER].string_value == "true"
    ladder = LadderSettings.from_parameters(config_json(front))
    assert ladder.primary_in_process and ladder.in_process_threads == ThreadShare.parse("2")
    assert front.parameters["worker_threads"].string_value == "2"
    assert sum(g.count for g in front.instance_group) == 1
    counts = {name: sum(g.count for g in served_config(configs / name, HOST)
                        .instance_group) for name in model.encoders.values()}
    # The primary answers BLS calls only (a rollout's candidate, direct calls): one
    # instance; the fallback keeps the layout's, since the ladder calls it under load.
    assert counts["minilm_openvino"] == 1 and counts["minilm_int8"] == 2
    # Written again over BLS (a new tune chose that layout): the front holds no copy.
    profile_openvino(configs)
    assert served_config(configs / "embed", HOST).parameters[
        IN_PROCESS_PARAMETER].string_value == "false"
    assert "in process" in inside.describe() and "in process" not in REVIEWED.describe()


def test_the_tuner_times_the_in_process_layout_as_one_front_process_with_workers() -> None:
    host = hp.Host("a 16-core bf16 host", ("avx512_bf16",), 16, "bf16")
    inside = [(k.primary, k.layout) for k in kinds(host, REVIEWED, MODES["default"])
              if k.layout.in_process]
    # OpenVINO at the host's precision and onnxruntime FP32, each inside one front process:
    # a worker per encoder instance layout_for gives, one copy, every core shared
    assert inside == [(fmt, hp.Layout(4, 16, 1, idle_session=False, in_process=True,
                                      front_workers=4)) for fmt in ("openvino", "onnx")]
    two = {k.layout for k in kinds(replace(host, cores=2), REVIEWED, MODES["quick"])
           if k.layout.in_process}
    assert two == {hp.Layout(2, 2, 1, idle_session=False, in_process=True, front_workers=2)}
    one = {k.layout for k in kinds(replace(host, cores=1), REVIEWED, MODES["quick"])
           if k.layout.in_process}
    # never one worker: a lone request is not held behind a batch of the other
    assert one == {hp.Layout(1, 1, 1, idle_session=False, in_process=True, front_workers=2)}
    assert "one front process, 2 workers over one copy" in next(iter(two)).describe()


def test_the_served_view_routes_startup_and_releases_to_the_profiles_encoder(
        configs: Path) -> None:
    profile_openvino(configs)
    assert served_encoder(configs, "minilm", variant.REVIEWED) == "minilm_onnx"
    # the reviewed front runs minilm_onnx in its own process: not loaded at start
    assert "minilm_onnx" not in startup_models(configs, variant.REVIEWED)
    assert served_encoder(configs, "minilm", HOST) == "minilm_openvino"
    assert served_encoder(configs, "embed", HOST) == "minilm_openvino"
    assert served_encoder(configs, "minilm_onnx", HOST) == "minilm_onnx"  # itself
    assert "minilm_openvino" in startup_models(configs, HOST)
    assert "minilm_onnx" not in startup_models(configs, HOST)


def record_for(repo: Path, host: hp.Host, profiled: bool = False) -> tr.TuneRecord:
    """A record as `tmr tune` writes it, fitting `host`, with or without a winner."""
    names = ("embed", "minilm_int8", "minilm_onnx", "minilm_openvino", "minilm_torchscript")
    base = replace(BF16_BASE, reviewed=True)
    choice = tr.FrontChoice("minilm", hp.Verdict.SERVES if profiled
                            else hp.Verdict.NOTHING_BETTER, "measured", 60.0,
                            "the standard objective", (base, BF16),
                            BF16.name if profiled else base.name, {BF16.name: 1.25})
    return tr.TuneRecord("2026-12-04T01:39", "default", 150.0, host, 2, None, 1536.0, names,
                         tuple(tr.model_folders(repo)), tr.reviewed_digest(repo, names),
                         tr.served_versions(repo, names), {"embed": choice})


def test_a_profile_is_stale_on_another_cpu_core_count_config_version_or_model(
        configs: Path) -> None:
    host = hp.Host("AMD EPYC", ("avx2", "avx512_bf16"), 2, "bf16")
    record = record_for(configs, host)
    assert tr.stale_reasons(record, host, configs) == []
    assert "this host is 'Intel Xeon'" in tr.stale_reasons(
        record, replace(host, model="Intel Xeon"), configs)[0]
    assert tr.stale_reasons(record, replace(host, cores=16), configs) == [
        "tuned for 2 usable cores, this host has 16"]
    text = (configs / "embed" / "config.pbtxt").read_text()
    (configs / "embed" / "config.pbtxt").write_text(text.replace(
        '"max_tokens" value: { string_value: "256"', '"max_tokens" value: { string_value: "128"'))
    assert tr.stale_reasons(record, host, configs) == [
        "the reviewed configs changed since it was tuned"]
    (configs / "embed" / "config.pbtxt").write_text(text)
    (configs / "minilm_onnx" / "2").mkdir()
    onnx = (configs / "minilm_onnx" / "config.pbtxt").read_text()
    (configs / "minilm_onnx" / "config.pbtxt").write_text(
        onnx.replace("versions: [ 1 ]", "versions: [ 2 ]"))
    assert tr.stale_reasons(record, host, configs) == [
        "served versions changed: minilm_onnx v1->v2"]
    (configs / "minilm_onnx" / "config.pbtxt").write_text(onnx)
    shutil.copytree(configs / "minilm_onnx", configs / "mpnet_onnx")
    assert tr.stale_reasons(record, host, configs) == ["models added since: mpnet_onnx"]


def test_a_record_stale_only_for_an_added_model_is_merged_with_its_measurement(
        configs: Path) -> None:
    """`tmr add` times the added model alone (server/tune.py `only`): the record keeps its
    choice for the others and fits again once merged with what was measured."""
    host = hp.Host("AMD EPYC", ("avx2", "avx512_bf16"), 2, "bf16")
    record = record_for(configs, host, profiled=True)
    shutil.copytree(configs / "minilm_onnx", configs / "mpnet_onnx")
    assert tr.only_added(record, host, configs)
    assert not tr.only_added(record, replace(host, cores=16), configs)  # more than added
    assert not tr.only_added(None, host, configs)
    choice = replace(record.fronts["embed"], model="mpnet")
    new = replace(record, models=("mpnet_onnx",), fronts={"mpnet": choice},
                  gates={"mpnet openvino bf16": {"failure": None}})
    both = tr.merged(record, new, configs)
    assert tr.stale_reasons(both, host, configs) == []
    assert set(both.fronts) == {"embed", "mpnet"} and both.fronts["embed"] == \
        record.fronts["embed"]
    assert set(both.models) == {*record.models, "mpnet_onnx"}
    assert "mpnet openvino bf16" in both.gates and both.profiled == ["embed", "mpnet"]


def test_a_rollouts_state_and_policy_do_not_make_a_profile_stale(configs: Path) -> None:
    names = ["minilm_onnx"]
    before = tr.reviewed_digest(configs, names)
    path = configs / "minilm_onnx" / "config.pbtxt"
    path.write_text(path.read_text().replace("versions: [ 1 ]", "versions: [ 1, 2 ]")
                    + 'parameters { key: "rollout" value: { string_value: "{}" } }\n')
    assert tr.reviewed_digest(configs, names) == before


def test_an_unreadable_record_says_to_tune_again(tmp_path: Path) -> None:
    assert tr.read_record(tmp_path) is None
    (tmp_path / tr.RECORD_FILE).write_text("{not json")
    with pytest.raises(hp.ProfileError, match="run `tmr tune` again"):
        tr.read_record(tmp_path)


def written_profile(repo: Path, host: hp.Host, profiled: bool) -> None:
    """A record as `tmr tune` writes it, fitting `host`, with or without a winner."""
    if profiled:
        profile_openvino(repo)
    tr.write_record(repo, record_for(repo, host, profiled))


def test_serve_selects_the_profile_only_where_it_fits(
        configs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from server import profile

    host = hp.Host("AMD EPYC", ("avx2", "avx512_bf16"), 2, "bf16")
    monkeypatch.setattr(hp.Host, "current", classmethod(lambda cls: host))
    name, line = profile.select(configs)
    assert name == variant.REVIEWED and "no host profile here" in line
    written_profile(configs, host, profiled=False)
    name, line = profile.select(configs)
    assert name == variant.REVIEWED and "found nothing better" in line
    written_profile(configs, host, profiled=True)
    name, line = profile.select(configs)
    assert name == HOST and "embed: measured" in line
    assert profile.select(configs, reviewed=True) == (
        variant.REVIEWED, "serving the reviewed configs (--reviewed)")
    assert profile.select(configs, asked=GPU)[0] == GPU
    monkeypatch.setattr(hp.Host, "current", classmethod(lambda cls: replace(host, cores=1)))
    with pytest.raises(hp.ProfileError, match=r"stale: tuned for 2 usable cores, this host "
                       r"has 1\nrun `tmr tune`"):
        profile.select(configs)
    assert "stale" in profile.describe(configs)


def test_a_version_change_keeps_the_profile_serving_and_says_so(
        configs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rollout, promote, rollback or export changes a served version: the profile still
    fits this host, so it serves on and names the change; `--if-stale` tunes again."""
    from server import profile

    host = hp.Host("AMD EPYC", ("avx2", "avx512_bf16"), 2, "bf16")
    monkeypatch.setattr(hp.Host, "current", classmethod(lambda cls: host))
    written_profile(configs, host, profiled=True)
    assert tr.changes_here(configs) == []
    (configs / "minilm_onnx" / "2").mkdir()
    onnx = (configs / "minilm_onnx" / "config.pbtxt").read_text()
    (configs / "minilm_onnx" / "config.pbtxt").write_text(
        onnx.replace("versions: [ 1 ]", "versions: [ 2 ]"))
    name, line = profile.select(configs)
    assert name == HOST and "since then served versions changed: minilm_onnx v1->v2" in line
    assert profile.status(configs)[0]
    assert tr.changes_here(configs) == ["served versions changed: minilm_onnx v1->v2"]
    shutil.copytree(configs / "minilm_onnx", configs / "mpnet_onnx")
    assert profile.select(configs)[0] == HOST
    assert "models added since: mpnet_onnx" in profile.describe(configs)


def test_serve_refuses_a_stale_profile_with_its_reason_and_exit_2(
        configs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    from cli.main import main

    host = hp.Host.current()
    written_profile(configs, replace(host, cores=host.cores + 1), profiled=True)
    assert main(["serve", "--repository", str(configs), "--no-check"]) == 2
    err = capsys.readouterr().err
    assert "the host profile is stale: tuned for" in err and "`tmr serve --reviewed`" in err


def test_the_record_reads_back_as_written(configs: Path) -> None:
    host = hp.Host("AMD EPYC", ("avx2", "avx512_bf16"), 2, "bf16")
    record = record_for(configs, host, profiled=True)
    tr.write_record(configs, record)
    again = tr.read_record(configs)
    assert again == record and again.profiled == ["embed"]
    assert again.fronts["embed"].chosen == BF16
    assert json.loads((configs / tr.RECORD_FILE).read_text())["fronts"]["embed"]["verdict"] \
        == "SERVES"


def test_a_record_of_an_older_tune_is_unreadable_and_tuned_again(configs: Path) -> None:
    from server import profile

    (configs / tr.RECORD_FILE).write_text(json.dumps({"host": {"model": "x"}}))
    with pytest.raises(hp.ProfileError, match="run `tmr tune` again"):
        tr.read_record(configs)
    fits, why = profile.status(configs)
    assert not fits and "unreadable" in why  # `tmr tune --if-stale` measures again


def test_a_repository_without_a_text_front_has_nothing_to_time(tmp_path: Path) -> None:
    """The tuner measures text fronts only (docs/families.md): a repository of the other
    families is refused with why, not a crash inside the measurement."""
    repo = tmp_path / "repository"
    shutil.copytree(DEFAULT_REPOSITORY / "digits", repo / "digits", symlinks=True)
    assert text_models(repo) == []
    with pytest.raises(hp.ProfileError, match=r"nothing to time in .*text_embedding fronts"):
        check_tunable(repo, text_models(repo))
