"""eyas API side: FastAPI app, models, domain services."""
