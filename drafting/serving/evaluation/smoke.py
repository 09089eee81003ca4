"""Load smoke test: start the engine with the draft, send a few greedy requests, judge what comes back.

It ends the class "passes the doctor, fails at serving". The same launch code as the launch stage (render,
checks, start, wait for /health_generate; SGLang where it runs, eyas's reference engine elsewhere), then:

    server_died          the server exited or logged a fatal line (the lines that explain it are reported:
                         e.g. SGLang's scheduler traceback `expected mat1 and mat2 to have the same dtype`)
    acceptance_too_low   acceptance (meta_info spec_accept_length, or completion_tokens / spec_verify_ct)
                         under `min_accept_length` (1.05): the silent-drop signature, draft weights probably
                         not loaded (names SGLang drops) or the wrong --speculative-algorithm
    outputs_diverged     a greedy output leaves the no-speculation baseline's at a position that is not a
                         numerical near-tie (drafting.serving.evaluation.divergence)
    requests_failed, not_ready, launch_refused    as named

`eyas doctor DRAFT --target T --serve` runs it; the benchmark sweep runs it on each server right after it is
ready and before any measurement (SweepSmoke).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from contract.params.launch import LaunchParams
from contract.reasons import TerminationReason
from drafting.context import StageContext, StageError
from drafting.serving.evaluation.divergence import Divergence, TargetScorer, classify
from drafting.serving.launch.checks import prepare_launch
from drafting.serving.launch.lifecycle import LiveServer, checked_launch, host_facts, launched_server
from drafting.serving.launch.model_configs import read_config
from drafting.serving.launch.server_process import ServerDied
from drafting.userfiles import check_model_folder

MIN_ACCEPT_LENGTH = 1.05
_DEATH_WAIT_S = 15.0
_QUOTED_LINES = 40
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")
PROMPT_TEXTS = (
    "The quick brown fox jumps over the lazy dog because",
    "def fibonacci(n):\n    ",
    "Write a short note explaining why the sky is blue.",
    "w1 w2 w3 w4 w5 w6 w7 w8",
    "Once upon a time, in a small village by the sea,",
    "List three prime numbers greater than ten:",
    "SELECT name FROM users WHERE",
    "In 1969 the first humans landed on",
)
VERDICT_REASONS = {
    "server_died": TerminationReason.SERVER_DIED,
    "not_ready": TerminationReason.TIMEOUT,
    "launch_refused": TerminationReason.LAUNCH_CHECK_FAILED,
    "requests_failed": TerminationReason.STAGE_ERROR,
    "acceptance_too_low": TerminationReason.CHECKPOINT_INVALID,
    "outputs_diverged": TerminationReason.RELEASE_GATE_FAILED,
}


@dataclass(frozen=True)
class SmokeOptions:
    prompts: int = 4
    max_new_tokens: int = 32
    min_accept_length: float = MIN_ACCEPT_LENGTH
    request_timeout_s: float = 300.0
    enforce_checks: bool = True  # False: log the launch checks' errors and start anyway (fault reproduction)
    scorer_device: str = (
        "auto"  # where the target is scored for a divergence ("cpu" while a server holds GPUs)
    )


@dataclass
class Answer:
    output_ids: list[int] = field(default_factory=list)
    completion_tokens: int = 0
    spec_verify_ct: int | None = None
    spec_accept_length: float | None = None
    error: str | None = None


@dataclass
class SmokeReport:
    verdict: str
    message: str
    engine: str | None = None
    accept_length: float | None = None
    min_accept_length: float = MIN_ACCEPT_LENGTH
    requests: int = 0
    divergences: list[Divergence] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    baseline: list[list[int]] | None = None  # the no-speculation outputs it compared with (not in as_dict)

    @property
    def ok(self) -> bool:
        return self.verdict == "passed"

    @property
    def reason(self) -> TerminationReason:
        return VERDICT_REASONS.get(self.verdict, TerminationReason.STAGE_ERROR)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "verdict": self.verdict,
            "message": self.message,
            "termination_reason": None if self.ok else self.reason.value,
            "engine": self.engine,
            "accept_length": self.accept_length,
            "min_accept_length": self.min_accept_length,
            "requests": self.requests,
            "near_ties": sum(d.verdict == "near_tie" for d in self.divergences),
            "real_losses": sum(d.is_real_loss for d in self.divergences),
            "divergences": [d.as_dict() for d in self.divergences if d.verdict != "identical"],
            "log_lines": self.log_lines,
            **self.details,
        }

    def raise_unless_ok(self) -> None:
        if not self.ok:
            raise StageError(f"smoke test: {self.message}", reason=self.reason, details=self.as_dict())


def smoke_prompts(model: str | Path, count: int) -> list[list[int]]:
    """Token ids of `count` short prompts: the target's tokenizer on fixed texts when the folder has one,
    else fixed ids spread over the vocabulary (as SGLang with --skip-tokenizer-init is sent)."""
    folder = Path(model)
    tokenizer = target_tokenizer(folder)
    if tokenizer is not None:
        encoded = [list(tokenizer.encode(PROMPT_TEXTS[i % len(PROMPT_TEXTS)])) for i in range(count)]
        if all(encoded):
            return encoded
    config: dict[str, Any] = read_config(str(folder)) or {}
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    vocab = int(text.get("vocab_size") or 256)
    return [[(97 * i + 31 * j + 7) % vocab for j in range(12)] for i in range(count)]


def target_tokenizer(model: str | Path) -> Any:
    """The target folder's tokenizer (as the server tokenizes `text`), None when the folder has none."""
    folder = Path(model)
    if not any((folder / name).exists() for name in _TOKENIZER_FILES):
        return None
    from drafting.ml.text_model import load_tokenizer

    check_model_folder(folder, "target folder")  # a FIFO or device among its files would hang transformers
    return load_tokenizer(folder)


