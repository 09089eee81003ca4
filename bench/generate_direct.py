"""eyas's `generate` client beside SGLang driven directly, on a GPU host with SGLang installed: one SGLang
server, the same prompts, the same sampling and concurrency, measured in alternating rounds (E D D E …) so
drift hits both alike. "Direct" is the thinnest client there is: `/generate` with the chat template's token
ids, a semaphore for concurrency, tokens counted from meta_info. The ratio is eyas's tokens/s over
direct's. Writes OUT/generate_direct.json and OUT/sglang_direct.log.

CONVERSATIONS is a JSONL of conversations whose first user turn is the prompt (e.g. the conversations a
journey's generate step wrote, WORK/runs/<pipeline>/conversations.jsonl).

    python -m bench.generate_direct TARGET CONVERSATIONS OUT [--records 1024] [--concurrency 256]
        [--max-new-tokens 512] [--rounds 4] [--sglang-args="--attention-backend triton"]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench import _cli as cli
from drafting import proc
from drafting.generation.client import Sampling
from drafting.generation.inputs import Conversation, read_prompts
from drafting.generation.output import DurableWriter, prepare_output
from drafting.generation.runner import Generation, RunSettings
from drafting.generation.template import encode, load_chat_tokenizer, template_facts
from drafting.prompting.chat import render_messages
from drafting.serving.launch.host_checks import free_port

READY_S = 300.0


def launch(target: str, port: int, extra: list[str], out: Path) -> subprocess.Popen[bytes]:
    """SGLang serving `target` on `port`, ready once /health_generate answers (log: OUT/sglang_direct.log)."""
    command = [sys.executable, "-m", "sglang.launch_server", "--model-path", target, "--port", str(port)]
    server = proc.spawn([*command, "--mem-fraction-static", "0.6", *extra], output=out / "sglang_direct.log")
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health_generate", timeout=5).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        if server.poll() is not None:
            raise SystemExit("SGLang exited: see sglang_direct.log")
        time.sleep(1)
    proc.terminate_group(server.pid, grace_s=30, popen=server)
    raise SystemExit(f"SGLang not ready in {READY_S:.0f} s: see sglang_direct.log")


def eyas_round(
    tokenizer: Any, conversations: list[Conversation], args: argparse.Namespace, out: Path
) -> dict[str, Any]:
    path = out / "eyas_round.jsonl"
    path.unlink(missing_ok=True)
    settings = RunSettings(
        url=f"http://127.0.0.1:{args.port}",
        answer=Sampling(0.0, 1.0, args.max_new_tokens),
        user_turn=None,
        seed=0,
        concurrency=args.concurrency,
        timeout_s=600,
    )
    generation = Generation(
        tokenizer,
        template_facts(tokenizer),
        settings,
        DurableWriter(path),
        prepare_output(path, resume=False),
        cancel=threading.Event(),
    )
    began = time.monotonic()
    tally = generation.run(conversations, None)
    generation.writer.close()
    wall = time.monotonic() - began
    return {
        "client": "eyas",
        "tokens": tally.generated_tokens,
        "wall_s": wall,
        "tok_s": tally.generated_tokens / wall,
    }


async def _direct(ids: list[list[int]], stop: list[int], args: argparse.Namespace) -> int:
    gate = asyncio.Semaphore(args.concurrency)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{args.port}", timeout=600) as client:

        async def one(prompt: list[int]) -> int:
            async with gate:
                sampling = {"temperature": 0.0, "max_new_tokens": args.max_new_tokens, "stop_token_ids": stop}
                answer = await client.post(
                    "/generate", json={"input_ids": prompt, "sampling_params": sampling}
                )
                answer.raise_for_status()
                return int(answer.json()["meta_info"]["completion_tokens"])

        return sum(await asyncio.gather(*(one(p) for p in ids)))


def direct_round(ids: list[list[int]], stop: list[int], args: argparse.Namespace) -> dict[str, Any]:
    began = time.monotonic()
    tokens = asyncio.run(_direct(ids, stop, args))
    wall = time.monotonic() - began
    return {"client": "direct", "tokens": tokens, "wall_s": wall, "tok_s": tokens / wall}


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("target", help="the target model's folder")
    parser.add_argument("conversations", type=Path, help="JSONL of conversations: their first user turns")
    parser.add_argument("out", type=Path)
    parser.add_argument("--records", type=int, default=1024)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--sglang-args", default="", help='extra arguments of the SGLang launch (--sglang-args="--x y")'
    )
    args = parser.parse_args()
    args.port = free_port()
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer = load_chat_tokenizer(args.target)
    facts = template_facts(tokenizer)
    conversations = [
        c
        for c in read_prompts(args.conversations, multi_turn=False, limit=args.records)
        if isinstance(c, Conversation)
    ]
    ids = [encode(tokenizer, render_messages(tokenizer, c.messages)) for c in conversations]
    stop = sorted(facts.stop_ids)
    server = launch(args.target, args.port, shlex.split(args.sglang_args), args.out)
    try:
        direct_round(ids[:64], stop, args)  # warm-up, not counted
        rounds = []
        for number in range(args.rounds):
            order = ("eyas", "direct") if number % 2 == 0 else ("direct", "eyas")
            for client in order:
                row = (
                    eyas_round(tokenizer, conversations, args, args.out)
                    if client == "eyas"
                    else direct_round(ids, stop, args)
                )
                rounds.append({"round": number, **row})
                print(json.dumps(rounds[-1]), flush=True)
    finally:
        proc.terminate_group(server.pid, grace_s=30, popen=server)
    eyas = [r["tok_s"] for r in rounds if r["client"] == "eyas"]
    direct = [r["tok_s"] for r in rounds if r["client"] == "direct"]
    summary = {
        "records": len(conversations),
        "concurrency": args.concurrency,
        "max_new_tokens": args.max_new_tokens,
        "eyas_tok_s_mean": sum(eyas) / len(eyas),
        "direct_tok_s_mean": sum(direct) / len(direct),
        "ratio": (sum(eyas) / len(eyas)) / (sum(direct) / len(direct)),
        "rounds": rounds,
    }
    (args.out / "generate_direct.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "rounds"}), flush=True)


if __name__ == "__main__":
    main()
