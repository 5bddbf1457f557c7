"""AgentHandler plugins, one per task domain. See farm/handler/protocol.py for the interface."""
