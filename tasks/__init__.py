"""Celery stage tasks (init, run, eval) and what moves a job between them: stage bookkeeping,
revocation checks, budgets, exception callbacks and result persistence. No task-specific logic."""
