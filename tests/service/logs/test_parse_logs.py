"""Each framework's logs (tests/service/logs/data, written in the formats of the frameworks' own
source: Megatron-LM's training_log and _print_args, DeepSpeed's config dump, ThroughputTimer and
pipeline engine, torchtitan's metrics logger) read back into the fields the run had: degrees,
batch, ZeRO, recompute, precision, shape, the steady-state iteration time, peak memory, OOM."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

from service.logs import FORMATS, LogParseError, ParsedLog, detect_format, parse_log, run_request, warmup_lines

DATA = Path(__file__).parent / "data"
MIB, GIB = 2**20, 2**30

LLAMA3_8B = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336, "vocab": 128256,
             "activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope", "bias": False,
             "tied_embeddings": False, "dropout": False, "attention": "flash"}  # Transformer Engine's
GPT_1_7B = {"layers": 24, "hidden": 2304, "heads": 24, "kv_heads": 24, "ffn": 9216, "vocab": 51200,
            "activation": "gelu", "norm": "layernorm", "position_embedding": "learned", "bias": True,
            "tied_embeddings": True, "dropout": True}
NO_SHAPE = dict.fromkeys(("layers", "hidden", "heads", "kv_heads", "ffn", "vocab"))

# file -> the fields the run had (what the fixture's lines say), the steady iteration time in seconds
# (None: out of memory) and the peak memory in bytes.
EXPECTED: dict[str, dict[str, Any]] = {
    "megatron_llama3-8b_tp2_pp2_dp4.log": {
        "format": "megatron", "world_size": 16, "tp": 2, "pp": 2, "vp": 1, "cp": 1, "dp": 4, "sp": True,
        "tp_comm_overlap": True, "placement": "tp-cp-ep-dp-pp",
        "global_batch": 128, "micro_batch": 1, "zero_stage": 1, "recompute": "selective", "precision": "bf16",
        "seq_len": 8192, **LLAMA3_8B,
        # lines 20..100 (1 and 10 are warm-up): the median of 7902.4 7897.4 7920.8 7899.8 7910.0 7904.6 7894.2
        # 7917.6 7901.2 ms
        "iteration_time_s": 7.9024, "steady_iterations": 9, "iterations": 11,
        "peak_memory_bytes": 38714.37 * MIB, "memory_kind": "max allocated", "oom": False},
    "megatron_gpt-1.7b_tp2_fp16.log": {
        "format": "megatron", "world_size": 8, "tp": 2, "pp": 1, "dp": 4, "sp": False, "global_batch": 64,
        "micro_batch": 4, "zero_stage": 0, "recompute": "full", "precision": "fp16", "seq_len": 2048, **GPT_1_7B,
        "attention": "standard",  # Megatron of 2022: no FlashAttention
        # 20 lines, 2 of warm-up; the line of iteration 150 skipped an iteration (loss-scale overflow)
        "iteration_time_s": statistics.median([1008.4, 1011.9, 1009.7, 1013.1, 1010.2, 1007.6, 1011.0, 1009.1, 1012.4,
                                               1008.8, 1010.5, 1009.9, 1011.7, 1010.8, 1008.1, 1012.9, 1009.4]) / 1000,
        "steady_iterations": 17, "iterations": 20, "peak_memory_bytes": None, "oom": False},
    "megatron_llama2-7b_dp8_oom.log": {
        "format": "megatron", "world_size": 8, "tp": 1, "dp": 8, "global_batch": 256, "micro_batch": 4,
        "placement": "tp-cp-ep-pp-dp",
        "zero_stage": 1, "recompute": "none", "precision": "bf16", "seq_len": 4096, "kv_heads": 32, "ffn": 11008,
        "iteration_time_s": None, "iterations": 0, "oom": True, "oom_line": 46},
    "megatron-deepspeed_gpt-3.6b_zero1_tp2_pp2.log": {
        "format": "megatron-deepspeed", "world_size": 16, "tp": 2, "pp": 2, "dp": 4, "global_batch": 256,
        "micro_batch": 4, "zero_stage": 1, "recompute": "none", "precision": "bf16", "seq_len": 2048, "layers": 30,
        "hidden": 3072, "heads": 32, "kv_heads": 32, "ffn": 12288, "vocab": 51200, "activation": "gelu",
        "iteration_time_s": (6472.8 + 6473.6) / 2 / 1000, "steady_iterations": 10, "iterations": 12,
        "peak_memory_bytes": 32178.52 * MIB, "oom": False},
    "megatron-deepspeed_llama2-7b_zero3_offload.log": {
        "format": "megatron-deepspeed", "world_size": 8, "tp": 1, "pp": 1, "dp": 8, "global_batch": 64,
        "micro_batch": 2, "zero_stage": 3, "offload_optimizer": "cpu", "recompute": "full", "precision": "fp16",
        "seq_len": 4096, "layers": 32, "hidden": 4096, "kv_heads": 32, "ffn": 11008, "vocab": 32000,
        "activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope", "bias": False,
        "tied_embeddings": False, "dropout": False,
        # 6 lines: 2 of warm-up, the 5th skipped an iteration
        "iteration_time_s": 11.8746, "steady_iterations": 3, "iterations": 6, "peak_memory_bytes": None},
    "megatron-deepspeed_gpt-1.7b_zero2_oom.log": {
        "format": "megatron-deepspeed", "world_size": 8, "dp": 8, "global_batch": 512, "micro_batch": 16,
        "zero_stage": 2, **GPT_1_7B, "attention": "flash", "iterations": 2, "iteration_time_s": None,
        "peak_memory_bytes": 77102.93 * MIB, "oom": True, "oom_line": 111},
    "deepspeed_zero2_bf16_16gpu.log": {
        "format": "deepspeed", "world_size": 16, "tp": 1, "pp": 1, "dp": 16, "global_batch": 256, "micro_batch": 4,
        "zero_stage": 2, "offload_optimizer": None, "precision": "bf16", "recompute": None, **NO_SHAPE,
        # train_batch_size / CurrSamplesPerSec of the steps after the first two logged
        "iteration_time_s": statistics.median(256 / c for c in (62.04, 61.55, 62.31, 61.92, 62.10, 61.76, 62.48,
                                                                 61.69)),
        "steady_iterations": 8, "iterations": 10, "peak_memory_bytes": 42.2 * GIB, "memory_kind": "max allocated"},
    "deepspeed_pipe_pp4_fp16.log": {
        "format": "deepspeed", "world_size": 8, "pp": 4, "dp": 2, "global_batch": 32, "micro_batch": 2,
        "zero_stage": 1, "precision": "fp16", "recompute": "full",
        # steps 5 and 10 are warm-up, step 40 followed an overflow
        "iteration_time_s": 1.1903, "steady_iterations": 7, "iterations": 10, "peak_memory_bytes": None},
    "deepspeed_zero3_offload_timers.log": {
        "format": "deepspeed", "world_size": 8, "dp": 8, "global_batch": 64, "micro_batch": 8, "zero_stage": 3,
        "offload_optimizer": "cpu", "offload_param": None, "precision": "bf16",
        # fwd + bwd + step of the 3rd to 6th steps
        "iteration_time_s": statistics.median([330.2 + 1044.9 + 1785.4, 331.1 + 1047.3 + 1788.8,
                                               329.7 + 1049.8 + 1791.6, 332.4 + 1046.2 + 1786.9]) / 1000,
        "steady_iterations": 4, "iterations": 6},
    "deepspeed_zero1_oom.log": {
        "format": "deepspeed", "world_size": 8, "dp": 8, "global_batch": 512, "micro_batch": 64, "zero_stage": 1,
        "oom": True, "oom_line": 59, "iteration_time_s": None},
    "torchtitan_llama3-8b_fsdp8_2025.log": {
        "format": "torchtitan", "world_size": 8, "tp": 1, "pp": 1, "cp": 1, "dp": 8, "sp": False,
        "global_batch": 16, "micro_batch": 2, "zero_stage": 3, "recompute": "selective", "precision": "bf16",
        "seq_len": 8192, "model_name": "llama3 8B",
        # global batch x seq / (tps x GPUs), tps of steps 20..100
        "iteration_time_s": 16 * 8192 / (7458.0 * 8), "steady_iterations": 9, "iterations": 11,
        "peak_memory_bytes": 62.03 * GIB, "memory_kind": "max reserved"},
    "torchtitan_llama3-70b_tp8_fp8_2026.log": {
        "format": "torchtitan", "world_size": 32, "tp": 8, "dp": 4, "sp": True, "global_batch": 16,
        "micro_batch": 2, "zero_stage": 3, "recompute": "full", "precision": "fp8", "seq_len": 8192,
        "model_name": "llama3 70B",
        # steps 1 and 5 are warm-up, step 25's loss is NaN: the median of 572 571 575 573 570 574 568 572 tps
        "iteration_time_s": 16 * 8192 / (572.0 * 32), "steady_iterations": 8, "iterations": 11,
        "peak_memory_bytes": 58.20 * GIB},
    "torchtitan_llama3-8b_tp2_2024_oom.log": {
        "format": "torchtitan", "world_size": 8, "tp": 2, "dp": 4, "sp": True, "global_batch": 32, "micro_batch": 8,
        "zero_stage": 3, "recompute": "none", "model_name": "llama3 8B", "iterations": 1, "iteration_time_s": None,
        "peak_memory_bytes": 74.92 * GIB, "oom": True, "oom_line": 14},
}


@pytest.fixture(scope="module")
def parsed() -> dict[str, ParsedLog]:
    return {name: parse_log((DATA / name).read_text(), name=name) for name in EXPECTED}


def test_every_fixture_is_listed_and_each_framework_has_three_with_an_oom() -> None:
    assert {p.name for p in DATA.glob("*.log")} == set(EXPECTED)
    for fmt in FORMATS:
        logs = [e for e in EXPECTED.values() if e["format"] == fmt]
        assert len(logs) >= 3 and any(e.get("oom") for e in logs), fmt


@pytest.mark.parametrize("name", EXPECTED)
def test_a_log_round_trips_the_fields_of_its_run(name: str, parsed: dict[str, ParsedLog]) -> None:
    log, want = parsed[name], EXPECTED[name]
    got: dict[str, Any] = {}
    for key, value in want.items():
        got[key] = len(log.iterations) if key == "iterations" else getattr(log, key)
        if isinstance(value, float):
            assert got[key] == pytest.approx(value, rel=1e-9), key
    assert {k: v for k, v in got.items() if not isinstance(want[k], float)} == \
        {k: v for k, v in want.items() if not isinstance(v, float)}
    assert log.oom is bool(want.get("oom"))
    assert detect_format((DATA / name).read_text().splitlines(), name) == want["format"]


def test_the_warm_up_rule_is_max_2_or_10_percent_of_the_logged_lines() -> None:
    assert [warmup_lines(n) for n in (1, 3, 20, 21, 50, 200)] == [2, 2, 2, 3, 5, 20]


def test_a_format_given_is_used_and_an_unknown_one_is_refused(parsed: dict[str, ParsedLog]) -> None:
    name = "megatron-deepspeed_gpt-3.6b_zero1_tp2_pp2.log"
    as_megatron = parse_log((DATA / name).read_text(), name=name, format="megatron")
    assert as_megatron.format == "megatron"
    assert as_megatron.zero_stage == parsed[name].zero_stage == 1  # Megatron-DeepSpeed's --zero-stage argument
    with pytest.raises(ValueError, match="unknown log format 'nemo'"):
        parse_log("x", name="a.log", format="nemo")


def test_a_parsed_log_becomes_the_body_post_runs_takes(parsed: dict[str, ParsedLog]) -> None:
    megatron = run_request(parsed["megatron_llama3-8b_tp2_pp2_dp4.log"], cluster={"preset": "dgx-h100"})
    assert megatron["cluster"] == {"preset": "dgx-h100", "nodes": 2}  # 16 GPUs on 8-GPU nodes
    assert megatron["framework"] == "megatron" and megatron["training"] == {"global_batch": 128, "precision": "bf16"}
    assert megatron["config"] == {"dp": 4, "tp": 2, "pp": 2, "vp": 1, "cp": 1, "sp": True, "tp_comm_overlap": True,
                                  "placement": "tp-cp-ep-dp-pp", "ep": 1, "etp": 1, "micro_batch": 1,
                                  "zero_stage": 1, "recompute": "selective"}
    assert megatron["model"]["shape"] == {"name": "custom-32x4096", "seq_len": 8192, **LLAMA3_8B}
    assert megatron["iteration_time_s"] == pytest.approx(7.9024) and megatron["oom"] is False
    titan = run_request(parsed["torchtitan_llama3-70b_tp8_fp8_2026.log"], cluster={"preset": "dgx-h100"})
    assert titan["model"] == {"preset": "llama3-70b", "seq_len": 8192} and titan["framework"] == "fsdp"
    assert titan["cluster"]["nodes"] == 4
    gpt = {"preset": "gpt-1.7b"}
    oom = run_request(parsed["deepspeed_zero1_oom.log"], cluster={"preset": "dgx-a100-80gb"}, model=gpt)
    assert oom["oom"] is True and "iteration_time_s" not in oom and "out of memory at line 59" in oom["notes"]
    pipe = run_request(parsed["deepspeed_pipe_pp4_fp16.log"], cluster={"preset": "dgx-h100"}, model=gpt)
    assert pipe["framework"] == "megatron-deepspeed" and pipe["config"]["pp"] == 4


def test_what_the_log_does_not_print_or_contradicts_is_refused_naming_the_file(parsed: dict[str, ParsedLog]) -> None:
    with pytest.raises(ValueError, match=r"deepspeed_zero2_bf16_16gpu.log: the log prints no complete model shape"):
        run_request(parsed["deepspeed_zero2_bf16_16gpu.log"], cluster={"preset": "dgx-h100"})
    with pytest.raises(ValueError, match=r"the run used 16 GPUs, the cluster has 1 node\(s\) of 8 GPUs.*nodes=2"):
        run_request(parsed["megatron_llama3-8b_tp2_pp2_dp4.log"], cluster={"preset": "dgx-h100", "nodes": 1})
    with pytest.raises(ValueError, match=r"the log's model is not llama2-13b: it has layers 32 \(the model has 40\)"):
        run_request(parsed["megatron_llama3-8b_tp2_pp2_dp4.log"], cluster={"preset": "dgx-h100"},
                    model={"preset": "llama2-13b"})


def test_batch_ramp_up_lines_are_not_steady_state(parsed: dict[str, ParsedLog]) -> None:
    name = "megatron_gpt-1.7b_tp2_fp16.log"
    lines = (DATA / name).read_text().splitlines()
    for i, line in enumerate(lines):  # --rampup-batch-size: iterations 30 and 40 ran 32 of the 64 sequences
        if "iteration       30/" in line or "iteration       40/" in line:
            lines[i] = line.replace("global batch size:    64", "global batch size:    32")
    ramped = parse_log("\n".join(lines), name=name)
    assert (ramped.global_batch, ramped.steady_iterations) == (64, parsed[name].steady_iterations - 2)
    assert ramped.iteration_time_s == pytest.approx(statistics.median(
        [1009.7, 1013.1, 1010.2, 1007.6, 1011.0, 1009.1, 1012.4, 1008.8, 1010.5, 1009.9, 1011.7, 1010.8, 1008.1, 1012.9,
         1009.4]) / 1000)


def test_deepspeeds_older_timer_names_and_a_train_batch_timer_give_the_same_time(parsed: dict[str, ParsedLog]) -> None:
    name = "deepspeed_zero3_offload_timers.log"
    text = (DATA / name).read_text()
    older = text.replace("| fwd: ", "| forward: ").replace("| bwd: ", "| backward: ")  # DeepSpeed 2020
    assert parse_log(older, name=name).iteration_time_s == pytest.approx(parsed[name].iteration_time_s)
    lines = [line for line in text.splitlines() if "| fwd: " not in line]
    lines += [f"[Rank 0] time (ms) | train_batch: {ms:.2f} | batch_input: 0.91" for ms in (9000.0, 3200.0, 3150.5,
                                                                                          3170.0, 3160.0)]
    assert parse_log("\n".join(lines), name=name).iteration_time_s == pytest.approx(3.160)


@pytest.mark.parametrize("prefix", ["0: ", "[default0]:", "2025-06-01T10:00:00.123456Z stdout F "])
@pytest.mark.parametrize("name", ["megatron_llama3-8b_tp2_pp2_dp4.log",
                                  "megatron-deepspeed_llama2-7b_zero3_offload.log", "deepspeed_zero2_bf16_16gpu.log",
                                  "torchtitan_llama3-70b_tp8_fp8_2026.log"])
def test_lines_behind_a_launchers_prefix_read_the_same(name: str, prefix: str, parsed: dict[str, ParsedLog]) -> None:
    """srun --label, torchrun --tee and a container log collector put their prefix before every line."""
    text = "\n".join(prefix + line for line in (DATA / name).read_text().splitlines())
    assert parse_log(text, name=name) == parsed[name]


@pytest.mark.parametrize(("arguments", "dispatcher", "overlap"), [
    ({"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
      "overlap_moe_expert_parallel_comm": True}, "flex-hybridep", True),
    ({"moe_token_dispatcher_type": "flex"}, "flex-deepep", False),  # deepep: the backend's default
    ({"moe_token_dispatcher_type": "alltoall", "moe_enable_deepep": True}, "flex-deepep", False),  # deprecated flag
    ({"moe_token_dispatcher_type": "alltoall"}, "alltoall", False),
    ({"moe_token_dispatcher_type": "allgather"}, "allgather", False),  # refused by the run's config
])
def test_a_megatron_log_keeps_its_moe_dispatcher_and_overlap(arguments: dict[str, Any], dispatcher: str,
                                                             overlap: bool) -> None:
    """Megatron's argument dump names the token dispatcher and the EP overlap; the run's config carries
    them (a dispatcher the cost model does not know is left as printed, so the config refuses it)."""
    from service.logs._megatron import fields_from_arguments

    base = {"num_experts": 8, "expert_model_parallel_size": 4, "tensor_model_parallel_size": 1}
    fields = fields_from_arguments({k: (v, i) for i, (k, v) in enumerate({**base, **arguments}.items())})
    assert (fields["moe_dispatcher"], fields["moe_a2a_overlap"]) == (dispatcher, overlap)
    dense = fields_from_arguments({"expert_model_parallel_size": (1, 0), "moe_token_dispatcher_type": ("allgather", 1)})
    assert (dense["moe_dispatcher"], dense["moe_a2a_overlap"]) == ("alltoall", False)


def test_a_log_of_a_flex_run_posts_the_dispatcher_and_a_dense_log_its_old_body(parsed: dict[str, ParsedLog]) -> None:
    import dataclasses

    log = parsed["megatron_llama3-8b_tp2_pp2_dp4.log"]
    assert "moe_dispatcher" not in run_request(log, cluster={"preset": "dgx-h100"})["config"]
    flex = dataclasses.replace(log, moe_dispatcher="flex-hybridep", moe_a2a_overlap=True)
    config = run_request(flex, cluster={"preset": "dgx-h100"})["config"]
    assert (config["moe_dispatcher"], config["moe_a2a_overlap"]) == ("flex-hybridep", True)


@pytest.mark.parametrize(("arguments", "graphs"), [
    ({"cuda_graph_impl": "full_iteration", "cuda_graph_modules": "[]"}, "full-iteration"),  # megatron-core 0.18+
    ({"cuda_graph_impl": "local", "cuda_graph_scope": "[<CudaGraphScope.full_iteration: 1>]"},
     "full-iteration"),  # 0.16-0.17: the local implementation with the full-iteration scope
    ({"cuda_graph_impl": "local", "cuda_graph_scope": "full_iteration"}, "full-iteration"),  # 0.15
    ({"enable_cuda_graph": True, "cuda_graph_scope": "full_iteration"}, "full-iteration"),  # 0.14
    ({"cuda_graph_impl": "local", "cuda_graph_scope": "full_iteration_inference"}, "local"),  # not training's
    ({"cuda_graph_impl": "local", "cuda_graph_modules": "[]"}, "local"),  # whole-layer graphs
    ({"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": "[<CudaGraphModule.attn: 1>]"},
     "transformer_engine"),
    ({"enable_cuda_graph": True, "cuda_graph_scope": "full"}, "local"),
    ({"external_cuda_graph": True}, "transformer_engine"),
    ({"cuda_graph_impl": "none", "cuda_graph_scope": "full_iteration"}, "none"),  # 0.15-0.17: no graph at all
    ({}, "none"),  # before CUDA graphs
])
def test_a_megatron_log_keeps_its_cuda_graph(arguments: dict[str, Any], graphs: str) -> None:
    """Every release's spelling of the full-iteration graph reads as it; per-layer graphs keep their
    implementation's name, which the run's config refuses rather than reading it as none."""
    from service.logs._megatron import fields_from_arguments

    base = {"tensor_model_parallel_size": 2}
    fields = fields_from_arguments({k: (v, i) for i, (k, v) in enumerate({**base, **arguments}.items())})
    assert fields["cuda_graphs"] == graphs


def _with_arguments(text: str, *entries: str) -> str:
    """A Megatron log with ``entries`` (``name value``) added to its argument dump, as _print_args writes them."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if "end of arguments" in line)
    added = [f"  {name} {'.' * (48 - len(name))} {value}" for name, value in (e.split(" ", 1) for e in entries)]
    return "\n".join([*lines[:at], *added, *lines[at:]])