def greedy_answers(url: str, prompts: Sequence[Sequence[int]], options: SmokeOptions) -> list[Answer]:
    """One greedy /generate per prompt, sequentially, by input_ids; errors are recorded, not raised."""
    answers = []
    with httpx.Client(timeout=httpx.Timeout(options.request_timeout_s, connect=5.0)) as client:
        for prompt in prompts:
            body = {
                "input_ids": list(prompt),
                "sampling_params": {
                    "temperature": 0.0,
                    "max_new_tokens": options.max_new_tokens,
                    "ignore_eos": True,
                },
            }
            answers.append(_answer(client, url.rstrip("/"), body))
    return answers


def _answer(client: httpx.Client, url: str, body: dict[str, Any]) -> Answer:
    try:
        response = client.post(f"{url}/generate", json=body)
    except httpx.HTTPError as exc:
        return Answer(error=f"{type(exc).__name__}: {exc}")
    if response.status_code != 200:
        return Answer(error=f"HTTP {response.status_code}: {response.text.strip()[:300]}")
    payload = response.json()
    meta = payload.get("meta_info") or {}
    verify = meta.get("spec_verify_ct")
    accept = meta.get("spec_accept_length")
    return Answer(
        output_ids=[int(t) for t in payload.get("output_ids") or []],
        completion_tokens=int(meta.get("completion_tokens") or 0),
        spec_verify_ct=int(verify) if isinstance(verify, int | float) else None,
        spec_accept_length=float(accept) if isinstance(accept, int | float) else None,
    )


def acceptance_of(answers: Sequence[Answer]) -> float | None:
    """Tokens per verify step over all answers: completion_tokens / spec_verify_ct (SGLang's own
    spec_accept_length per request is the same ratio); None when the server reported neither."""
    counted = [a for a in answers if a.spec_verify_ct]
    if counted:
        return round(
            sum(a.completion_tokens for a in counted) / sum(a.spec_verify_ct or 0 for a in counted), 4
        )
    lengths = [a.spec_accept_length for a in answers if a.spec_accept_length is not None]
    return round(sum(lengths) / len(lengths), 4) if lengths else None


