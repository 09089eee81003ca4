"""A GPU run's generated conversations, kept past the lent machine.

Generate is the journey's longest and most host-dependent step: 16,000 conversations took 824 s on the
ninth run's H200 host against ~390 s predicted from the eighth's, and the machine went back (30 s idle)
before train ended, taking everything under /tmp with it. The tenth run's machine went back between two
calls with generate 96 % done, and nothing was saved. Its output is small once compressed, so every
`real_model.py` call copies the training and held-out conversations to OUT (gzip, in parts under the
device's 16 MiB a file): whole once generate is done, and as they stand (`NAME.partial.gz.partN`) when the
call ends before that. A later call or session carries them back and starts from them (`start --carried
DIR`): a partial file is first completed by a generate job with the step's own params, resumed (generate
keeps the records there and makes only the missing ones); then the pipeline has `data` and
`held_out.conversations`, no generate step.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from e2e_pipeline import follow, job_logs
from host_probe import CpuSampler

PART_BYTES = 15 * 2**20  # the device returns files of at most 16 MiB, 8 a call
OUT_FILES = 8
REPORT_FILES = 4  # pipeline.json, job_logs.txt, serving.json, and eyas_up.log in the call that started it
# SmolLM2's 47 MB draft in 3 files rather than 4, so a call that ends after train returns it with its report
DRAFT_PART_BYTES = 16 * 2**20 - 2**16
DRAFT_WEIGHTS, DRAFT_MANIFEST = "model.safetensors", "draft_parts.json"
TRAINING, HELD_OUT = "conversations.jsonl", "held_out.jsonl"
STEPS = {"generate": TRAINING, "generate_held_out": HELD_OUT}
PARTIAL = ".partial"  # NAME.partial.gz.partN: a generate that had not ended when the call did


class GeneratedSaver:
    """Copies the pipeline's generated conversations to OUT once both generate steps have succeeded (the
    device empties OUT before every call, so each call's saver copies them again); `final`, at the call's
    end, saves what a generate step not yet done has written so far."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.saved = False

    def __call__(self, pipeline: dict[str, Any]) -> None:
        if self.saved:
            return
        outputs = _generate_jobs(pipeline)
        if not outputs or any(j["state"] != "succeeded" for j in outputs.values()):
            return
        for step, job in outputs.items():
            self._save(step, Path(job["result"]["output"]), complete=True)
        self.saved = True

    def final(self, pipeline: dict[str, Any]) -> None:
        if self.saved:
            return
        for step, job in _generate_jobs(pipeline).items():
            done = job["state"] == "succeeded"
            output = Path((job["result"] if done else job["params"])["output"])
            if output.is_file() and output.stat().st_size:
                self._save(step, output, complete=done)

    def _save(self, step: str, output: Path, *, complete: bool) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        save(output, self.out, STEPS[step], complete=complete)


def follow_saving(http: httpx.Client, pipeline_id: str, out: Path, began: float, deadline_s: float) -> None:
    """e2e_pipeline.follow, saving the generated conversations to OUT (whole when generate is done, as they
    stand at the end of the call otherwise), and the draft when the call ends between fix_keys and the
    pipeline's end; printing the host's busiest processes every minute."""
    saver, sampler = GeneratedSaver(out), CpuSampler()  # the CPU beside a slow generate (host_probe.py)

    def poll(pipeline: dict[str, Any]) -> None:
        saver(pipeline)
        sampler(pipeline)

    pipeline = follow(http, pipeline_id, out, began, deadline_s, on_poll=poll)
    saver.final(pipeline)
    keep_draft(pipeline, out)


