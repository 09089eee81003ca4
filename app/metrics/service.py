"""Prometheus exposition of eyas's state, read from the database at scrape time (the API is stateless)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.hosts.service import is_online
from app.metrics import repository


class _StateCollector(Collector):
    def __init__(self, session: Session, settings: Settings) -> None:
        self.session, self.settings = session, settings

    def collect(self) -> Iterator[Metric]:
        yield self._jobs()
        yield self._dispatch()
        lines = GaugeMetricFamily("eyas_log_lines_shipped", "log lines stored, over all jobs")
        lines.add_metric([], repository.log_lines_shipped(self.session))
        yield lines
        yield from self._hosts()
        yield from self._servers()

    def _jobs(self) -> GaugeMetricFamily:
        family = GaugeMetricFamily("eyas_jobs", "jobs by kind and state", labels=["kind", "state"])
        for kind, state, count in repository.jobs_by_kind_state(self.session):
            family.add_metric([kind, state], count)
        return family

    def _dispatch(self) -> HistogramMetricFamily:
        counts, total, seconds = repository.dispatch_latencies(self.session)
        buckets = [(str(b), c) for b, c in zip(repository.DISPATCH_BUCKETS_S, counts, strict=True)]
        buckets.append(("+Inf", total))
        return HistogramMetricFamily(
            "eyas_dispatch_latency_seconds",
            "queued to running, every job that ran",
            buckets=buckets,
            sum_value=seconds,
        )

    def _hosts(self) -> Iterator[GaugeMetricFamily]:
        online = GaugeMetricFamily("eyas_hosts_online", "hosts whose worker heartbeats")
        memory = GaugeMetricFamily("eyas_gpu_memory_used_mib", "GPU memory used", labels=["host", "gpu"])
        total = GaugeMetricFamily("eyas_gpu_memory_total_mib", "GPU memory", labels=["host", "gpu"])
        util = GaugeMetricFamily("eyas_gpu_utilization_percent", "GPU utilisation", labels=["host", "gpu"])
        hosts = repository.hosts(self.session)
        online.add_metric([], sum(1 for h in hosts if is_online(h, self.settings)))
        for host in hosts:
            for gpu in host.gpus or []:
                labels = [host.name, str(gpu.get("index"))]
                memory.add_metric(labels, float(gpu.get("memory_used_mib") or 0))
                total.add_metric(labels, float(gpu.get("memory_total_mib") or 0))
                if gpu.get("utilization_pct") is not None:
                    util.add_metric(labels, float(gpu["utilization_pct"]))
        yield from (online, memory, total, util)

    def _servers(self) -> Iterator[GaugeMetricFamily]:
        ready = GaugeMetricFamily("eyas_servers_ready", "servers answering /health_generate")
        accept = GaugeMetricFamily(
            "eyas_server_accept_length",
            "last acceptance length in the server's log",
            labels=["server", "host"],
        )
        servers = repository.servers(self.session)
        ready.add_metric([], sum(1 for s in servers if s.state == "ready"))
        for server in servers:
            if server.last_accept_len is not None:
                accept.add_metric([str(server.id), server.host or ""], server.last_accept_len)
        yield from (ready, accept)


def exposition(session: Session, settings: Settings) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StateCollector(session, settings))
    return generate_latest(registry)
