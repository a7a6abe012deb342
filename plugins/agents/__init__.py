"""Autoloop: plugins/agents."""
