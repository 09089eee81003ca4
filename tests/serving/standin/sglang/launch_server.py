"""Stands in for `python -m sglang.launch_server` in the serving tests (real SGLang needs a GPU).

Put this folder first on PYTHONPATH. It accepts SGLang's flags, prints SGLang 0.5.x's log lines, and serves
/health_generate with 503 while "loading" and 200 once "ready". SGLANG_STANDIN_MODE picks the behaviour:
ready (default), oom, exit, fatal_then_hang, never_ready, die_after_ready, ignore_sigterm.
SGLANG_STANDIN_LOAD_S is the loading time (default 0.6 s).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

READY = threading.Event()


def say(text: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] {text}", flush=True)


class Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status = 200 if READY.is_set() else 503
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def die_with(lines: list[str], code: int) -> None:
    for line in lines:
        say(line)
    sys.stderr.flush()
    sys.exit(code)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    args, _ = parser.parse_known_args()
    mode = os.environ.get("SGLANG_STANDIN_MODE", "ready")
    load_s = float(os.environ.get("SGLANG_STANDIN_LOAD_S", "0.6"))
    say(f"server_args=ServerArgs(model_path=..., port={args.port}) (stand-in, mode {mode})")
    say(f"visible GPUs: CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}")
    say("Load weight begin. avail mem=79.10 GB")
    if mode == "exit":
        die_with(["Loading safetensors checkpoint shards: 0% Completed"], 3)
    if mode == "oom":
        die_with(
            [
                "Scheduler hit an exception: Traceback (most recent call last):",
                '  File "model_runner.py", line 412, in load_model',
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                "Received sigquit from a child process. It usually means the child failed.",
            ],
            1,
        )
    if mode == "fatal_then_hang":
        say("Scheduler hit an exception: Traceback (most recent call last):")
        say("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")
        time.sleep(3600)  # the hang under test
    if mode == "ignore_sigterm":
        signal.signal(signal.SIGTERM, lambda *_: say("SIGTERM ignored (stand-in)"))
    server = ThreadingHTTPServer((args.host, args.port), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    time.sleep(load_s)  # the load time under test
    say(
        "Load weight end. elapsed=0.52 s, type=LlamaForCausalLMEagle3, avail mem=78.90 GB, mem usage=0.20 GB."
    )
    if mode == "never_ready":
        time.sleep(3600)  # the hang under test
    READY.set()
    say("The server is fired up and ready to roll!")
    for step in range(10**6):
        accept = 1.5 + (step % 5) * 0.25
        say(
            "Decode batch, #running-req: 1, #token: 100, token usage: 0.00, "
            f"accept len: {accept:.2f}, accept rate: 0.40, cuda graph: True, "
            "gen throughput (token/s): 123.45, #queue-req: 0"
        )
        if mode == "die_after_ready" and step == 3:
            die_with(
                ["Scheduler hit an exception: Traceback (most recent call last):", "ValueError: boom"], 1
            )
        time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
