"""The rollout viewer served at /ui: live farm, jobs, trajectories, runs and operator actions."""
