"""What the farm core knows of handlers: the AgentHandler protocol, the JobContext a stage hands
them, and the registry that finds them by name. The handlers themselves live in the `handlers`
package (and in third-party packages) and depend on this, never the reverse."""
