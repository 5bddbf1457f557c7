"""HTTP plumbing shared by the REST facade, the model gateway and the viewer: token checks and the
declared error responses. It knows none of them, so each can stand alone."""
