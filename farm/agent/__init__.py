"""The farm's own tool-using agent: token-faithful context, the loop, and the policy client."""
