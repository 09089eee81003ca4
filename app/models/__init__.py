"""All ORM models, imported here so Alembic and the app see one metadata."""

from app.models.artifact import Artifact
from app.models.base import Base
from app.models.benchmark import BenchmarkResult
from app.models.host import GpuLease, Host
from app.models.job import IdempotencyKey, Job, JobDependency, JobEvent, JobMetric
from app.models.log import LogLine
from app.models.pipeline import Pipeline
from app.models.server import Server
from app.models.token import ApiToken

__all__ = [
    "ApiToken",
    "Artifact",
    "Base",
    "BenchmarkResult",
    "GpuLease",
    "Host",
    "IdempotencyKey",
    "Job",
    "JobDependency",
    "JobEvent",
    "JobMetric",
    "LogLine",
    "Pipeline",
    "Server",
]
