"""AgentHandler plugins, one per task domain. See handlers/base.py for the interface."""
