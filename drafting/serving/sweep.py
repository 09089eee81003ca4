"""Config sweep: a no-speculation baseline against each speculative config, in repeated, interleaved rounds.

Host drift (clocks, thermals, a noisy neighbour) must hit baseline and speculative batches alike, so the
baseline server stays up for the whole sweep beside one speculative server at a time, and each config is
measured in `repeats` rounds of one baseline batch and one speculative batch (same prompts), the order
alternating (B S, S B, B S, …) so neither side always runs first. A round's speedup is the ratio of its
pair; the rows give the geometric mean with a 95 % interval on the log ratio (speedup_stats) and the
release gate judges the interval's lower bound.
Where two servers do not fit (or interleave is false) each server is measured alone, rounds back to back,
and the result says `interleaved: false` and why.

After a config's rounds, its greedy outputs are judged against the baseline's (SweepJudge: a divergence is
scored by the target on the CPU, while the servers hold the GPUs; `numerics` in the result says how).

A config whose outputs fail its smoke test (a real loss against the baseline's) is refused (a `rejected` row
with the smoke report) and the sweep goes on with the next one: one bad config must not throw away the
others' measurements (on the H200 a tree config's smoke failure after three measured chain configs lost all
of them). The gate then fails, naming it. A smoke failure that would repeat at every config (acceptance ~1,
a server that dies) still ends the sweep at once.
A failure that ends the sweep early still leaves the configs measured so far in the error's
`rows_measured`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from contract.params.benchmark import BenchmarkParams, SpecConfig
from contract.params.launch import LaunchParams
from contract.reasons import TerminationReason
from drafting.serving import sweep_servers as servers
from drafting.serving.benchmarking import BenchmarkRun, load_options, measure_batch, warm_up
from drafting.serving.divergence import TargetScorer
from drafting.serving.lifecycle import LiveServer, checked_launch, host_facts, launched_server, raise_if_died
from drafting.serving.load_client import LoadOptions
from drafting.serving.prompts import Prompt
from drafting.serving.render import render_launch, resolve_engine
from drafting.serving.smoke import SmokeOptions, SweepSmoke, target_tokenizer
from drafting.serving.sweep_judge import SweepJudge
from drafting.serving.sweep_report import (
    BASELINE_LABEL,
    ConfigRounds,
    baseline_row,
    best_config,
    config_row,
    format_table,
    judge_outputs,
    release_gate,
)
from drafting.stages.base import StageContext, StageError

__all__ = ["format_table", "release_gate", "run_sweep"]
BASELINE, SPECULATIVE = "baseline", "speculative"


@dataclass
class Measured:
    """A ready server and the load options it is measured with (streaming decided at its warm-up)."""

    server: LiveServer
    options: LoadOptions


def run_sweep(ctx: StageContext, params: BenchmarkParams, prompts: Sequence[Prompt]) -> dict[str, Any]:
    assert params.launch is not None
    configs = params.sweep_configs()
    engine, _ = resolve_engine(params.launch.engine, host_facts(ctx.gpus))
    readings = servers.gpu_memory(ctx.gpus)
    layout = servers.plan_layout(
        params,
        engine,
        gpu_total_mib=servers.smallest_total_mib(readings),
        weights_mib=servers.weights_mib(params.launch.model),
    )
    ctx.log(f"sweep of {len(configs)} config(s) × {params.repeats} rounds; {layout.reason}")
    cuda_graphs = _preflight(ctx, params, configs, layout)
    sweep = _Sweep(ctx, params, prompts, layout)
    try:
        if layout.interleaved:
            measured = sweep.interleaved(configs, free_before=servers.smallest_free_mib(readings))
        else:
            measured = sweep.one_server_at_a_time(configs)
    except StageError as exc:
        exc.details.setdefault("rows_measured", [sweep.row(rounds) for rounds in sweep.measured])
        raise
    finally:
        sweep.release()
    baseline_runs = [run for rounds in measured for run in rounds.baseline]
    unique_baseline = list({id(run): run for run in baseline_runs}.values())
    rows = [baseline_row(unique_baseline), *(sweep.row(rounds) for rounds in measured)]
    gate = release_gate(rows, params.chosen(), params.speedup_threshold)
    ctx.progress(1.0, "sweep done")
    return {
        "engine": engine,
        "rows": rows,
        "gate": gate,
        "best_config": best_config(rows),
        "repeats": params.repeats,
        **layout.as_dict(),
        "cuda_graphs": cuda_graphs,
        "numerics": sweep.judge.summary(),
    }


def _preflight(
    ctx: StageContext, params: BenchmarkParams, configs: Sequence[SpecConfig], layout: servers.SweepLayout
) -> dict[str, Any]:
    """Render every server of the sweep before starting any: a config the engine cannot serve (a tree on
    the reference engine) fails now, not after the configs before it were measured."""
    assert params.launch is not None
    host = host_facts(ctx.gpus)
    problems: list[str] = []
    graphs: dict[str, Any] = {}
    for config in configs:
        spec = servers.server_spec(params.launch, config, port=layout.speculative_port, mem_fraction=None)
        rendered = render_launch(spec, host=host, use_sglang_parser=False)
        graphs = rendered.cuda_graphs
        problems += [f"{config.label}: {f.code}: {f.message}" for f in rendered.errors]
    if problems:
        raise StageError(
            "sweep refused before starting anything: " + "; ".join(problems),
            reason=TerminationReason.LAUNCH_CHECK_FAILED,
            details={"problems": problems},
        )
    return graphs


class _Sweep:
    def __init__(
        self,
        ctx: StageContext,
        params: BenchmarkParams,
        prompts: Sequence[Prompt],
        layout: servers.SweepLayout,
    ) -> None:
        assert params.launch is not None
        self.ctx, self.params, self.prompts, self.layout = ctx, params, prompts, layout
        self.launch = params.launch
        model = self.launch.model
        scorer = TargetScorer(model, device="cpu")  # loaded only when a divergence needs it, then once
        self.smoke = _smoke(params, scorer)
        self.judge = SweepJudge(model, PromptIds(prompts, params.send_as, model), scorer=scorer)
        self.measured: list[ConfigRounds] = []  # configs done so far, refused ones included
        self.categories = [prompt.category for prompt in prompts]

    def row(self, rounds: ConfigRounds) -> dict[str, Any]:
        return config_row(rounds, self.categories)

    def release(self) -> None:
        self.judge.release()  # the smoke check's scorer is the same one

    def interleaved(self, configs: Sequence[SpecConfig], *, free_before: float | None) -> list[ConfigRounds]:
        layout = self.layout
        base_spec = servers.server_spec(
            self.launch, None, port=layout.baseline_port, mem_fraction=layout.share
        )
        with self._server(base_spec, None) as baseline:
            for number, config in enumerate(configs):
                self.ctx.check_cancelled()
                self.ctx.progress(number / len(configs), f"{config.label}: launching beside the baseline")
                readings = servers.gpu_memory(self.ctx.gpus)
                fraction = None
                if layout.share is not None:
                    free_now = servers.smallest_free_mib(readings)
                    fraction = servers.speculative_fraction(layout.share, free_before, free_now)
                spec = servers.server_spec(
                    self.launch, config, port=layout.speculative_port, mem_fraction=fraction
                )
                try:
                    with self._server(spec, config) as speculative:
                        rounds = self._rounds(config, number, len(configs), baseline, speculative)
                except ConfigRefused as refused:
                    rounds = refused.rounds
                servers.wait_memory_back(readings)
                self._done(rounds)
        servers.wait_gpus_clean(self.ctx)
        return self.measured

    def one_server_at_a_time(self, configs: Sequence[SpecConfig]) -> list[ConfigRounds]:
        """Each server alone (the baseline first), its rounds back to back; round i of a config is paired
        with the baseline's round i. Drift between the two is not cancelled: the result says so."""
        self.ctx.progress(0.0, f"{BASELINE_LABEL}: launching")
        base_spec = servers.server_spec(self.launch, None, port=self.layout.baseline_port, mem_fraction=None)
        baseline_runs = self._alone(base_spec, None)
        for number, config in enumerate(configs):
            self.ctx.check_cancelled()
            self.ctx.progress((number + 1) / (len(configs) + 1), f"{config.label}: launching")
            spec = servers.server_spec(self.launch, config, port=self.layout.baseline_port, mem_fraction=None)
            try:
                runs = self._alone(spec, config)
            except ConfigRefused as refused:
                self._done(refused.rounds)
                servers.wait_gpus_clean(self.ctx)
                continue
            orders = [[BASELINE, SPECULATIVE] for _ in runs]
            rounds = ConfigRounds(config, baseline_runs[: len(runs)], runs, orders)
            for index in range(len(runs)):
                self._emit_round(rounds, index, [])
            self._done(rounds)
        return self.measured

    def _alone(self, spec: LaunchParams, config: SpecConfig | None) -> list[BenchmarkRun]:
        with self._server(spec, config) as alone:
            runs = []
            for number in range(self.params.repeats):
                self.ctx.check_cancelled()
                raise_if_died(alone.server)
                runs.append(measure_batch(alone.server.url, self.prompts, alone.options, log=self.ctx.log))
                self.ctx.log(
                    f"{_label(config)}: round {number + 1}: {runs[-1].summary.get('output_tok_s')} tok/s"
                )
        servers.wait_gpus_clean(self.ctx)
        return runs

    def _rounds(
        self, config: SpecConfig, number: int, total: int, baseline: Measured, speculative: Measured
    ) -> ConfigRounds:
        # The baseline sat idle while this config's server loaded: warm it again, as the new one was.
        baseline.options = self._warm(baseline.server, baseline.options)
        rounds = ConfigRounds(config)
        for index in range(self.params.repeats):
            self.ctx.check_cancelled()
            order = [BASELINE, SPECULATIVE] if index % 2 == 0 else [SPECULATIVE, BASELINE]
            batches: list[dict[str, Any]] = []
            runs: dict[str, BenchmarkRun] = {}
            for side in order:
                measured = baseline if side == BASELINE else speculative
                raise_if_died(baseline.server)
                raise_if_died(speculative.server)
                started = time.time()
                runs[side] = measure_batch(
                    measured.server.url, self.prompts, measured.options, log=self.ctx.log
                )
                batches.append(
                    {"side": side, "url": measured.server.url, "started_at": started, "ended_at": time.time()}
                )
            rounds.baseline.append(runs[BASELINE])
            rounds.speculative.append(runs[SPECULATIVE])
            rounds.orders.append(order)
            self._emit_round(rounds, index, batches)
            self.ctx.progress(
                (number + (index + 1) / self.params.repeats) / total, f"{config.label}: round {index + 1}"
            )
        return rounds

    def _emit_round(self, rounds: ConfigRounds, index: int, batches: list[dict[str, Any]]) -> None:
        row = rounds.round_rows()[index]
        self.ctx.sink.emit(
            {
                "type": "benchmark_round",
                "config": rounds.config.label,
                **row,
                "interleaved": self.layout.interleaved,
                "batches": batches,
            }
        )
        self.ctx.log(
            f"{rounds.config.label} round {row['round']} ({' then '.join(row['order'])}): baseline "
            f"{row['baseline_tok_s']} tok/s, speculative {row['speculative_tok_s']} tok/s, "
            f"speedup {row['speedup']}"
        )

    def _done(self, rounds: ConfigRounds) -> None:
        """Judge a config's outputs and report its row; it joins `measured`."""
        self.measured.append(rounds)
        if rounds.rejected is not None:
            self.ctx.log(f"{rounds.config.label}: refused by its smoke test, not measured; the sweep goes on")
            self.ctx.sink.emit({"type": "benchmark_row", **self.row(rounds)})
            return
        judged = judge_outputs(rounds, self.judge)
        counts = ", ".join(f"{verdict} {n}" for verdict, n in judged.counts().items())
        how = (
            f"compared bit for bit: {judged.strict_reason}"
            if judged.strict_reason
            else "judged by the target"
        )
        self.ctx.log(f"{rounds.config.label}: outputs against the baseline's: {counts} ({how})")
        self.ctx.sink.emit({"type": "benchmark_row", **self.row(rounds)})

    @contextmanager
    def _server(self, spec: LaunchParams, config: SpecConfig | None) -> Iterator[Measured]:
        """Check, start, smoke-test (params.smoke) and warm one server; always stopped on the way out."""
        rendered = checked_launch(self.ctx, spec)
        with launched_server(self.ctx, spec, rendered) as server:
            if self.smoke is not None:
                self._smoke_check(server, config)
            self.ctx.log(f"{_label(config)}: ready after {server.ready_after_s:.1f} s at {server.url}")
            yield Measured(server, self._warm(server, load_options(self.params)))

    def _smoke_check(self, server: LiveServer, config: SpecConfig | None) -> None:
        """A config whose outputs diverge beyond a near-tie is refused and the sweep goes on (a lossy verify
        can be one config's: a tree's, say). Any other failure ends the sweep: the baseline's (nothing to
        compare with), or one that would repeat at every config (acceptance ~1: the draft's weights were
        not loaded; a server that dies on the draft)."""
        assert self.smoke is not None
        try:
            self.smoke.check(self.ctx, server, config.steps if config else None, config=_config(config))
        except StageError as exc:
            if config is None or exc.reason is not TerminationReason.RELEASE_GATE_FAILED:
                raise
            raise ConfigRefused(
                ConfigRounds(config, rejected=exc.details or {"message": exc.message})
            ) from exc

    def _warm(self, server: LiveServer, options: LoadOptions) -> LoadOptions:
        params = self.params
        try:
            return warm_up(
                server.url,
                self.prompts,
                options,
                warmup_requests=params.warmup_requests,
                timing=params.timing,
                log=self.ctx.log,
            )
        except RuntimeError as exc:
            raise_if_died(server)
            raise StageError(str(exc), reason=TerminationReason.SERVER_DIED) from exc


