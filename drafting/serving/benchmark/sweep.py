"""Config sweep: a no-speculation baseline against each speculative config, in repeated, interleaved rounds.

Host drift (clocks, thermals, a noisy neighbour) must hit baseline and speculative runs alike, so the
baseline server stays up for the whole sweep beside one speculative server at a time, and each config is
measured at each concurrency in `repeats` rounds; a round sends the prompts in blocks of `concurrency`
requests to both servers, the side that goes first alternating from block to block (paired_rounds.py), so
each request's speculative run is paired with the same request's baseline run. The rows give the paired
speedup with a 95 % interval over requests (paired_speedup.py) and the release gate judges its lower bound
at the gate's concurrency, or calls the sweep inconclusive (sweep_gate.py). Where two servers do not fit
(or interleave is false) each server is measured alone, rounds back to back, request i of a config's round
paired with request i of the baseline's, and the result says `interleaved: false` and why.

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

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from contract.params.benchmark import BenchmarkParams, SpecConfig
from contract.params.launch import LaunchParams
from contract.reasons import TerminationReason
from drafting.context import StageContext, StageError
from drafting.serving.benchmark import sweep_servers as servers
from drafting.serving.benchmark.benchmarking import BenchmarkRun, load_options, measure_batch, warm_up
from drafting.serving.benchmark.cost_profile import CostProfile, annotate, profile_run
from drafting.serving.benchmark.load_client import LoadOptions
from drafting.serving.benchmark.paired_rounds import BASELINE, SPECULATIVE, measure_paired_round
from drafting.serving.benchmark.sweep_gate import best_config, release_gate
from drafting.serving.benchmark.sweep_judge import PromptIds, SweepJudge
from drafting.serving.benchmark.sweep_report import (
    BASELINE_LABEL,
    ConfigRounds,
    baseline_row,
    config_row,
    format_table,
    judge_outputs,
)
from drafting.serving.benchmark.sweep_speed import concurrency_summary
from drafting.serving.evaluation.divergence import TargetScorer
from drafting.serving.evaluation.smoke import SmokeOptions, SweepSmoke
from drafting.serving.launch.lifecycle import (
    LiveServer,
    checked_launch,
    host_facts,
    launched_server,
    raise_if_died,
)
from drafting.serving.launch.render import resolve_engine
from drafting.serving.prompts import Prompt

__all__ = ["format_table", "release_gate", "run_sweep"]


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
    levels = params.sweep_concurrencies()
    ctx.log(
        f"sweep of {len(configs)} config(s) × {params.repeats} round(s) at concurrency "
        f"{', '.join(map(str, levels))}; {layout.reason}"
    )
    cuda_graphs = servers.preflight(ctx, params, configs, layout)
    sweep = _Sweep(ctx, params, prompts, layout)
    if params.mode == "profile":
        return profile_run(ctx, params, configs, sweep, {"engine": engine, "cuda_graphs": cuda_graphs})
    try:
        if layout.interleaved:
            measured = sweep.interleaved(configs, free_before=servers.smallest_free_mib(readings))
        else:
            measured = sweep.one_server_at_a_time(configs)
    except StageError as exc:
        exc.details.setdefault(
            "rows_measured", [sweep.row(config_levels) for config_levels in sweep.measured]
        )
        raise
    finally:
        sweep.release()
    at_gate = [rounds for levels in measured for rounds in levels if rounds.concurrency == params.concurrency]
    baseline_runs = [run for rounds in at_gate for run in rounds.baseline]
    unique_baseline = list({id(run): run for run in baseline_runs}.values())
    rows = [baseline_row(unique_baseline, params.concurrency), *(sweep.row(levels) for levels in measured)]
    profile = sweep.profile.as_dict() if params.profile else None
    if profile is not None:
        annotate(rows, profile, params.accept_lengths)
    gate = release_gate(rows, params.chosen(), params.speedup_threshold, params.max_speedup_half_width)
    by_concurrency = concurrency_summary(rows)
    for line in by_concurrency:
        ctx.log(f"speedup by concurrency: {line}")
    ctx.progress(1.0, "sweep done")
    return {
        "engine": engine,
        "rows": rows,
        "gate": gate,
        "best_config": best_config(rows),
        "repeats": params.repeats,
        "concurrencies": levels,
        "gate_concurrency": params.concurrency,
        "speedup_by_concurrency": by_concurrency,
        **layout.as_dict(),
        "cuda_graphs": cuda_graphs,
        "numerics": sweep.judge.summary(),
        "cost_profile": profile,
    }


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
        self.measured: list[list[ConfigRounds]] = []  # configs done so far (one per concurrency), refused too
        self.categories = [prompt.category for prompt in prompts]
        self.levels = params.sweep_concurrencies()
        self.profile = CostProfile(params.max_new_tokens)

    def row(self, levels: list[ConfigRounds]) -> dict[str, Any]:
        """A config's row at the gate's concurrency, with every level's speedup (a refused config has one)."""
        primary = next((r for r in levels if r.concurrency == self.params.concurrency), levels[0])
        return config_row(primary, self.categories, levels if primary.rejected is None else ())

    def release(self) -> None:
        self.judge.release()  # the smoke check's scorer is the same one

    def interleaved(
        self, configs: Sequence[SpecConfig], *, free_before: float | None
    ) -> list[list[ConfigRounds]]:
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
                        levels = self._levels(config, number, len(configs), baseline, speculative)
                except ConfigRefused as refused:
                    levels = [refused.rounds]
                servers.wait_memory_back(readings)
                self._done(levels)
        servers.wait_gpus_clean(self.ctx)
        return self.measured

    def profile_only(self, configs: Sequence[SpecConfig]) -> list[dict[str, Any]]:
        """Each server alone, profiled as it starts (_server); configs refused by their smoke test are
        returned with their reports."""
        refused = []
        for number, config in enumerate([None, *configs]):
            self.ctx.check_cancelled()
            self.ctx.progress(number / (len(configs) + 1), f"{_label(config)}: launching to profile")
            spec = servers.server_spec(self.launch, config, port=self.layout.baseline_port, mem_fraction=None)
            try:
                with self._server(spec, config):
                    pass
            except ConfigRefused as exc:
                refused.append({"config": exc.rounds.config.label, **(exc.rounds.rejected or {})})
            servers.wait_gpus_clean(self.ctx)
        return refused

    def one_server_at_a_time(self, configs: Sequence[SpecConfig]) -> list[list[ConfigRounds]]:
        """Each server alone (the baseline first), its rounds back to back at each concurrency; round i of a
        config is paired with the baseline's round i at the same concurrency, request by request. Drift
        between the two is not cancelled: the result says so."""
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
                self._done([refused.rounds])
                servers.wait_gpus_clean(self.ctx)
                continue
            levels = []
            for level in self.levels:
                measured = runs[level]
                orders = [[BASELINE, SPECULATIVE] for _ in measured]
                rounds = ConfigRounds(config, level, baseline_runs[level][: len(measured)], measured, orders)
                for index in range(len(measured)):
                    self._emit_round(rounds, index, [])
                levels.append(rounds)
            self._done(levels)
        return self.measured

    def _alone(self, spec: LaunchParams, config: SpecConfig | None) -> dict[int, list[BenchmarkRun]]:
        with self._server(spec, config) as alone:
            runs: dict[int, list[BenchmarkRun]] = {}
            for level in self.levels:
                options = replace(alone.options, concurrency=level)
                runs[level] = []
                for number in range(self.params.repeats):
                    self.ctx.check_cancelled()
                    raise_if_died(alone.server)
                    runs[level].append(
                        measure_batch(alone.server.url, self.prompts, options, log=self.ctx.log)
                    )
                    self.ctx.log(
                        f"{_label(config)}: concurrency {level}, round {number + 1}: "
                        f"{runs[level][-1].summary.get('output_tok_s')} tok/s"
                    )
        servers.wait_gpus_clean(self.ctx)
        return runs

    def _levels(
        self, config: SpecConfig, number: int, total: int, baseline: Measured, speculative: Measured
    ) -> list[ConfigRounds]:
        # The baseline sat idle while this config's server loaded: warm it again, as the new one was.
        baseline.options = self._warm(baseline.server, baseline.options)
        levels = []
        steps = len(self.levels) * self.params.repeats
        for position, level in enumerate(self.levels):
            if level > len(self.prompts):
                self.ctx.log(
                    f"{config.label}: concurrency {level} asks more requests in flight than the "
                    f"{len(self.prompts)} prompts: at most {len(self.prompts)} run at once"
                )
            rounds = ConfigRounds(config, level)
            for index in range(self.params.repeats):
                self.ctx.check_cancelled()

                def alive() -> None:
                    self.ctx.check_cancelled()
                    raise_if_died(baseline.server)
                    raise_if_died(speculative.server)

                paired = measure_paired_round(
                    (baseline.server.url, baseline.options),
                    (speculative.server.url, speculative.options),
                    self.prompts,
                    concurrency=level,
                    round_index=index,
                    log=self.ctx.log,
                    between_blocks=alive,
                )
                rounds.baseline.append(paired.baseline)
                rounds.speculative.append(paired.speculative)
                rounds.orders.append(paired.order)
                self._emit_round(rounds, index, paired.blocks)
                done = position * self.params.repeats + index + 1
                self.ctx.progress(
                    (number + done / steps) / total, f"{config.label}: concurrency {level}, round {index + 1}"
                )
            levels.append(rounds)
        return levels

    def _emit_round(self, rounds: ConfigRounds, index: int, batches: list[dict[str, Any]]) -> None:
        row = rounds.round_rows()[index]
        self.ctx.sink.emit(
            {
                "type": "benchmark_round",
                "config": rounds.config.label,
                "concurrency": rounds.concurrency,
                **row,
                "interleaved": self.layout.interleaved,
                "batches": batches,
            }
        )
        self.ctx.log(
            f"{rounds.config.label} at concurrency {rounds.concurrency}, round {row['round']} "
            f"({' then '.join(row['order'])} first): baseline "
            f"{row['baseline_tok_s']} tok/s, speculative {row['speculative_tok_s']} tok/s, "
            f"speedup {row['speedup']}"
        )

    def _done(self, levels: list[ConfigRounds]) -> None:
        """Judge a config's outputs over every level's rounds and report its row; it joins `measured`."""
        self.measured.append(levels)
        first = levels[0]
        if first.rejected is not None:
            self.ctx.log(f"{first.config.label}: refused by its smoke test, not measured; the sweep goes on")
            self.ctx.sink.emit({"type": "benchmark_row", **self.row(levels)})
            return
        every = ConfigRounds(
            first.config,
            first.concurrency,
            [run for level in levels for run in level.baseline],
            [run for level in levels for run in level.speculative],
        )
        judged = judge_outputs(every, self.judge)
        for level in levels:
            level.judged = judged
        counts = ", ".join(f"{verdict} {n}" for verdict, n in judged.counts().items())
        how = (
            f"compared bit for bit: {judged.strict_reason}"
            if judged.strict_reason
            else "judged by the target"
        )
        self.ctx.log(f"{first.config.label}: outputs against the baseline's: {counts} ({how})")
        self.ctx.sink.emit({"type": "benchmark_row", **self.row(levels)})

    @contextmanager
    def _server(self, spec: LaunchParams, config: SpecConfig | None) -> Iterator[Measured]:
        """Check, start, smoke-test (params.smoke) and warm one server; always stopped on the way out."""
        rendered = checked_launch(self.ctx, spec)
        with launched_server(self.ctx, spec, rendered) as server:
            if self.smoke is not None:
                self._smoke_check(server, config)
            self.ctx.log(f"{_label(config)}: ready after {server.ready_after_s:.1f} s at {server.url}")
            measured = Measured(server, self._warm(server, load_options(self.params)))
            if self.params.profile or self.params.mode == "profile":
                label = config.label if config else None
                log = self.ctx.log
                self.profile.measure(server.url, self.prompts, measured.options, self.levels, label, log=log)
            yield measured

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
