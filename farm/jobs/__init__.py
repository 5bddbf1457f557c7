"""Job records in Redis: the spec a job was submitted with, its state machine, stage outputs, its result."""