def test_a_graphed_megatron_log_posts_the_graph_and_a_per_layer_one_is_refused() -> None:
    from service.request import RunIn

    name = "megatron_llama3-8b_tp2_pp2_dp4.log"
    text = (DATA / name).read_text()
    cluster = {"preset": "dgx-h100"}
    plain = run_request(parse_log(text, name=name), cluster=cluster)
    assert "cuda_graphs" not in plain["config"]  # a run without a graph posts the body it always did
    graphed = parse_log(_with_arguments(text, "cuda_graph_impl full_iteration", "cuda_graph_modules []",
                                        "check_for_nan_in_loss_and_grad False"), name=name)
    assert graphed.cuda_graphs == "full-iteration"
    body = run_request(graphed, cluster=cluster)
    assert body["config"]["cuda_graphs"] == "full-iteration"
    assert RunIn.model_validate(body).config.cuda_graphs == "full-iteration"
    older = parse_log(_with_arguments(text, "cuda_graph_impl local",
                                      "cuda_graph_scope [<CudaGraphScope.full_iteration: 1>]"), name=name)
    assert run_request(older, cluster=cluster)["config"]["cuda_graphs"] == "full-iteration"
    layered = parse_log(_with_arguments(text, "cuda_graph_impl transformer_engine"), name=name)
    assert layered.cuda_graphs == "transformer_engine"  # parsed as printed, refused as a run with the reason
    with pytest.raises(LogParseError) as err:
        run_request(layered, cluster=cluster)
    assert "per-layer CUDA graphs (cuda_graph_impl transformer_engine)" in str(err.value)
    assert "import runs with cuda_graph_impl none or full_iteration" in str(err.value)


