"""Answer every conversation with the served target, `concurrency` requests in flight, and append each
finished record to the output.

One asyncio loop: a feeder walks the prompt set (skipping records a previous run wrote) and then the
self-prompt attempts, and puts them on a bounded queue; `concurrency` workers each own one connection and
take a conversation at a time. A conversation's turns go one after another, each rendered with the answers
regenerated so far, so a later turn is answered given what the target itself said before. Everything runs
on the loop's thread: the tally and the writer need no lock. A stop request (the cancel event) cancels the
workers between writes; whole records written so far stay, and a resumed run redoes the rest.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from drafting.generation.client import Completion, RequestRefused, Sampling, complete, new_client
from drafting.generation.inputs import Conversation, Rejected
from drafting.generation.output import DurableWriter, Existing, self_key
from drafting.generation.self_prompts import SelfPromptPlan, joined
from drafting.generation.tally import Tally
from drafting.generation.template import TemplateFacts, encode
from drafting.prompting.chat import render_messages
from drafting.prompting.records import Message, RecordError

_CANCEL_POLL_S = 0.1
_SELF_WAIT_S = 0.02
_YIELD_EVERY = 1000  # skipped records between yields to the loop, so workers keep sending while it scans


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Cancelled(Exception):
    """The stop request arrived; the output holds whole records only."""


@dataclass(frozen=True)
class SelfAttempt:
    index: int


@dataclass(frozen=True)
class RunSettings:
    url: str
    answer: Sampling
    user_turn: Sampling | None  # self prompts' sampling; None without self prompts
    seed: int
    concurrency: int
    timeout_s: float
    drop_truncated: bool = False  # a record with an answer that hit max_new_tokens is dropped, not written


def user_turn(tokenizer: Any, opener: str, opener_ids: list[int] | None, asked: Completion) -> str:
    """A self-written user turn: what the target wrote, after the opener when there was one. The opener's
    tokens and the target's are decoded together where both are known: decoded alone, a continuation can
    lose the space that its first token carries (a word-piece tokenizer's, or a sentencepiece '▁')."""
    if opener and opener_ids is not None and asked.output_ids is not None:
        return str(tokenizer.decode([*opener_ids, *asked.output_ids], skip_special_tokens=True))
    return joined(opener, asked.text)


def turn_seed(base: int, key: str, turn: int) -> int:
    """A request's sampling seed from the job's seed, the record and the turn: the same record gets the same
    seed whatever the order, concurrency or resume (turn −1: a self prompt's user turn)."""
    digest = hashlib.sha256(f"{base}\x00{key}\x00{turn}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1  # SGLang's sampling_seed is a signed int64


class Generation:
    def __init__(
        self,
        tokenizer: Any,
        facts: TemplateFacts,
        settings: RunSettings,
        writer: DurableWriter,
        existing: Existing,
        *,
        cancel: threading.Event,
        on_progress: Callable[[Tally], None] = lambda _tally: None,
    ) -> None:
        self.tokenizer, self.facts, self.settings = tokenizer, facts, settings
        self.writer, self.existing, self.cancel = writer, existing, cancel
        self.on_progress = on_progress
        self.tally = Tally()
        # the user-turn prefix's tokens, once: every self-prompt attempt starts with them
        self.prefix_ids = encode(tokenizer, facts.user_prefix) if facts.user_prefix is not None else []

    def run(self, conversations: Iterable[Conversation | Rejected], plan: SelfPromptPlan | None) -> Tally:
        """Raises Cancelled on a stop request, EngineUnavailable when the server stops answering. Runs its own
        event loop; called from a thread that already runs one (an async caller), on a thread of its own."""
        if not _loop_running():
            asyncio.run(self._main(conversations, plan))
            return self.tally
        with ThreadPoolExecutor(1, thread_name_prefix="generation") as pool:
            pool.submit(asyncio.run, self._main(conversations, plan)).result()
        return self.tally

    async def _main(
        self, conversations: Iterable[Conversation | Rejected], plan: SelfPromptPlan | None
    ) -> None:
        queue: asyncio.Queue[Conversation | SelfAttempt | None] = asyncio.Queue(self.settings.concurrency * 2)
        work = [asyncio.create_task(self._feed(queue, conversations, plan))]
        work += [asyncio.create_task(self._worker(queue, plan)) for _ in range(self.settings.concurrency)]
        watcher = asyncio.create_task(self._watch_cancel())
        try:
            pending = set(work)
            while pending:
                done, _ = await asyncio.wait({*pending, watcher}, return_when=asyncio.FIRST_COMPLETED)
                if watcher in done:
                    raise Cancelled()
                for task in done:
                    task.result()  # re-raises a worker's failure
                pending -= done
        finally:
            for task in [*work, watcher]:
                task.cancel()
            await asyncio.gather(*work, watcher, return_exceptions=True)

    async def _watch_cancel(self) -> None:
        while not self.cancel.is_set():
            await asyncio.sleep(_CANCEL_POLL_S)

    async def _feed(
        self,
        queue: asyncio.Queue[Conversation | SelfAttempt | None],
        conversations: Iterable[Conversation | Rejected],
        plan: SelfPromptPlan | None,
    ) -> None:
        tally = self.tally
        for number, item in enumerate(conversations):
            tally.records_read += 1
            if isinstance(item, Rejected):
                tally.drop(item.reason, item.detail, where=f"line {item.line}")
                self._settled_prompt()
            elif item.key in self.existing.keys:
                tally.skipped_done += 1
                self._settled_prompt()
            else:
                await queue.put(item)
            if number % _YIELD_EVERY == 0:
                await asyncio.sleep(0)
        if plan is not None:
            await self._feed_self(queue, plan)
        for _ in range(self.settings.concurrency):
            await queue.put(None)

    async def _feed_self(
        self, queue: asyncio.Queue[Conversation | SelfAttempt | None], plan: SelfPromptPlan
    ) -> None:
        """Attempts while more user turns are wanted: no more in flight than still missing, so the run stops
        at `count` without sampling prompts it would throw away."""
        index = plan.first_index
        while plan.attempted < plan.params.attempts:
            if not plan.more_wanted:
                if plan.in_flight == 0:
                    return
                await asyncio.sleep(_SELF_WAIT_S)
                continue
            plan.attempted += 1
            plan.in_flight += 1
            self.tally.self_attempts += 1
            await queue.put(SelfAttempt(index))
            index += 1

    async def _worker(
        self, queue: asyncio.Queue[Conversation | SelfAttempt | None], plan: SelfPromptPlan | None
    ) -> None:
        async with new_client(self.settings.timeout_s) as client:
            while (item := await queue.get()) is not None:
                if isinstance(item, SelfAttempt):
                    assert plan is not None
                    await self._self_prompt(client, item, plan)
                else:
                    await self._answer(client, item)
                    self._settled_prompt()

    def _settled_prompt(self) -> None:
        self.tally.prompts_finished += 1
        self.on_progress(self.tally)

    async def _self_prompt(
        self, client: httpx.AsyncClient, attempt: SelfAttempt, plan: SelfPromptPlan
    ) -> None:
        key = self_key(attempt.index)
        try:
            assert self.facts.user_prefix is not None  # the stage checks both before a run with self prompts
            assert self.settings.user_turn is not None
            opener = plan.opener(attempt.index)
            prefix = self.prefix_ids
            ids = encode(self.tokenizer, self.facts.user_prefix + opener) if opener else prefix
            seed = turn_seed(self.settings.seed, key, -1)
            stops = self.facts.user_stop_ids
            asked = await self._request(client, ids, self.settings.user_turn, seed, stops, where=key)
            if asked is None:
                return
            opened = ids[len(prefix) :] if ids[: len(prefix)] == prefix else None
            reason, text = plan.judge(asked, opener, user_turn(self.tokenizer, opener, opened, asked))
            if reason is not None:
                self.tally.drop(reason, text, where=key)
                return
            conversation = Conversation(key, ({"role": "user", "content": text},), "self_prompts")
            if await self._answer(client, conversation):
                plan.kept += 1
                self.tally.self_written += 1
                if opener:
                    self.tally.self_openers[opener] += 1
                self.on_progress(self.tally)
        finally:
            plan.in_flight -= 1

    async def _answer(self, client: httpx.AsyncClient, conversation: Conversation) -> bool:
        """Every user turn answered in order, then the record written; False when it was dropped."""
        messages: list[Message] = []
        finishes: list[str] = []
        tokens: list[int] = []
        for message in conversation.messages:
            messages.append(dict(message))
            if message["role"] != "user":
                continue
            try:
                prompt = render_messages(self.tokenizer, messages)
            except RecordError as error:
                return self._dropped(conversation, error.reason, error.detail)
            seed = turn_seed(self.settings.seed, conversation.key, len(finishes))
            ids = encode(self.tokenizer, prompt)
            stops = self.facts.stop_ids
            answer = await self._request(
                client, ids, self.settings.answer, seed, stops, where=_where(conversation)
            )
            if answer is None:
                return False
            if answer.finish not in ("stop", "length"):
                return self._dropped(conversation, "aborted", f"finish reason {answer.finish}")
            if not answer.text.strip():
                return self._dropped(conversation, "empty_answer", f"turn {len(finishes) + 1}: no text")
            if answer.finish == "length" and self.settings.drop_truncated:
                limit, tail = self.settings.answer.max_new_tokens, answer.text[-60:]
                why = f"turn {len(finishes) + 1}: the answer hit max_new_tokens ({limit}): {tail!r}"
                return self._dropped(conversation, "answer_truncated", why)
            messages.append({"role": "assistant", "content": answer.text})
            finishes.append(answer.finish)
            tokens.append(answer.completion_tokens)
        self._write(conversation, messages, finishes, tokens)
        return True

    async def _request(
        self,
        client: httpx.AsyncClient,
        ids: list[int],
        sampling: Sampling,
        seed: int,
        stops: frozenset[int],
        *,
        where: str,
    ) -> Completion | None:
        started = self.tally.request_started()
        try:
            completion = await complete(client, self.settings.url, ids, sampling, seed=seed, stop_ids=stops)
        except RequestRefused as refused:
            self.tally.drop("request_refused", str(refused), where=where)
            return None
        finally:
            self.tally.request_ended(started)
        self.tally.answered(completion)
        return completion

    def _dropped(self, conversation: Conversation, reason: str, detail: str) -> bool:
        self.tally.drop(reason, detail, where=_where(conversation))
        return False

    def _write(
        self, conversation: Conversation, messages: list[Message], finishes: list[str], tokens: list[int]
    ) -> None:
        truncated = "length" in finishes
        record: dict[str, Any] = {"id": conversation.key, "messages": messages}
        if conversation.category is not None:
            record["category"] = conversation.category
        record["generation"] = {
            "source": conversation.source,
            "finish": finishes,
            "completion_tokens": tokens,
            "truncated": truncated,
        }
        self.writer.write(record)
        self.tally.written += 1
        self.tally.truncated += truncated


def _where(conversation: Conversation) -> str:
    return f"line {conversation.line}" if conversation.line is not None else conversation.key
