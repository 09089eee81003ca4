"""The SGLang engine path end to end with a stand-in for `python -m sglang.launch_server`.

Real SGLang needs a GPU and cannot run here; the stand-in (tests/serving/standin) accepts the same argv,
prints SGLang's log lines and serves /health_generate 503 then 200, or dies the ways SGLang dies.
"""

from __future__ import annotations

import time

import psutil
import pytest

from contract.params.launch import LaunchParams
from contract.reasons import TerminationReason
from drafting.context import StageCancelled, StageError
from drafting.stages import launch as launch_stage
from tests.conftest import free_port
from tests.serving.conftest import RecordingContext, start_stage
from testsupport.tiny_pair import TinyPair

pytestmark = pytest.mark.usefixtures("standin_on_path")


def sglang_spec(pair: TinyPair, mode: str = "ready", **fields: object) -> LaunchParams:
    base: dict[str, object] = {
        "engine": "sglang",
        "model": str(pair.target),
        "draft": str(pair.draft),
        "depth": 4,
        "max_running_requests": 8,
        "port": free_port(),
        "env": {"SGLANG_STANDIN_MODE": mode},
        "ready_timeout_s": 30,
        "stop_grace_s": 5,
    }
    return LaunchParams.model_validate({**base, **fields})


def gpu_ctx(ctx: RecordingContext) -> RecordingContext:
    ctx.gpus = (0,)
    return ctx


def server_pid(ctx: RecordingContext) -> int:
    pids = {e["pid"] for e in ctx.recording.of_type("server") if e["pid"]}
    assert len(pids) == 1
    return pids.pop()


def assert_gone(pid: int) -> None:
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def run_to_failure(ctx: RecordingContext, params: LaunchParams) -> StageError:
    with pytest.raises(StageError) as caught:
        launch_stage.run(ctx, params)
    return caught.value


def test_ready_server_streams_its_log_reports_acceptance_and_stops(
    ctx: RecordingContext, tiny_pair: TinyPair
) -> None:
    stage = start_stage(launch_stage.run, gpu_ctx(ctx), sglang_spec(tiny_pair))
    stage.wait_for(lambda: any(e.get("accept_len") for e in ctx.recording.of_type("server")))
    assert ctx.server_states()[:2] == ["starting", "ready"]
    ready = ctx.recording.of_type("server")[1]
    assert ready["argv"][1:3] == ["-m", "sglang.launch_server"]
    assert "--speculative-num-draft-tokens" in ready["argv"]
    assert ready["gpus"] == [0]
    outcome = stage.stop()
    assert ctx.server_states()[-2:] == ["stopping", "stopped"]
    assert any("The server is fired up and ready to roll!" in line for line in ctx.lines)
    assert any("CUDA_VISIBLE_DEVICES='0'" in line for line in ctx.lines), (
        "the server sees the job's GPUs only"
    )
    assert any(line.endswith("#queue-req: 0") and "accept len:" in line for line in ctx.lines)
    result = outcome["result"]
    assert 1.5 <= result["last_accept_len"] <= 2.5
    assert_gone(server_pid(ctx))


def test_dry_run_renders_and_checks_without_starting(ctx: RecordingContext, tiny_pair: TinyPair) -> None:
    result = launch_stage.run(gpu_ctx(ctx), sglang_spec(tiny_pair, dry_run=True))
    assert result["dry_run"] is True
    assert result["ok"] is True
    assert "--speculative-algorithm" in result["argv"]
    assert ctx.recording.of_type("server") == []


def test_a_failing_check_stops_the_launch_before_anything_starts(
    ctx: RecordingContext, tiny_pair: TinyPair
) -> None:
    params = sglang_spec(tiny_pair, extra_args=["--num-speculative-tokens", "16"])
    failure = run_to_failure(gpu_ctx(ctx), params)
    assert failure.reason is TerminationReason.LAUNCH_CHECK_FAILED
    assert "--num-speculative-tokens" in failure.message
    assert ctx.recording.of_type("server") == []


def test_out_of_memory_at_start_up_is_reported_with_the_lines_that_explain_it(
    ctx: RecordingContext, tiny_pair: TinyPair
) -> None:
    failure = run_to_failure(gpu_ctx(ctx), sglang_spec(tiny_pair, "oom"))
    assert failure.reason is TerminationReason.SERVER_DIED
    assert "CUDA out of memory" in failure.message
    assert any("Scheduler hit an exception" in line for line in failure.details["log"])
    assert ctx.server_states() == ["starting", "failed"]
    assert_gone(server_pid(ctx))


def test_a_silent_exit_is_reported_with_its_code_and_last_lines(
    ctx: RecordingContext, tiny_pair: TinyPair
) -> None:
    failure = run_to_failure(gpu_ctx(ctx), sglang_spec(tiny_pair, "exit"))
    assert failure.reason is TerminationReason.SERVER_DIED
    assert failure.details["exit_code"] == 3
    assert any("Loading safetensors checkpoint shards" in line for line in failure.details["log"])


def test_a_fatal_line_from_a_server_that_hangs_ends_it(ctx: RecordingContext, tiny_pair: TinyPair) -> None:
    failure = run_to_failure(gpu_ctx(ctx), sglang_spec(tiny_pair, "fatal_then_hang"))
    assert failure.reason is TerminationReason.SERVER_DIED
    assert failure.details["pattern"] == "scheduler_exception"
    assert any("Not enough memory" in line for line in failure.details["log"])
    assert_gone(server_pid(ctx))


def test_never_ready_hits_the_deadline_and_is_stopped(ctx: RecordingContext, tiny_pair: TinyPair) -> None:
    failure = run_to_failure(gpu_ctx(ctx), sglang_spec(tiny_pair, "never_ready", ready_timeout_s=2))
    assert failure.reason is TerminationReason.TIMEOUT
    assert "Load weight end" in failure.message
    assert_gone(server_pid(ctx))


def test_a_death_while_serving_fails_the_job(ctx: RecordingContext, tiny_pair: TinyPair) -> None:
    failure = run_to_failure(gpu_ctx(ctx), sglang_spec(tiny_pair, "die_after_ready"))
    assert failure.reason is TerminationReason.SERVER_DIED
    assert "while serving" in failure.message
    assert "ready" in ctx.server_states()
    assert ctx.server_states()[-1] == "stopped"


def test_cancel_before_ready_stops_the_server(ctx: RecordingContext, tiny_pair: TinyPair) -> None:
    stage = start_stage(launch_stage.run, gpu_ctx(ctx), sglang_spec(tiny_pair, "never_ready"))
    stage.wait_for(lambda: any(e["pid"] for e in ctx.recording.of_type("server")))
    outcome = stage.stop()
    assert isinstance(outcome["error"], StageCancelled)
    assert_gone(server_pid(ctx))


def test_a_server_ignoring_sigterm_is_killed_after_the_grace_period(
    ctx: RecordingContext, tiny_pair: TinyPair
) -> None:
    stage = start_stage(
        launch_stage.run, gpu_ctx(ctx), sglang_spec(tiny_pair, "ignore_sigterm", stop_grace_s=1)
    )
    stage.wait_for(lambda: "ready" in ctx.server_states())
    started = time.monotonic()
    outcome = stage.stop()
    assert time.monotonic() - started >= 1.0
    assert outcome["result"]["exit_code"] == -9
    assert any("SIGTERM ignored" in line for line in ctx.lines)
    assert_gone(server_pid(ctx))