def _generate_jobs(pipeline: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {j["pipeline_step"]: j for j in pipeline["jobs"] if j["pipeline_step"] in STEPS}


def write_parts(data: bytes, out: Path, name: str, size: int | None = None) -> list[bytes]:
    """`data` as OUT/NAME.part0, .part1, … of at most `size` (PART_BYTES) each; the parts."""
    size = size or PART_BYTES
    parts = [data[start : start + size] for start in range(0, len(data), size)]
    for index, part in enumerate(parts):
        (out / f"{name}.part{index}").write_bytes(part)
    return parts


def save(source: Path, out: Path, name: str, *, complete: bool) -> None:
    """`source` gzipped (no timestamp: the same conversations give the same bytes) to OUT/NAME.gz.partN, or
    OUT/NAME.partial.gz.partN while its generate has not ended."""
    data = source.read_bytes()
    name += "" if complete else PARTIAL
    parts = write_parts(gzip.compress(data, mtime=0), out, f"{name}.gz")
    records = data.count(b"\n")  # whole lines: a half-written tail is cut when generate resumes
    state = "" if complete else f" (not done: {records} records so far)"
    print(f"{source} to OUT{state}: {name}.gz.part0..{len(parts) - 1}", flush=True)


def save_draft(draft: Path, out: Path) -> None:
    """A drafter folder's weights in parts and a manifest (its config, the sha256 of the whole and of each
    part) that `unpack_draft` checks them against."""
    out.mkdir(parents=True, exist_ok=True)
    weights = (draft / DRAFT_WEIGHTS).read_bytes()
    count = -(-len(weights) // DRAFT_PART_BYTES)
    if count > OUT_FILES - REPORT_FILES - 1:  # beside the manifest and the report's files
        raise ValueError(f"{len(weights)} bytes make {count} parts: more than one call returns")
    parts = write_parts(weights, out, DRAFT_WEIGHTS, DRAFT_PART_BYTES)
    manifest = {
        "source": str(draft),
        "bytes": len(weights),
        "sha256": hashlib.sha256(weights).hexdigest(),
        "parts": [hashlib.sha256(part).hexdigest() for part in parts],
        "config": json.loads((draft / "config.json").read_text()),
    }
    (out / DRAFT_MANIFEST).write_text(json.dumps(manifest, indent=2))
    print(f"{len(parts)} parts of {draft}/{DRAFT_WEIGHTS} ({len(weights)} bytes)", flush=True)


def unpack_draft(carried: Path, dest: Path) -> Path | None:
    """The draft `save_draft` wrote to CARRIED, whole again in DEST (config.json, model.safetensors), every
    part and the whole checked against the manifest; None when CARRIED holds no draft."""
    if not (carried / DRAFT_MANIFEST).is_file():
        return None
    manifest = json.loads((carried / DRAFT_MANIFEST).read_text())
    parts = [carried / f"{DRAFT_WEIGHTS}.part{i}" for i in range(len(manifest["parts"]))]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise SystemExit(f"--carried {carried}: the draft lacks {', '.join(missing)}")
    data = [p.read_bytes() for p in parts]
    damaged = [p.name for p, d, s in zip(parts, data, manifest["parts"], strict=True) if _sha(d) != s]
    weights = b"".join(data)
    if damaged or _sha(weights) != manifest["sha256"]:
        raise SystemExit(f"--carried {carried}: draft parts do not match the manifest: {damaged or 'whole'}")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / DRAFT_WEIGHTS).write_bytes(weights)
    (dest / "config.json").write_text(json.dumps(manifest["config"], indent=2))
    return dest


def _records(path: Path) -> int:
    with path.open("rb") as lines:
        return sum(1 for _ in lines)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def keep_draft(pipeline: dict[str, Any], out: Path) -> None:
    """At a call's end: the SGLang draft to OUT once fix_keys has made it and serving has not finished, so
    a new machine can serve it (`start --carried`) rather than generate, extract and train again."""
    fix_keys = next((j for j in pipeline["jobs"] if j["pipeline_step"] == "fix_keys"), None)
    if pipeline["state"] == "succeeded" or fix_keys is None or fix_keys["state"] != "succeeded":
        return
    try:
        save_draft(Path(fix_keys["result"]["dest"]), out)
    except ValueError as exc:  # a larger target's draft: the report still comes back
        print(f"the draft is not kept: {exc}", flush=True)
        return
    count = sum(1 for p in out.rglob("*") if p.is_file())
    if count > OUT_FILES:
        print(
            f"OUT holds {count} files and the device returns {OUT_FILES}: some will not come back", flush=True
        )


@dataclass(frozen=True)
class Carried:
    """The conversations back in WORK/carried; `complete` is false for a generate the call outlived."""

    training: Path
    training_complete: bool
    held_out: Path
    held_out_complete: bool  # false also when no held-out conversations were carried


def unpack(carried: Path, work: Path) -> Carried:
    """The carried conversations, whole again, in WORK/carried (inside the host's allowed root); gzip's
    checksum refuses a part missing or damaged. A file already there (an earlier call on this machine, which
    may still be completing it) is kept as it is."""
    folder = work / "carried"
    folder.mkdir(parents=True, exist_ok=True)
    found: dict[str, bool] = {}
    for name in (TRAINING, HELD_OUT):
        target = folder / name
        for suffix, complete in (("", True), (PARTIAL, False)):
            parts = _parts(carried, name + suffix)
            if parts and not target.exists():
                target.write_bytes(gzip.decompress(b"".join(p.read_bytes() for p in parts)))
            if parts:
                found[name] = complete
                break
    if TRAINING not in found:
        raise SystemExit(f"--carried {carried}: no {TRAINING}.gz.part* or {TRAINING}{PARTIAL}.gz.part* there")
    return Carried(folder / TRAINING, found[TRAINING], folder / HELD_OUT, found.get(HELD_OUT, False))


def _parts(carried: Path, name: str) -> list[Path]:
    return sorted(carried.glob(f"{name}.gz.part*"), key=lambda p: int(p.name.rsplit("part", 1)[1]))


def completion_jobs(spec: dict[str, Any], found: Carried, work: Path) -> list[dict[str, Any]]:
    """Generate jobs that finish what the carried files lack: each the pipeline step's own params as the
    template plans them for `spec`, written to the carried file (generate resumes it by default)."""
    from app.pipelines.schemas import Eagle3PipelineCreate  # the API's own planner: the very step params
    from app.pipelines.templates import eagle3_plan

    plan = {s.step: s for s in eagle3_plan(Eagle3PipelineCreate(**spec), str(work / "carried_plan"))}
    wanted = {"generate": (found.training, found.training_complete)}
    if "generate_held_out" in plan:
        wanted["generate_held_out"] = (found.held_out, found.held_out_complete)
    return [
        {"kind": "generate", "params": plan[step].params | {"output": str(path)}}
        for step, (path, complete) in wanted.items()
        if not complete
    ]


def complete_carried(
    http: httpx.Client, jobs: list[dict[str, Any]], out: Path, began: float, deadline_s: float
) -> bool:
    """Runs `jobs` one after the other (one target server at a time), or follows one already running on the
    same output (an earlier call on this machine). False when the deadline came first: then every output
    is saved to OUT, whole if its job succeeded and as partial otherwise, for the next call."""
    done: set[str] = set()
    for body in jobs:
        output = body["params"]["output"]
        job = _running_job(http, output) or _post(http, body)
        print(f"completing {output} with generate job {job['id']}", flush=True)
        ended = _wait(http, job, began, deadline_s)
        if ended is None:
            _save_at_deadline([Path(j["params"]["output"]) for j in jobs], done, out)
            return False
        if ended["state"] != "succeeded":
            raise SystemExit(f"completing {output}: generate {ended['state']}: {ended.get('message')}")
        done.add(output)
        print(f"{output}: {ended['result']['output_records']} records", flush=True)
    return True


def serve_jobs(spec: dict[str, Any], draft: Path, work: Path) -> dict[str, dict[str, Any]]:
    """The pipeline's serving steps (serve_held_out, benchmark) as benchmark jobs with the params the API's
    template plans for `spec`, serving DRAFT: what the pipeline would have run after fix_keys."""
    from app.pipelines.schemas import Eagle3PipelineCreate
    from app.pipelines.templates import eagle3_plan

    plan = {s.step: s for s in eagle3_plan(Eagle3PipelineCreate(**spec), str(work / "carried_plan"))}
    jobs = {}
    for step in ("serve_held_out", "benchmark"):
        if step in plan:
            params = json.loads(json.dumps(plan[step].params))  # a copy: the plan's launch is shared
            params["launch"]["draft"] = str(draft)
            jobs[step] = {"kind": "benchmark", "params": params}
    return jobs


def serve_carried(
    http: httpx.Client, jobs: dict[str, dict[str, Any]], out: Path, began: float, deadline_s: float
) -> list[dict[str, Any]]:
    """Runs the serving jobs one after the other (each holds the GPU) until they end or the deadline, and
    writes them as the API reads them to OUT/served.json and their logs to OUT/job_logs.txt."""
    ended: list[dict[str, Any]] = []
    for step, body in jobs.items():
        job = _wait(http, _post(http, body), began, deadline_s)
        if job is None:
            print(f"{step}: the deadline came first", flush=True)
            break
        ended.append(job | {"pipeline_step": step})
        print(f"== {step} {job['state']}: {json.dumps(job['result'])[:1500]}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "served.json").write_text(json.dumps(ended, indent=2))
    (out / "job_logs.txt").write_text(job_logs(http, ended))
    return ended


def _wait(http: httpx.Client, job: dict[str, Any], began: float, deadline_s: float) -> dict[str, Any] | None:
    """The job as the API reads it once it has ended; None when the deadline comes first."""
    while job["state"] not in ("succeeded", "failed", "cancelled"):
        if time.monotonic() - began > deadline_s:
            return None
        time.sleep(3)
        job = http.get(f"/v1/jobs/{job['id']}").json()
    return job


def _save_at_deadline(outputs: list[Path], done: set[str], out: Path) -> None:
    for path in outputs:
        if path.is_file():  # a job not started yet has written nothing (generate makes the file)
            save(path, out, path.name, complete=str(path) in done)


def _post(http: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    created = http.post("/v1/jobs", json={"host": "h200", **body})
    if created.status_code != 201:
        raise SystemExit(f"{body['kind']} job refused: {created.text}")
    job: dict[str, Any] = created.json()
    return job


def _running_job(http: httpx.Client, output: str) -> dict[str, Any] | None:
    """A generate job queued or running into OUTPUT (an earlier call's), asked by state: however many jobs
    the host has run, the unfinished ones are few."""
    for state in ("running", "queued"):
        listed = http.get("/v1/jobs", params={"kind": "generate", "state": state, "limit": 500}).json()
        found = [j for j in listed["items"] if j["params"].get("output") == output]
        if found:
            return found[0]
    return None


def carried_spec(
    spec: dict[str, Any], training: Path, held_out: Path | None, answer_tokens: int
) -> dict[str, Any]:
    """The GPU recipe's spec on carried conversations: `data` instead of generate, the held-out set (when
    the recipe has one) as conversations already answered, served with the budget they were answered with.
    When the recipe asks for fewer conversations than the file holds, extract takes the first that many."""
    carried = {k: v for k, v in spec.items() if k not in ("generate", "held_out")} | {"data": str(training)}
    asked = ((spec.get("generate") or {}).get("self_prompts") or {}).get("count")
    if asked is not None and _records(training) > asked:  # a slice of a larger carried set: its first N
        carried["extract"] = {**spec["extract"], "limit": asked}
    if held_out is None:
        return carried
    serve = spec["held_out"].get("serve", True)  # real_model.py start --no-serve-held-out turns it off
    return carried | {
        "held_out": {"conversations": str(held_out), "serve": serve, "max_new_tokens": answer_tokens}
    }


def spec_from_carried(
    http: httpx.Client, spec: dict[str, Any], carried: Path, work: Path, out: Path, began: float,
    deadline_s: float, answer_tokens: int,
) -> dict[str, Any] | None:  # fmt: skip
    """`start --carried`: the carried conversations completed where a call ended before generate did, then
    the spec on them. None when the deadline came first (the parts in OUT carry what was done so far)."""
    found = unpack(carried, work)
    if not complete_carried(http, completion_jobs(spec, found, work), out, began, deadline_s):
        print("not complete at the deadline: carry OUT's parts and call `start --carried` again", flush=True)
        return None
    held_out = found.held_out if "held_out" in spec else None
    return carried_spec(spec, found.training, held_out, answer_tokens)
