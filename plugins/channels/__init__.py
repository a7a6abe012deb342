"""Autoloop: plugins/channels."""