class ConfigRefused(Exception):
    """A speculative config failed its smoke test: recorded as refused, the sweep goes on."""

    def __init__(self, rounds: ConfigRounds) -> None:
        super().__init__(rounds.config.label)
        self.rounds = rounds


class PromptIds:
    """A prompt's token ids as the server got them (what a divergence is scored after): its own ids, its
    bytes under send_as input_ids (load_client.request_body), else its text through the target's tokenizer,
    as SGLang and the reference engine tokenize a `text` request. None where they cannot be known here."""

    def __init__(self, prompts: Sequence[Prompt], send_as: str, model: str) -> None:
        self.prompts, self.send_as, self.model = prompts, send_as, model
        self._tokenizer: Any = None
        self._loaded = False

    def __call__(self, index: int) -> list[int] | None:
        prompt = self.prompts[index]
        if prompt.input_ids is not None or self.send_as == "input_ids":
            return prompt.ids_or_bytes()
        tokenizer = self._load()
        if tokenizer is None or prompt.text is None:
            return None
        return list(tokenizer.encode(prompt.text))

    def _load(self) -> Any:
        if not self._loaded:
            self._loaded = True
            try:
                self._tokenizer = target_tokenizer(self.model)
            except (OSError, ValueError):  # no usable tokenizer: the divergence is compared bit for bit
                self._tokenizer = None
        return self._tokenizer


def _smoke(params: BenchmarkParams, scorer: TargetScorer) -> SweepSmoke | None:
    """The load smoke test every server of the sweep passes before it is measured (params.smoke)."""
    if not params.smoke or params.launch is None:
        return None
    options = SmokeOptions(min_accept_length=params.smoke_min_accept_length, scorer_device="cpu")
    return SweepSmoke(params.launch.model, options, scorer=scorer)


def _label(config: SpecConfig | None) -> str:
    return BASELINE_LABEL if config is None else f"config {config.label}"


def _config(config: SpecConfig | None) -> str | None:
    return config.label if config else None
