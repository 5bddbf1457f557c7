"""The sample repositories' tests run inside their own checkouts, never as part of the farm's suite."""

collect_ignore_glob = ["*"]
