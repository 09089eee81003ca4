"""generate: regenerate a prompt set's assistant turns with the target itself (and, optionally, let the
target write user turns too), into the conversations file `extract` reads.

Everything that can be checked without a server is checked first (the tokenizer's chat template, the prompt
set, the output to resume); then the engine is launched as the launch stage launches it (SGLang holding the
job's GPUs, or the reference engine on the CPU), the records are generated, and the server is stopped.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from contract.params.generate import GenerateParams
from contract.reasons import TerminationReason
from drafting.context import StageCancelled, StageContext, StageError, remote_code
from drafting.generation.client import EngineUnavailable, Sampling
from drafting.generation.holdout import HeldOut, load_holdout, without_held_out
from drafting.generation.inputs import count_records, read_prompts
from drafting.generation.output import DurableWriter, Existing, OutputMismatch, prepare_output
from drafting.generation.runner import Cancelled, Generation, RunSettings
from drafting.generation.self_prompts import SelfPromptPlan
from drafting.generation.tally import Tally
from drafting.generation.template import TemplateFacts, TemplateProblem, load_chat_tokenizer, template_facts
from drafting.serving.launch.lifecycle import LiveServer, checked_launch, launched_server
from drafting.sglang_facts import DETERMINISTIC_FLAG
from drafting.stages._target import target_errors

PROGRESS_INTERVAL_S = 1.0
METRIC_INTERVAL_S = 5.0
_LOG_LINES = 40


def run(ctx: StageContext, params: GenerateParams) -> dict[str, Any]:
    started = time.monotonic()
    tokenizer, facts = _chat_template(ctx, params)
    existing = _prepared_output(ctx, params)
    total = _prompt_total(params)
    held_out = _held_out(params)
    plan = _self_prompt_plan(params, existing, held_out)
    rendered = checked_launch(ctx, params.engine)
    ctx.log(f"generate: starting the {rendered.engine} engine for {params.target}")
    with launched_server(ctx, params.engine, rendered) as server:
        progress = _Progress(ctx, total + (plan.needed if plan else 0))
        generation = Generation(
            tokenizer,
            facts,
            _settings(params, server.url),
            DurableWriter(Path(params.output)),
            existing,
            cancel=ctx.cancel,
            on_progress=progress.update,
        )
        tally = _generate(ctx, params, generation, plan, server, held_out)
    progress.finish(tally)
    result = {
        "output": params.output,
        "output_records": existing.records + tally.written,
        "engine": rendered.engine,
        "url": rendered.url,
        **tally.as_dict(),
        "resumed": {"kept": existing.records, "discarded_partial_bytes": existing.discarded_bytes},
        "sampling": _sampling_summary(params, rendered.engine),
        "stop_token_ids": sorted(facts.stop_ids),
        "wall_s": round(time.monotonic() - started, 3),
    }
    ctx.artifact("conversations", params.output, {"records": result["output_records"]})
    ctx.log(_summary(result))
    return result


def _chat_template(ctx: StageContext, params: GenerateParams) -> tuple[Any, TemplateFacts]:
    """The target's tokenizer, trusted with its folder's code when the engine is (its trust_remote_code)."""
    trust = remote_code(ctx, params.engine.trust_remote_code)
    try:
        with target_errors():
            tokenizer = load_chat_tokenizer(params.target, trust_remote_code=trust)
    except TemplateProblem as problem:
        raise StageError(str(problem), reason=TerminationReason.BAD_INPUT) from problem
    facts = template_facts(tokenizer)
    if params.self_prompts is not None and facts.user_prefix is None:
        raise StageError(
            "self_prompts needs the chat template's user-turn prefix, and rendering a user turn with this "
            "template did not show one; give prompts instead",
            reason=TerminationReason.BAD_INPUT,
        )
    return tokenizer, facts


def _prepared_output(ctx: StageContext, params: GenerateParams) -> Existing:
    try:
        existing = prepare_output(Path(params.output), resume=params.resume)
    except OutputMismatch as mismatch:
        raise StageError(str(mismatch), reason=TerminationReason.DATA_MISMATCH) from mismatch
    if existing.records or existing.discarded_bytes:
        ctx.log(
            f"generate: resuming {params.output}: {existing.records} record(s) kept"
            + (
                f", a half-written last line ({existing.discarded_bytes} bytes) cut"
                if existing.discarded_bytes
                else ""
            )
        )
    return existing


def _prompt_total(params: GenerateParams) -> int:
    """Lines of the prompt set (capped by limit): read now, so a bad path fails before any server starts."""
    if params.prompts is None:
        return 0
    lines = count_records(Path(params.prompts))
    return min(lines, params.limit) if params.limit is not None else lines


def _held_out(params: GenerateParams) -> HeldOut:
    """The evaluation sets to keep out of training, read before any server starts."""
    try:
        return load_holdout(params.holdout_prompts)
    except (OSError, ValueError) as problem:
        raise StageError(f"holdout_prompts: {problem}", reason=TerminationReason.BAD_INPUT) from problem


def _self_prompt_plan(params: GenerateParams, existing: Existing, held_out: HeldOut) -> SelfPromptPlan | None:
    if params.self_prompts is None:
        return None
    plan = SelfPromptPlan.resumed(params.self_prompts, existing.self_prompts, existing.next_self_index)
    plan.held_out = held_out.turns
    return plan


def _settings(params: GenerateParams, url: str) -> RunSettings:
    self_prompts = params.self_prompts
    user_turn = (
        Sampling(self_prompts.temperature, self_prompts.top_p, self_prompts.max_new_tokens)
        if self_prompts is not None
        else None
    )
    return RunSettings(
        url=url,
        answer=Sampling(params.temperature, params.top_p, params.max_new_tokens),
        user_turn=user_turn,
        seed=params.seed,
        concurrency=params.concurrency,
        timeout_s=params.request_timeout_s,
        drop_truncated=params.truncated_answers == "drop",
    )


def _generate(
    ctx: StageContext,
    params: GenerateParams,
    generation: Generation,
    plan: SelfPromptPlan | None,
    server: LiveServer,
    held_out: HeldOut,
) -> Tally:
    prompts = (
        without_held_out(
            read_prompts(Path(params.prompts), multi_turn=params.multi_turn, limit=params.limit), held_out
        )
        if params.prompts is not None
        else []
    )
    try:
        return generation.run(prompts, plan)
    except Cancelled:
        ctx.log(f"generate: stopped on request; {generation.tally.written} record(s) written this run")
        raise StageCancelled() from None
    except EngineUnavailable as gone:
        lines = server.process.log.tail(_LOG_LINES)
        raise StageError(
            f"the {server.rendered.engine} server stopped answering: {gone}; the records written so far are "
            "kept, and a resumed job generates the rest. Last server lines:\n" + "\n".join(lines),
            reason=TerminationReason.SERVER_DIED,
            details={"log": lines, "written": generation.tally.written},
        ) from gone
    finally:
        generation.writer.close()


class _Progress:
    """Progress (records settled / total, tokens/s) at most once a second; the tokens/s metric every 5 s."""

    def __init__(self, ctx: StageContext, total: int) -> None:
        self.ctx, self.total = ctx, max(total, 1)
        self.reported_at = self.metric_at = 0.0

    def update(self, tally: Tally) -> None:
        now = time.monotonic()
        done = tally.prompts_finished + tally.self_written
        if now - self.reported_at < PROGRESS_INTERVAL_S and done < self.total:
            return
        self.reported_at = now
        rate = tally.tokens_per_s
        self.ctx.progress(done / self.total, f"{done}/{self.total} records, {rate:.1f} tok/s")
        if now - self.metric_at >= METRIC_INTERVAL_S:
            self.metric_at = now
            self.ctx.metric("generate_tokens_per_s", rate, step=done)

    def finish(self, tally: Tally) -> None:
        """The last word: done (self prompts may stop short of count when max_attempts runs out)."""
        done = tally.prompts_finished + tally.self_written
        self.ctx.progress(1.0, f"{tally.written} records written, {tally.tokens_per_s:.1f} tok/s")
        self.ctx.metric("generate_tokens_per_s", tally.tokens_per_s, step=done)


def _sampling_summary(params: GenerateParams, engine: str) -> dict[str, Any]:
    deterministic = engine == "reference" or DETERMINISTIC_FLAG in params.engine.extra_args
    return {
        "temperature": params.temperature,
        "top_p": params.top_p,
        "max_new_tokens": params.max_new_tokens,
        "seed": params.seed,
        # SGLang honours a request's sampling_seed only under --enable-deterministic-inference
        "seed_honoured": deterministic or params.temperature == 0,
    }


def _summary(result: dict[str, Any]) -> str:
    records = result["records"]
    dropped = ", ".join(f"{reason} {count}" for reason, count in result["dropped"].items()) or "none"
    return (
        f"generate: {records['written']} written ({records['truncated']} truncated), "
        f"{records['skipped_done']} already done, dropped: {dropped}; {result['generated_tokens']} tokens "
        f"at {result['tokens_per_s']} tok/s ({result['engine']} engine), finish {result['finish_reasons']}"
    )