def test_a_windowed_run_is_not_read_as_its_printed_shape_and_its_model_must_have_the_window() -> None:
    """A Megatron run with GPT-OSS's sliding window, sinks, quick-GeGLU or YaRN prints a shape the log's
    fields cannot carry: the importer asks for the model instead of importing a plain one, and refuses a
    given model that lacks (or adds) what the run had."""
    import dataclasses

    name = "megatron_llama3-8b_tp2_pp2_dp4.log"
    text = (DATA / name).read_text()
    cluster = {"preset": "dgx-h100"}
    log = parse_log(_with_arguments(text, "window_size (127, 0)", "softmax_type learnable"), name=name)
    assert log.beyond_shape == ("window", "sinks")
    with pytest.raises(LogParseError) as err:
        run_request(log, cluster=cluster)
    assert "a sliding window (--window-size), softmax sinks (--softmax-type)" in str(err.value)
    assert "give the model" in str(err.value)
    plain = run_request(parse_log(text, name=name), cluster=cluster)["model"]["shape"]
    plain.pop("seq_len", None)
    with pytest.raises(LogParseError, match=r"a sliding window \(--window-size\) \(the model has none\)"):
        run_request(log, cluster=cluster, model={"shape": plain})
    assert parse_log(_with_arguments(text, "window_size None", "softmax_type vanilla"), name=name).beyond_shape == ()
    yarn = parse_log(_with_arguments(text, "position_embedding_type yarn", "quick_geglu True"), name=name)
    assert yarn.beyond_shape == ("quick-geglu", "yarn")
    from search import model_preset
    from service.request._specs import model_shape

    windowed = model_shape(dataclasses.replace(model_preset("llama3-8b"), attention_window=128,
                                               window_skip_freq=2)).model_dump(mode="json")
    with pytest.raises(LogParseError, match=r"without a sliding window \(--window-size\) \(the model has one\)"):
        run_request(parse_log(text, name=name), cluster=cluster, model={"shape": windowed})