def query_live_server(
    server: LiveServer, prompts: Sequence[Sequence[int]], options: SmokeOptions
) -> tuple[list[Answer], SmokeReport | None]:
    """Send the prompts; a failed request is followed by a look at the server: died → its log lines."""
    answers = greedy_answers(server.url, prompts, options)
    failed = [a.error for a in answers if a.error]
    deadline = time.monotonic() + (_DEATH_WAIT_S if failed else 0.0)
    while True:
        try:
            server.process.raise_if_dead()
        except ServerDied as died:
            lines = died.lines[-_QUOTED_LINES:]
            return answers, SmokeReport(
                "server_died",
                f"the server died while answering the smoke requests: {died}",
                engine=server.rendered.engine,
                requests=len(answers),
                log_lines=lines,
                details={"exit_code": died.exit_code, "pattern": died.pattern, "request_errors": failed},
            )
        if time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    if failed:
        return answers, SmokeReport(
            "requests_failed",
            f"{len(failed)} of {len(answers)} smoke request(s) failed: {failed[0]}",
            engine=server.rendered.engine,
            requests=len(answers),
            log_lines=server.process.log.tail(_QUOTED_LINES),
        )
    return answers, None


def judge(
    answers: Sequence[Answer],
    prompts: Sequence[Sequence[int]],
    baseline: Sequence[Sequence[int]] | None,
    scorer: TargetScorer | None,
    options: SmokeOptions,
    *,
    engine: str | None = None,
) -> SmokeReport:
    """Acceptance first (no baseline needed), then each output against the baseline's."""
    accept = acceptance_of(answers)
    common: dict[str, Any] = {
        "engine": engine,
        "accept_length": accept,
        "min_accept_length": options.min_accept_length,
    }
    common["requests"] = len(answers)
    if accept is None:
        message = "the server reported no speculative counters (spec_verify_ct): is speculation on?"
        return SmokeReport("acceptance_too_low", message, **common)
    if accept < options.min_accept_length:
        message = (
            f"acceptance {accept} is under {options.min_accept_length} (~1.0 accepted token per step): draft "
            "weights probably not loaded (names SGLang drops silently) / wrong algorithm (EAGLE for an "
            "EAGLE-3 draft) / a drafter that learned nothing (its train result's acc_0 near chance)"
        )
        return SmokeReport("acceptance_too_low", message, **common)
    divergences: list[Divergence] = []
    if baseline is not None and scorer is not None:
        divergences = [
            classify(i, prompts[i], baseline[i], answer.output_ids, scorer)
            for i, answer in enumerate(answers)
        ]
    losses = [d for d in divergences if d.is_real_loss]
    if losses:
        first = losses[0]
        message = (
            f"{len(losses)} output(s) diverge from the no-speculation baseline beyond a near-tie; request "
            f"{first.request} at token {first.position}: {first.note}"
        )
        return SmokeReport("outputs_diverged", message, divergences=divergences, **common)
    near = sum(d.verdict == "near_tie" for d in divergences)
    compared = (
        "" if baseline is None else f"; outputs equal the baseline's up to {near} numerical near-tie(s)"
    )
    return SmokeReport("passed", f"acceptance {accept}{compared}", divergences=divergences, **common)


