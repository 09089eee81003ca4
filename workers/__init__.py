"""eyas worker side: Celery tasks, stages, the process runner and host inspection."""
