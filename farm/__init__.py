"""rollout-farm: rollout-as-a-service on Celery and Redis."""