def run_smoke(
    ctx: StageContext,
    launch: LaunchParams,
    options: SmokeOptions = SmokeOptions(),
    *,
    baseline: Sequence[Sequence[int]] | None = None,
    compare: bool = True,
) -> SmokeReport:
    """Launch with the draft and check it; then (unless given or not wanted) the baseline without it."""
    if launch.draft is None:
        raise ValueError("the smoke test needs a draft")
    prompts = smoke_prompts(launch.model, options.prompts)
    shaped = launch.depth or launch.num_steps
    spec = launch.model_copy(update={"dry_run": False, **({} if shaped else {"depth": 3})})
    answers, report, engine = _serve_and_query(ctx, spec, prompts, options)
    if report is not None:
        return report
    preliminary = judge(answers, prompts, None, None, options, engine=engine)
    if not preliminary.ok or not compare:
        return preliminary
    if baseline is None:
        unset = ("draft", "depth", "num_steps", "eagle_topk", "num_draft_tokens", "algorithm")
        plain = launch.model_copy(update={**dict.fromkeys(unset), "dry_run": False})
        base_answers, base_report, _ = _serve_and_query(ctx, plain, prompts, options)
        if base_report is not None:
            base_report.message = f"the no-speculation baseline failed: {base_report.message}"
            return base_report
        baseline = [a.output_ids for a in base_answers]
    scorer = TargetScorer(launch.model, device=options.scorer_device)
    report = judge(answers, prompts, baseline, scorer, options, engine=engine)
    report.baseline = [list(ids) for ids in baseline]
    return report


def _serve_and_query(
    ctx: StageContext, spec: LaunchParams, prompts: Sequence[Sequence[int]], options: SmokeOptions
) -> tuple[list[Answer], SmokeReport | None, str | None]:
    try:
        rendered = checked_launch(ctx, spec) if options.enforce_checks else _unenforced(ctx, spec)
        with launched_server(ctx, spec, rendered) as server:
            answers, report = query_live_server(server, prompts, options)
            return answers, report, rendered.engine
    except StageError as failed:
        verdict = {
            TerminationReason.SERVER_DIED: "server_died",
            TerminationReason.TIMEOUT: "not_ready",
            TerminationReason.LAUNCH_CHECK_FAILED: "launch_refused",
        }.get(failed.reason, "requests_failed")
        lines = list(failed.details.get("log") or [])[-_QUOTED_LINES:]
        return [], SmokeReport(verdict, failed.message.split("\n", 1)[0], log_lines=lines), None


def _unenforced(ctx: StageContext, spec: LaunchParams) -> Any:
    rendered = prepare_launch(spec, host=host_facts(ctx.gpus), gpus=ctx.gpus)
    for finding in rendered.findings:
        ctx.log(
            f"launch check {finding}{' (not enforced: smoke test)' if finding in rendered.errors else ''}"
        )
    return rendered


@dataclass
class SweepSmoke:
    """The smoke check inside a benchmark sweep: the baseline server gives the reference outputs, each
    speculative server is checked right after it is ready, before anything is measured."""

    model: str
    options: SmokeOptions
    prompts: list[list[int]] = field(default_factory=list)
    baseline: list[list[int]] | None = None
    # one target for every config's judging (and the sweep's output judge:
    # drafting/serving/benchmark/sweep.py), loaded on the first divergence: an 8B target in float32 is ~32 GB
    # and a minute to load
    scorer: TargetScorer | None = None

    def __post_init__(self) -> None:
        if not self.prompts:
            self.prompts = smoke_prompts(self.model, self.options.prompts)

    def check(
        self, ctx: StageContext, server: LiveServer, depth: int | None, *, config: str | None = None
    ) -> None:
        """`config` names a sweep configuration ("5,4,8"): a tree is more than its depth."""
        answers, report = query_live_server(server, self.prompts, self.options)
        if report is None and depth is None:
            self.baseline = [a.output_ids for a in answers]
            ctx.log(f"smoke: baseline answered {len(answers)} greedy request(s)")
            return
        if report is None:
            if self.scorer is None:
                self.scorer = TargetScorer(self.model, device=self.options.scorer_device)
            report = judge(
                answers, self.prompts, self.baseline, self.scorer, self.options, engine=server.rendered.engine
            )
        ctx.sink.emit({"type": "smoke", "depth": depth, "config": config, **report.as_dict()})
        name = "baseline" if depth is None else (f"config {config}" if config else f"depth {depth}")
        ctx.log(f"smoke ({name}): {report.verdict}: {report.message}")
        report.raise_unless_ok()

    def release(self) -> None:
        """Drop the loaded target (its float32 copy can be tens of GB of host memory)."""
        if self.scorer is not None:
            self.scorer.release()
