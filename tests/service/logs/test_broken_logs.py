"""Logs that are not a complete log of a run -- binary junk, a log cut inside its argument or
configuration dump, no iteration lines, only warm-up iterations, a garbled iteration line -- raise
LogParseError naming the file and the line, and say what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.logs import LogParseError, decode_log, parse_log

DATA = Path(__file__).parent / "data"


def _text(name: str) -> str:
    return (DATA / name).read_text()


def _cut_before(text: str, marker: str, keep: int = 0) -> str:
    """The text up to the line holding ``marker`` (plus ``keep`` lines after it)."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if marker in line)
    return "\n".join(lines[:at + keep]) + "\n"


def _error(text: str, name: str = "run.log", fmt: str = "auto") -> LogParseError:
    with pytest.raises(LogParseError) as caught:
        parse_log(text, name=name, format=fmt)
    return caught.value


def test_binary_junk_names_its_line() -> None:
    err = _error("iteration 1/ 10 |\nok\n\x7fELF\x02\x01\x01\x00\x00garbage\n")
    assert (err.file, err.line) == ("run.log", 3)
    assert str(err).startswith("run.log:3: binary data (character 0x7f at column 1)")
    with pytest.raises(LogParseError, match=r"^gz.log:1: byte 0x8b is not UTF-8 text"):
        decode_log(b"\x1f\x8b\x08\x00\x00\x00\x00\x00", "gz.log")


def test_a_log_cut_inside_megatrons_argument_dump() -> None:
    text = _cut_before(_text("megatron_llama3-8b_tp2_pp2_dp4.log"), "  num_layers ....")
    err = _error(text)
    assert err.line == len(text.splitlines())
    assert "ends inside the argument dump that starts at line 4" in err.problem
    assert "end of arguments" in err.problem and "from the start of the run" in err.fix


def test_a_log_cut_inside_deepspeeds_configuration_dump() -> None:
    text = _cut_before(_text("deepspeed_zero2_bf16_16gpu.log"), "train_batch_size ....")
    err = _error(text)
    assert "ends inside the DeepSpeedEngine configuration dump that starts at line 9" in err.problem
    assert err.line == len(text.splitlines())


def test_a_log_cut_inside_torchtitans_configuration() -> None:
    text = _cut_before(_text("torchtitan_llama3-70b_tp8_fp8_2026.log"), '"parallelism"')
    err = _error(text)
    assert err.problem == "the log ends inside the configuration that starts at line 2"


@pytest.mark.parametrize(("name", "marker"), [("megatron_llama3-8b_tp2_pp2_dp4.log", "iteration        1/"),
                                              ("megatron-deepspeed_gpt-3.6b_zero1_tp2_pp2.log", "iteration       10/"),
                                              ("deepspeed_zero2_bf16_16gpu.log", "step=10, skipped"),
                                              ("torchtitan_llama3-8b_fsdp8_2025.log", "step:  1")])
def test_no_iteration_lines(name: str, marker: str) -> None:
    text = _cut_before(_text(name), marker)
    err = _error(text, name)
    assert (err.file, err.line) == (name, len(text.splitlines()))
    assert err.problem.startswith("no iteration lines")


def test_only_warm_up_iterations() -> None:
    text = _cut_before(_text("megatron_llama3-8b_tp2_pp2_dp4.log"), "iteration       20/")
    err = _error(text)
    assert err.problem.startswith("only warm-up iterations: 2 logged iteration line(s), the first 2 are warm-up")
    assert err.line == text.splitlines().index(next(li for li in text.splitlines() if "iteration       10/" in li)) + 1


def test_a_garbled_or_cut_iteration_line_names_its_line() -> None:
    lines = _text("megatron_gpt-1.7b_tp2_fp16.log").splitlines()
    at = next(i for i, line in enumerate(lines) if "iteration       50/" in line)
    lines[at] = lines[at][:lines[at].index("elapsed time") + 40]  # cut mid-field, as a killed job leaves it
    err = _error("\n".join(lines))
    assert err.line == at + 1 and "cut off or garbled" in err.problem
    lines[at] = lines[at].replace("elapsed time per iteration (ms): 1", "elapsed time per iteration (ms): x1")
    lines[at] += " | global batch size: 64 |"
    assert _error("\n".join(lines)).line == at + 1
    titan = _text("torchtitan_llama3-8b_fsdp8_2025.log").splitlines()
    at = next(i for i, line in enumerate(titan) if "step: 30" in line)
    titan[at] = titan[at][:titan[at].index("tps")]
    assert _error("\n".join(titan)).line == at + 1


def test_text_of_no_known_framework_and_an_empty_file() -> None:
    err = _error("hello\nworld\n", "notes.txt")
    assert (err.file, err.line) == ("notes.txt", None)
    assert str(err).startswith("notes.txt: no line of a known training log")
    assert _error("\n \n", "empty.log").problem == "the file is empty"


def test_a_format_that_does_not_match_finds_no_iterations() -> None:
    err = _error(_text("torchtitan_llama3-8b_fsdp8_2025.log"), "titan.log", fmt="megatron")
    assert err.problem.startswith("no iteration lines")
