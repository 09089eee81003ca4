"""launch: render and check an SGLang (or reference engine) launch, start it, serve until stopped.

Every check runs before the model loads; the server's own output is this job's log; a stop (cancel) ends
the server's process group (SIGTERM, SIGKILL after the grace period) and the stage returns normally.
"""

from __future__ import annotations

from typing import Any

from contract.params.launch import LaunchParams
from drafting.context import StageContext
from drafting.serving.launch.lifecycle import checked_launch, launched_server, serve_until_cancelled


def run(ctx: StageContext, params: LaunchParams) -> dict[str, Any]:
    rendered = checked_launch(ctx, params)
    if params.dry_run:
        return {"dry_run": True, **rendered.as_dict()}
    ctx.log(f"starting {rendered.engine} server: {' '.join(rendered.argv)}")
    with launched_server(ctx, params, rendered) as server:
        ctx.log(f"server ready at {server.url} after {server.ready_after_s:.1f} s (pid {server.process.pid})")
        ctx.progress(1.0, f"serving at {server.url}")
        serve_until_cancelled(ctx, server)
        ctx.log("stop requested: stopping the server")
    log = server.process.log
    return {
        "engine": rendered.engine,
        "url": server.url,
        "argv": rendered.argv,
        "pid": server.process.pid,
        "ready_after_s": round(server.ready_after_s, 2),
        "last_accept_len": log.accept_len,
        "exit_code": server.process.result.exit_code if server.process.result else None,
        "findings": [f.to_dict() for f in rendered.findings],
        "cuda_graphs": rendered.cuda_graphs,
    }
